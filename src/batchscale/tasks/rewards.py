"""Reward functions: plain functions (response text, reference answer) -> float, chosen by name or "module:function".

Built-in rewards read the response's answer as `task.answer_format` says (tasks.answers: `strict`, `last_number`,
`hash`, `boxed`, `answer_tag`, `text`) and compare it with the reference answer; eval/accuracy is `answer_match` in the
same format, whatever the reward, so it counts exact answers:
- `answer_match`: 1.0 if the extracted answer equals the reference (tasks.answers.answers_match), else 0.0.
- `digit_match`: partial credit for integer answers: the fraction of digit positions, aligned from the right (units with
  units), where the extracted answer agrees with the reference, over the longer of the two; 1.0 exactly when
  `answer_match` is 1.0 (a non-integer answer gets 1.0 or 0.0). A dense reward gives GRPO groups unequal rewards far
  more often than a 0/1 reward, so a weak policy still gets a gradient; evaluation still scores exact answers.
- `prefix_match`: 1.0 if the stripped response starts with the stripped answer (the whole response: format `text`).
The names from before answer formats are aliases that fix their format (another task.answer_format is an error):
- `integer_match` = `answer_match` in `strict` (the first integer, as written: the built-in model's format);
- `last_integer_match` = `answer_match` in `last_number` (before: the last run of digits, so "2.5" read as 5; now a
  number's sign, commas and decimals are read, and "2.50" equals "2.5");
- `exact_match` = `answer_match` in `text` (the stripped response equals the stripped answer).
In `strict`, `integer_match` and `digit_match` are bit for bit the functions of the same names before formats existed.

Built-ins run in-process, for speed. A user's `"module:function"` runs in a worker process (`UserReward`): the module
is imported there, each batch of (response, answer) pairs goes over a pipe, and the batch must come back within
`task.reward_timeout_s` (default 10 s), else the worker is killed and the run stops with a one-line error. An exception
in the function, or a value that is not a number, is a one-line UserError naming the function, the input's index in
the batch, and what it raised or returned. The worker dies with its parent (`batchscale.processes`). A user reward
reads the whole response; with `task.answer_format` set, eval/accuracy is still `answer_match` in that format.
"""

from __future__ import annotations

import importlib
import numbers
import os
import re
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

from batchscale.errors import UserError
from batchscale.tasks.answers import ANSWER_FORMATS, answers_match, extract_answer, normalize_answer, reference_answer

RewardFn = Callable[[str, str], float]  # (response text, reference answer) -> reward

DEFAULT_TIMEOUT_S = 10.0
IMPORT_TIMEOUT_S = 60.0  # starting the worker and importing the user's module (once per run)
SHOWN_CHARS = 80  # of a response, an answer or a returned value in an error message


_INTEGER_TEXT = re.compile(r"-?[0-9]+")


def digit_agreement(predicted: str, expected: str) -> float:
    """The share of right-aligned character positions where two texts agree, over the longer (digit_match)."""
    agree = sum(a == b for a, b in zip(reversed(predicted), reversed(expected)))
    return agree / max(len(predicted), len(expected))


@dataclass(frozen=True)
class AnswerReward:
    """A built-in reward: the answer extracted in `answer_format`, compared with the reference: `match` (1.0 or 0.0)
    or `digits` (digit_agreement of integers). Picklable and in-process."""

    comparison: str  # "match" or "digits"
    answer_format: str
    name: str

    def __call__(self, response: str, answer: str) -> float:
        extracted = extract_answer(response, self.answer_format)
        if self.comparison == "match":
            return float(answers_match(extracted, answer, self.answer_format))
        if extracted is None:
            return 0.0
        if self.answer_format == "strict":  # as written, as before formats existed
            return digit_agreement(extracted, answer.strip())
        predicted = normalize_answer(extracted)
        expected = normalize_answer(reference_answer(answer, self.answer_format))
        if _INTEGER_TEXT.fullmatch(predicted) and _INTEGER_TEXT.fullmatch(expected):
            return digit_agreement(predicted, expected)
        return float(predicted == expected)  # not integers: no digits to credit


