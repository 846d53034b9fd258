"""The built-in task: integer arithmetic with a verifiable answer, generated procedurally.

Operands are uniform over [0, 10**digits); each problem takes one operation from `operations`. Problems are split
into train and eval by a hash of (a, op, b, split_seed): about 1 in 8 problems is held out, whatever the number of
digits, so the split is deterministic and disjoint without enumerating the problem space. The eval set is `eval_size`
distinct held-out problems in a seeded order, identical for every run that shares the task config.
"""

from __future__ import annotations

import operator

import numpy as np

from batchscale.tasks.base import Example, Task
from batchscale.tasks.rewards import accuracy_reward, answer_format_of, resolve_reward

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
EVAL_SHARE = 8  # one problem in EVAL_SHARE is held out
_MASK64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64 finalizer: a stable, well-mixed 64-bit hash (Python's hash() is not stable across processes)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def carry_dropped(a: int, op: str, b: int) -> int | None:
    """The answer of a teacher who adds digit by digit and drops every carry (57+68 -> 15), the classic slip; None
    for operations other than '+'."""
    if op != "+":
        return None
    total, place = 0, 1
    while a or b:
        total += (a % 10 + b % 10) % 10 * place
        a, b, place = a // 10, b // 10, place * 10
    return total


class ArithmeticTask(Task):
    name = "arithmetic"

    def __init__(self, digits: int = 2, operations: str = "+", template: str = "{a}{op}{b}=", split_seed: int = 0,
                 eval_size: int = 256, reward: str = "digit_match", reward_timeout_s: float = 10.0,
                 answer_format: str | None = None):
        self.digits, self.operations, self.template = digits, operations, template
        self.split_seed, self.eval_size = split_seed, eval_size
        # "strict" by default: the built-in model writes the answer first (tasks.answers)
        self.answer_format = answer_format_of(reward, answer_format, "strict")
        self.reward_fn = resolve_reward(reward, reward_timeout_s, self.answer_format)
        self.accuracy_fn = accuracy_reward(self.answer_format)  # exact answers, whatever reward training uses
        self.limit = 10**digits
        held_out = self.limit**2 * len(operations) // EVAL_SHARE // 2  # distinct problems, drawn by rejection
        if eval_size > held_out:
            from batchscale.errors import UserError

            raise UserError("task.eval_size", f"{eval_size} exceeds the ~{held_out} held-out {digits}-digit problems",
                            f"set task.eval_size <= {held_out} or raise task.digits")
        self._eval = self._build_eval()

    def is_eval(self, a: int, op: str, b: int) -> bool:
        key = ((a * self.limit + b) * 4 + "+-*".index(op)) ^ (self.split_seed * 0x5851F42D4C957F2D)
        return _mix(key & _MASK64) % EVAL_SHARE == 0

    def make_example(self, a: int, op: str, b: int) -> Example:
        return Example(self.template.format(a=a, op=op, b=b), str(OPS[op](a, b)))

    def _draw_problems(self, rng: np.random.Generator, count: int, want_eval: bool) -> list[tuple[int, str, int]]:
        out: list[tuple[int, str, int]] = []
        while len(out) < count:
            n = 2 * (count - len(out)) * (EVAL_SHARE if want_eval else 1) + 16
            a = rng.integers(0, self.limit, n)
            b = rng.integers(0, self.limit, n)
            ops = rng.integers(0, len(self.operations), n)
            for ai, bi, oi in zip(a.tolist(), b.tolist(), ops.tolist()):
                op = self.operations[oi]
                if self.is_eval(ai, op, bi) == want_eval:
                    out.append((ai, op, bi))
                    if len(out) == count:
                        break
        return out

    def _draw(self, rng: np.random.Generator, count: int, want_eval: bool) -> list[Example]:
        return [self.make_example(*problem) for problem in self._draw_problems(rng, count, want_eval)]

    def _build_eval(self) -> list[Example]:
        """`eval_size` distinct held-out problems, in a seeded order."""
        rng = np.random.default_rng([self.split_seed, 0xE7A1])
        distinct: dict[Example, None] = {}
        while len(distinct) < self.eval_size:
            for ex in self._draw(rng, self.eval_size - len(distinct), want_eval=True):
                distinct.setdefault(ex)
        return list(distinct)

    def sample_train(self, rng: np.random.Generator, count: int) -> list[Example]:
        return self._draw(rng, count, want_eval=False)

    def sample_train_problems(self, rng: np.random.Generator, count: int) -> list[tuple[int, str, int]]:
        """Train-split problems as (a, op, b), for a teacher that answers them its own way (the warm start)."""
        return self._draw_problems(rng, count, want_eval=False)

    def eval_examples(self) -> list[Example]:
        return self._eval
