"""A sweep's progress, in a terminal and in any log.

In a terminal (a console that draws live displays) `SweepProgress` is the rich display: a bar of runs done / total
and one bar per active run with its samples, reward and eval accuracy; stopped points, failures and notes print above
it. Anywhere else (`make demo > log`, `| tee`, CI, a Ray task's log) it prints plain lines instead:

    run 5/12 done: grpo-P8-G8-sqrt seed 1, 6,144 samples, final eval 0.590, N* 3,882, 41 s; 7 runs left, ETA 4m 50s
    run 6/12 failed: grpo-P64-G8-sqrt seed 0: the loss is not finite at step 3; 6 runs left, ETA 4m 06s
    stopped grpo-P64-G8-sqrt: cannot win (T > 41 s at N = 5,120)
    sweep: 6/12 runs done, 5m 10s; running: grpo-P4-G8-sqrt seed 0 at 2,048/6,144 samples, reward 0.312, eval 0.402

the last a heartbeat, printed whenever `heartbeat_s` seconds pass with no other line (a background thread, stopped on
exit: nothing is printed after the context closes). The ETA is ceil(runs left / workers) x the mean wall time of the
runs finished in this session ("ETA unknown" before the first); with `workers=1`, runs left x that mean.

Intended use in the sweep driver (the events are what `sweep.runner.run_point` posts):

    with SweepProgress(len(points), len(state.finished), workers=workers) as progress:
        def on_events(events):
            for kind, name, payload in events:
                if kind == "start":
                    progress.run_started(name, totals[name])
                elif kind == "record":
                    progress.record(name, payload)
        ...
        for (point, staging), outcome in outcomes:
            if isinstance(outcome, BaseException):
                progress.run_failed(point.name, str(outcome), runs_left=planned_left)
            else:
                progress.run_finished(point.name, point.label, point.seed, outcome["samples"], outcome["eval_end"],
                                      samples_to_target, outcome["wall_s"], runs_left=planned_left)
        progress.point_stopped(label, "cannot win (T > 41 s at N = 5,120)")
        progress.add_runs(2); progress.note("P8 and P16 cannot be told apart yet: 1 more seed each")

`runs_left` counts the runs still to finish, the running ones included; after each finished or failed run the total
is runs done + runs left, so a racing sweep's plan may grow or shrink (`add_runs` grows it between finishes).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from rich.console import Console
from batchscale.markup import console_text as escape  # names are data: controls and bidi shown inert
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from batchscale.console import HEARTBEAT_S, Heartbeat, draws_live, format_duration
from batchscale.console import console as shared_console
from batchscale.rundir import parse_run_dir_name



def display_name(name: str, label: str | None = None, seed: int | None = None) -> str:
    """`grpo-P8-G8-sqrt seed 1` for the run `grpo-P8-G8-sqrt__s1` (or the given label and seed)."""
    if label is None and (parsed := parse_run_dir_name(name)):
        label, seed = parsed
    if label is None:
        return name
    return label if seed is None else f"{label} seed {seed}"


@dataclass
class ActiveRun:
    display: str
    total: int
    samples: int = 0
    reward: float | None = None
    eval: float | None = None
    bar: int | None = None  # its task in the rich display

    def status(self) -> str:
        parts = [] if self.reward is None else [f"reward {self.reward:.3f}"]
        parts += [] if self.eval is None else [f"eval {self.eval:.3f}"]
        return "  ".join(parts) or "starting"

    def line(self) -> str:
        if not self.samples and self.reward is None and self.eval is None:
            return f"{self.display} starting"
        known = "".join(f", {part}" for part in self.status().split("  "))
        return f"{self.display} at {self.samples:,}/{self.total:,} samples{known}"


class SweepProgress:
    """Progress of one sweep session: `total_runs` in the sweep, `finished_runs` of them already done before it."""

    def __init__(self, total_runs: int, finished_runs: int, console: Console | None = None,
                 heartbeat_s: float = HEARTBEAT_S, workers: int = 1):
        self.console = console or shared_console
        self.live = draws_live(self.console)
        self.total, self.done, self.workers = total_runs, finished_runs, max(1, workers)
        self.walls: list[float] = []  # wall seconds of the runs finished in this session
        self.active: dict[str, ActiveRun] = {}
        self.started = time.monotonic()
        self._heartbeat = Heartbeat(self.console, heartbeat_s, self._beat)
        self._lock = self._heartbeat.lock
        self._progress: Progress | None = None
        self._overall: int | None = None
        self._closed = False

    def __enter__(self) -> SweepProgress:
        self.started = time.monotonic()
        if self.live:
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                                      TimeRemainingColumn(), console=self.console)
            self._progress.__enter__()
            self._overall = self._progress.add_task("runs", total=self.total, completed=self.done, status="")
        else:
            self._heartbeat.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._closed = True
        self._heartbeat.close()
        if self._progress is not None:
            self._progress.__exit__(*exc)

    # events from the runs

    def run_started(self, name: str, total_samples: int, label: str | None = None, seed: int | None = None) -> None:
        with self._lock:
            run = ActiveRun(display_name(name, label, seed), total_samples)
            if self._progress is not None:
                run.bar = self._progress.add_task(escape(name), total=total_samples, status="starting")
            self.active[name] = run

    def record(self, name: str, payload: dict) -> None:
        """A worker's record: {"kind": "step", "samples", "reward/mean"} or {"kind": "eval", "samples",
        "eval/accuracy"}; one for a run that has not started (or has finished) is ignored."""
        with self._lock:
            run = self.active.get(name)
            if run is None:
                return
            run.samples = max(run.samples, int(payload.get("samples") or 0))
            if payload.get("reward/mean") is not None:
                run.reward = float(payload["reward/mean"])
            if payload.get("eval/accuracy") is not None:
                run.eval = float(payload["eval/accuracy"])
            if self._progress is not None and run.bar is not None:
                self._progress.update(run.bar, completed=run.samples, status=run.status())

    def run_finished(self, name: str, label: str, seed: int, samples: int, final_eval: float | None,
                     samples_to_target: float | None, wall_s: float, runs_left: int, target_known: bool = True) -> None:
        """`target_known` False: no target yet (a racing sweep's reference seeds fix it), so no N* to show."""
        with self._lock:
            self._end(name, runs_left)
            self.walls.append(float(wall_s))
            evaluated = "no eval" if final_eval is None else f"final eval {final_eval:.3f}"
            reached = ("target not fixed yet" if not target_known else "N* not reached" if samples_to_target is None
                       else f"N* {round(samples_to_target):,}")
            self._plain(f"run {self.done}/{self.total} done: {display_name(name, label, seed)}, {samples:,} samples, "
                        f"{evaluated}, {reached}, {format_duration(wall_s)}; {self.left(runs_left)}")

    def run_failed(self, name: str, reason: str, runs_left: int) -> None:
        with self._lock:
            display = self.active[name].display if name in self.active else display_name(name)
            self._end(name, runs_left)
            self._always(f"run {self.done}/{self.total} failed: {display}: {reason}; {self.left(runs_left)}")

    # decisions of the sweep

    def point_stopped(self, label: str, message: str) -> None:
        with self._lock:
            self._always(f"stopped {label}: {message}")

    def add_runs(self, n: int) -> None:
        with self._lock:
            self.total = max(self.done, self.total + n)
            self._update_overall()

    def note(self, text: str) -> None:
        with self._lock:
            self._always(text)

    # text

    def eta_s(self, runs_left: int) -> float | None:
        """ceil(runs_left / workers) x the mean wall time of this session's finished runs; None before the first."""
        if not self.walls:
            return None
        return math.ceil(max(0, runs_left) / self.workers) * (sum(self.walls) / len(self.walls))

    def left(self, runs_left: int) -> str:
        if runs_left <= 0:
            return "no runs left"
        eta = self.eta_s(runs_left)
        return (f"{runs_left} run{'s' if runs_left != 1 else ''} left, "
                f"ETA {'unknown' if eta is None else format_duration(eta)}")

    def _beat(self) -> str:
        running = "; ".join(run.line() for run in self.active.values()) or "waiting for the next run to start"
        return (f"sweep: {self.done}/{self.total} runs done, {format_duration(time.monotonic() - self.started)}; "
                f"running: {running}")

    def _end(self, name: str, runs_left: int) -> None:
        run = self.active.pop(name, None)
        if self._progress is not None and run is not None and run.bar is not None:
            self._progress.remove_task(run.bar)
        self.done += 1
        self.total = self.done + max(0, runs_left)
        self._update_overall()

    def _update_overall(self) -> None:
        if self._progress is not None and self._overall is not None:
            self._progress.update(self._overall, total=self.total, completed=self.done)

    def _plain(self, line: str) -> None:
        """A line for logs only: in a terminal the display already shows it."""
        if not self.live:
            self._heartbeat.say(line)

    def _always(self, line: str) -> None:
        """A line for both: in a terminal it prints above the display."""
        if self._closed:
            return
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            self._heartbeat.say(line)