def prefix_match(response: str, answer: str) -> float:
    return float(response.strip().startswith(answer.strip()))


integer_match = AnswerReward("match", "strict", "integer_match")
last_integer_match = AnswerReward("match", "last_number", "last_integer_match")
exact_match = AnswerReward("match", "text", "exact_match")
digit_match = AnswerReward("digits", "strict", "digit_match")
answer_match = AnswerReward("match", "strict", "answer_match")  # in the built-in model's format; others: resolve_reward
ALIAS_FORMATS = {"integer_match": "strict", "last_integer_match": "last_number", "exact_match": "text",
                 "prefix_match": "text"}  # the names that fix their answer format
REWARDS: dict[str, RewardFn] = {"answer_match": answer_match, "digit_match": digit_match, "prefix_match": prefix_match,
                                "integer_match": integer_match, "last_integer_match": last_integer_match,
                                "exact_match": exact_match}


def answer_format_of(reward: str, answer_format: str | None, task_default: str) -> str:
    """The answer format a task reads responses in: task.answer_format when set, else the one a reward name fixes
    (ALIAS_FORMATS), else the task's own default."""
    if answer_format is not None:
        return answer_format
    return ALIAS_FORMATS.get(reward, task_default)


def accuracy_reward(answer_format: str) -> RewardFn:
    """What eval/accuracy counts: answer_match in `answer_format`."""
    return REWARDS["answer_match"] if answer_format == "strict" else AnswerReward("match", answer_format, "answer_match")


def resolve_reward(spec: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                   answer_format: str | None = None) -> "RewardFn | UserReward":
    """A built-in name (its function, reading `answer_format`; None: the name's own, `strict` for answer_match and
    digit_match), or "package.module:function" importable from the current environment (a `UserReward`, started
    here: an import error is raised now, before any compute)."""
    if spec in ALIAS_FORMATS:
        if answer_format not in (None, ALIAS_FORMATS[spec]):
            raise UserError("task.reward", f"{spec} reads answers in the format {ALIAS_FORMATS[spec]!r}, but "
                            f"task.answer_format = {answer_format!r}",
                            "set task.reward = 'answer_match' (or 'digit_match'): they read task.answer_format")
        return REWARDS[spec]
    if spec in ("answer_match", "digit_match"):
        if answer_format is not None and answer_format not in ANSWER_FORMATS:
            raise ValueError(f"unknown answer format {answer_format!r}")
        if answer_format in (None, "strict"):
            return REWARDS[spec]
        return AnswerReward("match" if spec == "answer_match" else "digits", answer_format, spec)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UserError("task.reward", f"unknown reward {spec!r}",
                        f"use one of {', '.join(REWARDS)} or 'module:function'")
    return UserReward(spec, timeout_s)


def score_batch(reward: "RewardFn | UserReward", responses: Sequence[str], answers: Sequence[str]) -> list[float]:
    """Rewards of a batch: a built-in in-process, a user reward in its worker."""
    if isinstance(reward, UserReward):
        return reward.score(responses, answers)
    return [float(reward(r, a)) for r, a in zip(responses, answers, strict=True)]


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


