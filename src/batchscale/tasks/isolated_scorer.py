"""reasoning-gym's `score_answer` run away from the trainer: a worker process that builds the dataset once and scores
each answer in a fresh confined child, so that an answer a scorer evaluates as code (eval, sympy's parse_expr) can
neither touch a file, nor reach the network, nor change how the next answer is scored.

The worker (`python -m batchscale.tasks.scorer_worker FD PARENT_PID`, started by `IsolatedScorer`) is a fresh
interpreter in a fresh empty temporary directory, with no inherited file descriptor but its end of a socket pair,
stdin/stdout/stderr on /dev/null and a minimal environment. It first moves into its own network namespace where the
host allows it (tasks.confinement.isolate_network), builds the pool (`reasoning_gym.create_dataset`, the parent's own
arguments), scores a few fixed answers so that every module the scorer loads lazily is loaded, then confines itself
with Landlock (read-only access to the Python library, nothing else) and says ready, naming what was applied. Then,
per answer: fork; the child drops every descriptor but a pipe, lowers its limits (address space: its size plus
ANSWER_MEMORY_BYTES; CPU: the time limit; no file bytes, no processes, a few descriptors), scores, writes one JSON
line and exits; the worker kills it at `answer_timeout_s`. A child is never reused, so whatever an answer did to the
interpreter's state dies with it.

The trainer sends each answer with its dataset entry (pickled: the worker trusts its parent), not the entry's index:
some datasets generate item i differently in another process (polynomial_multiplication's polynomial depends on
Python's hash seed), so the worker scores against exactly what the model was shown. Every reply is JSON (never
pickle: the worker runs what answers say, so its replies are hostile input) of bounded size. A reply per answer: {"score": x}, {"raised": "Type: message"} (an Exception out of score_answer: a library bug,
which the caller reports), or {"stopped": why} (the answer hung the scorer, exhausted its memory, killed it, or raised
SystemExit-like BaseException: the caller scores it as no answer).
"""

from __future__ import annotations

import json
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import weakref
from multiprocessing.connection import Connection

from batchscale.errors import UserError
from batchscale.tasks.rewards import stop_worker

START_TIMEOUT_S = 300.0  # importing reasoning-gym and building the pool, once per run
ANSWER_TIMEOUT_S = 10.0
ANSWER_MEMORY_BYTES = 2 << 30
ANSWER_OPEN_FILES = 16
BACKSTOP_S = 30.0  # beyond the worker's own per-answer limit: a worker that stops answering is killed
MAX_REPLY_BYTES = 4096
SHOWN_CHARS = 80
WARM_UP_ANSWERS = ("0", "x", "[[1, 2], [3, 4]]", "['a', 'b']", "x**2/2 + C", "1 + 2*3")
LIBRARY_MODULES = ("reasoning_gym", "sympy", "mpmath", "numpy")  # their directories stay readable when confined


def _send(conn: Connection, obj) -> None:
    conn.send_bytes(json.dumps(obj).encode())


def _receive(conn: Connection, limit: int):
    """A worker's reply: JSON of at most `limit` bytes (OSError beyond it)."""
    return json.loads(conn.recv_bytes(limit).decode("utf-8"))


