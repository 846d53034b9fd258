"""What every long phase prints: a rich display in a terminal, plain lines and heartbeats in a pipe.

A rich display draws nothing when its console is not a terminal (`make demo > log`, `| tee`, CI, a Ray task's log),
so there progress goes out as plain lines instead, and a heartbeat line whenever `HEARTBEAT_S` seconds pass with
nothing printed (`Heartbeat`). `long_phase` gives that guarantee to a long phase outside a run (the tiny model's warm
start before a sweep, the profiles); a training run's bar is `train.run_progress`, a sweep's `sweep.progress`.

Everything is drawn on stderr (`console`) so that stdout stays clean for `--json`.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

console = Console(stderr=True)


def print_plain(line: str) -> None:
    """A log line on the console as it is: labels and paths in it are data, never rich markup."""
    console.print(line, markup=False, highlight=False)


HEARTBEAT_S = 30.0  # a log hears from a quiet phase at least this often


def _shared_console() -> Console:
    return console  # the module's, read at call time (the parameter `console` of long_phase shadows it)


def draws_live(target: Console) -> bool:
    """Whether a rich live display (Progress, Status) draws on this console: a terminal that is not dumb, or Jupyter.
    Where it does not, progress must go out as plain lines."""
    return target.is_jupyter or (target.is_terminal and not target.is_dumb_terminal)


def format_duration(seconds: float) -> str:
    """41 s, 4m 50s, 1h 02m."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


class Heartbeat:
    """Plain lines on a console, and a background thread that prints `beat()`'s line whenever `every_s` seconds pass
    with no line printed. Every line goes out under `lock` (an RLock), so a caller that mutates what `beat` reads
    holds it too. After `close()` returns nothing more is printed, by the thread or by `say`."""

    def __init__(self, target: Console, every_s: float, beat: Callable[[], str | None]):
        if every_s <= 0:
            raise ValueError(f"heartbeat interval must be > 0, got {every_s}")
        self.console, self.every_s, self.beat = target, every_s, beat
        self.lock = threading.RLock()
        self._last = time.monotonic()
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        with self.lock:
            if self._thread is None and not self._closed:
                self._last = time.monotonic()
                self._thread = threading.Thread(target=self._run, name="batchscale-heartbeat", daemon=True)
                self._thread.start()
        return self

    def say(self, line: str) -> None:
        """Print one plain line (no markup, no wrapping) and restart the quiet-time clock."""
        with self.lock:
            if self._closed:
                return
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
            self._last = time.monotonic()

    def touch(self) -> None:
        """Something else was printed: restart the quiet-time clock."""
        with self.lock:
            self._last = time.monotonic()

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self.lock:
                wait = self._last + self.every_s - time.monotonic()
            if self._stop.wait(max(wait, 0.01)):
                return
            with self.lock:
                if self._closed:
                    return
                if time.monotonic() - self._last < self.every_s:
                    continue
                line = self.beat()
                if line:
                    self.console.print(line, markup=False, highlight=False, soft_wrap=True)
                self._last = time.monotonic()  # an empty beat waits a full interval too


class Phase:
    """What `long_phase` yields: `relay(log)` wraps a log callback so that its lines count as output (they restart
    the heartbeat's clock) and, for a phase that waits to be announced, the first one starts the phase."""

    def __init__(self, title: str, target: Console, heartbeat_s: float, announce: bool):
        self.title, self.console, self.announce = title, target, announce
        self.plain = not draws_live(target)
        self.started: float | None = None
        self._heartbeat = Heartbeat(target, heartbeat_s, self._beat)

    def _beat(self) -> str:
        return f"still working: {self.title} ({format_duration(time.monotonic() - self.started)})"

    def _start(self, line: str | None) -> None:
        self.started = time.monotonic()
        if line is not None:
            self._heartbeat.say(line)
        if self.plain:
            self._heartbeat.start()

    def relay(self, log: Callable[[str], None]) -> Callable[[str], None]:
        def relayed(line: str) -> None:
            with self._heartbeat.lock:
                if self.started is None:
                    self._start(None)
                log(line)
                self._heartbeat.touch()
        return relayed

    def close(self, failed: bool) -> None:
        self._heartbeat.close()
        if self.started is not None:
            how = "stopped after" if failed else "done in"
            self.console.print(f"{self.title}: {how} {format_duration(time.monotonic() - self.started)}",
                               markup=False, highlight=False, soft_wrap=True)


@contextmanager
def long_phase(title: str, console: Console | None = None, heartbeat_s: float = HEARTBEAT_S,
               announce: bool = True) -> Iterator[Phase]:
    """A long phase that any log hears from: "title..." at the start, "still working: title (1m 30s)" whenever
    `heartbeat_s` seconds pass with nothing printed (only where the console draws no live display: a pipe, a file),
    and "title: done in 2m 10s" at the end ("stopped after" if it raised). With `announce=False` the phase stays
    silent until the first line of a log wrapped by `phase.relay` (a cached model that needs no build prints
    nothing at all). Pass the phase's own log lines through `phase.relay(log)` so they count as output."""
    phase = Phase(title, console or _shared_console(), heartbeat_s, announce)
    if announce:
        phase._start(f"{title}...")
    failed = True
    try:
        yield phase
        failed = False
    finally:
        phase.close(failed)


def in_long_phase(title: str):
    """Decorate a function with a `log` parameter so that its call is a `long_phase(title)` and its log relayed."""
    def decorate(fn):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            with long_phase(title) as phase:
                bound.arguments["log"] = phase.relay(bound.arguments["log"])
                return fn(*bound.args, **bound.kwargs)
        return wrapper
    return decorate