class UserReward:
    """A user's reward function run in a worker process with a per-batch timeout (see the module docstring).

    The worker is a fresh interpreter (`python -m batchscale.tasks.reward_worker`), not a multiprocessing child: it
    neither forks a process holding torch's thread pools nor re-imports the caller's main script (which spawn would
    do, re-running a user's unguarded training script). It talks over a socket pair with pickled messages, and
    inherits this process's sys.path, so the module imports there exactly as it would here."""

    def __init__(self, spec: str, timeout_s: float = DEFAULT_TIMEOUT_S):
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        self.spec, self.timeout_s = spec, float(timeout_s)
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "batchscale.tasks.reward_worker", str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=2, env=env)  # its prints go to stderr
        theirs.close()
        self._conn = Connection(ours.detach())
        self._finalizer = weakref.finalize(self, stop_worker, self._process, self._conn)
        self._conn.send(spec)
        if not self._conn.poll(IMPORT_TIMEOUT_S):
            self._process.kill()
            self.close()
            raise UserError("task.reward", f"importing {spec!r} took longer than {IMPORT_TIMEOUT_S:.0f} s",
                            "make the module quick to import")
        reply = self._receive("starting")
        if reply[0] != "ready":
            self.close()
            raise UserError("task.reward", f"cannot import {spec!r} ({reply[1]})",
                            "make the module importable (e.g. on PYTHONPATH) and point at a function "
                            "(response, answer) -> float")

    def __call__(self, response: str, answer: str) -> float:
        return self.score([response], [answer])[0]

    def score(self, responses: Sequence[str], answers: Sequence[str]) -> list[float]:
        responses, answers = list(responses), list(answers)
        if len(responses) != len(answers):
            raise ValueError(f"{len(responses)} responses for {len(answers)} answers")
        if self._process.poll() is not None:
            raise UserError("task.reward", f"the worker process of {self.spec!r} is no longer running",
                            "rerun; if it keeps dying, check the function for crashes")
        self._conn.send((responses, answers))
        if not self._conn.poll(self.timeout_s):
            self._process.kill()
            self.close()
            raise UserError("task.reward", f"{self.spec} did not return within task.reward_timeout_s = "
                            f"{self.timeout_s:g} s on a batch of {len(responses)} responses (it was stopped)",
                            "make the function faster, or raise task.reward_timeout_s")
        reply = self._receive(f"scoring a batch of {len(responses)} responses")
        if reply[0] == "ok":
            return reply[1]
        kind, index, what = reply
        where = f"for input {index} (response {_shown(responses[index])}, answer {_shown(answers[index])})"
        if kind == "raised":
            raise UserError(f"task.reward {self.spec}", f"raised {what} {where}",
                            "fix the function: it must return a number for every (response, answer)")
        raise UserError(f"task.reward {self.spec}", f"returned {what} {where}, not a number",
                        "return an int or a float (e.g. 1.0 for a correct answer, 0.0 otherwise)")

    def _receive(self, doing: str) -> tuple:
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            code = self._process.wait(timeout=5)
            self.close()
            raise UserError("task.reward", f"the worker process of {self.spec!r} died while {doing} (exit code "
                            f"{code})", "check the function for crashes (os._exit, a segfault in an extension)") from None

    def close(self) -> None:
        self._finalizer()

    def __getstate__(self):
        raise TypeError("a UserReward owns a worker process and cannot be pickled")


def stop_worker(process, conn) -> None:
    """Tell a worker to stop (None), give it a second, then kill it; close the connection."""
    try:
        conn.send(None)
    except (OSError, ValueError):
        pass
    try:
        process.wait(timeout=1.0)
    except Exception:  # subprocess.TimeoutExpired
        process.kill()
        process.wait()
    conn.close()


def serve_reward(conn, parent_pid: int) -> None:
    """The worker: receive the spec, import it, say ready, then score batches until told to stop (None) or the
    connection closes."""
    from batchscale.processes import die_with_parent

    die_with_parent(parent_pid)
    spec = conn.recv()
    module_name, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except BaseException as e:  # the module's own import-time code may raise anything
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    if not callable(fn):
        conn.send(("error", f"{attr} is a {type(fn).__name__}, not a function"))
        return
    conn.send(("ready",))
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return
        if batch is None:
            return
        conn.send(_score_in_worker(fn, *batch))


def _score_in_worker(fn, responses: list[str], answers: list[str]) -> tuple:
    values = []
    for index, (response, answer) in enumerate(zip(responses, answers)):
        try:
            value = fn(response, answer)
        except Exception as e:
            return ("raised", index, f"{type(e).__name__}: {str(e)[:SHOWN_CHARS]}")
        if not isinstance(value, numbers.Real):
            return ("returned", index, f"{_shown(value)} ({type(value).__name__})")
        values.append(float(value))
    return ("ok", values)