class IsolatedScorer:
    """A dataset's score_answer in a confined worker (module docstring). `require_confinement`: refuse, naming the
    dataset, where Landlock cannot be applied (for scorers that evaluate arbitrary text)."""

    def __init__(self, dataset: str, kwargs: dict, require_confinement: bool, answer_timeout_s: float | None = None):
        self.dataset = dataset
        self.answer_timeout_s = float(ANSWER_TIMEOUT_S if answer_timeout_s is None else answer_timeout_s)
        self.home = tempfile.mkdtemp(prefix="batchscale-scorer-")
        ours, theirs = socket.socketpair()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.home, "TMPDIR": self.home,
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "PYTHONDONTWRITEBYTECODE": "1",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LC_ALL": "C.UTF-8"}
        self._process = subprocess.Popen(
            [sys.executable, "-s", "-m", "batchscale.tasks.scorer_worker", str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd=self.home, env=env, start_new_session=True)  # Ctrl-C is the trainer's
        theirs.close()
        self._conn = Connection(ours.detach())
        self._finalizer = weakref.finalize(self, _stop_worker, self._process, self._conn, self.home)
        self._conn.send({"dataset": dataset, "kwargs": kwargs, "require_confinement": require_confinement,
                         "answer_timeout_s": self.answer_timeout_s})
        reply = self._reply(START_TIMEOUT_S, "starting")
        if "ready" not in reply:
            self.close()
            why = str(reply.get("refused") or reply.get("error"))[:300]
            if "refused" in reply:
                raise UserError("task.dataset", f"reasoning-gym's {dataset!r} scores an answer by evaluating it as "
                                f"Python, which batchscale runs only in a confined process, and {why}",
                                "run on a Linux kernel with Landlock (5.13+), or choose another dataset")
            raise UserError("task.dataset", f"the scoring worker of {dataset!r} could not start ({why})",
                            "check that reasoning-gym imports in this environment")
        self.confinement = reply["ready"]

    def score(self, entries: list[dict], answers: list[str]) -> list[dict]:
        """One reply per (dataset entry, answer) (module docstring), in order."""
        if self._process.poll() is not None:
            raise UserError("task.dataset", f"the scoring worker of {self.dataset!r} is no longer running", "rerun")
        self._conn.send(list(zip(entries, [str(a) for a in answers], strict=True)))
        replies = []
        for answer in answers:
            reply = self._reply(self.answer_timeout_s + BACKSTOP_S, f"scoring the answer {answer[:SHOWN_CHARS]!r}")
            replies.append(_checked(reply))
        return replies

    def _reply(self, timeout_s: float, doing: str) -> dict:
        failed = None
        try:
            if not self._conn.poll(timeout_s):
                failed = f"did not answer within {timeout_s:g} s"
            else:
                reply = _receive(self._conn, MAX_REPLY_BYTES)
                if isinstance(reply, dict):
                    return reply
                failed = "sent a malformed reply"
        except (EOFError, OSError, ValueError):  # ValueError: not JSON, or not UTF-8
            failed = "died"
        self._process.kill()
        self.close()
        raise UserError("task.dataset", f"the scoring worker of {self.dataset!r} {failed} while {doing}",
                        "rerun; if it keeps happening, choose another dataset")

    def close(self) -> None:
        self._finalizer()

    def __getstate__(self):
        raise TypeError("an IsolatedScorer owns a worker process and cannot be pickled")


def _checked(reply: dict) -> dict:
    """A reply of one of the three forms, its fields of the right types; anything else is a malformed reply."""
    score = reply.get("score")
    if len(reply) == 1 and isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
        return {"score": float(score)}
    for key in ("raised", "stopped"):
        if len(reply) == 1 and isinstance(reply.get(key), str):
            return {key: reply[key][:200]}
    return {"stopped": "its scorer sent a malformed reply"}


def _stop_worker(process, conn, home: str) -> None:
    stop_worker(process, conn)
    shutil.rmtree(home, ignore_errors=True)  # ours: made by mkdtemp above


# ---- the worker side (python -m batchscale.tasks.scorer_worker) ----

def readable_directories() -> list[str]:
    """What a confined scorer may read: the Python library (the standard library and site-packages) and the
    directories of LIBRARY_MODULES wherever they are installed."""
    paths = [sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    for name in LIBRARY_MODULES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            paths.append(os.path.dirname(module.__file__))
    return [os.path.realpath(p) for p in paths]


def serve_scorer(conn: Connection, parent_pid: int) -> None:
    """The worker: isolate, build, warm up, confine, say ready, then score batches until told to stop (None)."""
    from batchscale.processes import die_with_parent
    from batchscale.tasks import confinement

    die_with_parent(parent_pid)
    network_isolated = confinement.isolate_network()  # first: unshare needs a single-threaded process
    request = conn.recv()  # from the trainer, our parent: trusted
    try:
        import reasoning_gym

        pool = reasoning_gym.create_dataset(request["dataset"], **request["kwargs"])
        entry = pool[0]
        for answer in (str(entry["answer"]), *WARM_UP_ANSWERS):  # loads what the scorer imports lazily
            try:
                pool.score_answer(answer, entry)
            except Exception:  # noqa: BLE001 - a warm-up answer the scorer dislikes is no problem
                pass
    except Exception as e:  # noqa: BLE001 - reported to the trainer, which stops with it
        _send(conn, {"error": f"{type(e).__name__}: {str(e)[:200]}"})
        return
    report = {"network_namespace": network_isolated}
    try:
        report.update(confinement.restrict_filesystem(readable_directories()))
    except OSError as e:
        if request["require_confinement"]:
            _send(conn, {"refused": str(e.strerror or e)})
            return
        report["landlock_abi"] = 0
    _send(conn, {"ready": report})
    timeout_s = float(request["answer_timeout_s"])
    while True:
        try:
            items = conn.recv()
        except (EOFError, OSError):
            return
        if items is None:
            return
        for entry, answer in items:
            _send(conn, score_in_child(pool, entry, answer, timeout_s))


def score_in_child(pool, entry: dict, answer: str, timeout_s: float) -> dict:
    """Fork a child that scores `answer` under limits and reports on a pipe; killed at `timeout_s`."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        _child(pool, entry, answer, timeout_s, write_end)
    os.close(write_end)
    data, deadline = b"", time.monotonic() + timeout_s
    try:
        while len(data) <= MAX_REPLY_BYTES:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                break
            chunk = os.read(read_end, MAX_REPLY_BYTES)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read_end)
    timed_out = time.monotonic() >= deadline
    try:
        os.kill(pid, signal.SIGKILL)  # done or not, the child ends here
    except ProcessLookupError:
        pass
    _, status = os.waitpid(pid, 0)
    try:
        reply = json.loads(data.decode("utf-8"))
        if isinstance(reply, dict):
            return reply
    except ValueError:
        pass
    if timed_out:
        return {"stopped": f"took longer than {timeout_s:g} s"}
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) != signal.SIGKILL:
        return {"stopped": f"killed its scorer ({signal.Signals(os.WTERMSIG(status)).name})"}
    return {"stopped": "ended its scorer without a score"}


def _child(pool, entry: dict, answer: str, timeout_s: float, write_end: int) -> None:
    from batchscale.tasks import confinement

    try:
        os.dup2(write_end, 3)
        os.closerange(4, 1 << 16)  # the trainer's socket above all: an answer never talks to the trainer
        confinement.limit_resources(confinement.address_space_bytes() + ANSWER_MEMORY_BYTES,
                                    math.ceil(timeout_s) + 1, ANSWER_OPEN_FILES)
        try:
            score = pool.score_answer(answer, entry)
            reply = {"score": float(score)} if isinstance(score, (int, float)) and math.isfinite(score) else \
                {"raised": f"returned {str(score)[:SHOWN_CHARS]!r}, not a finite number"}
        except Exception as e:  # noqa: BLE001 - the library's bug: reported, the caller stops the run
            reply = {"raised": f"{type(e).__name__}: {str(e)[:SHOWN_CHARS]}"}
        except BaseException as e:  # SystemExit and the like: only an evaluated answer raises them
            reply = {"stopped": f"raised {type(e).__name__}"}
        os.write(3, json.dumps(reply).encode()[:MAX_REPLY_BYTES])
    finally:
        os._exit(0)
