"""Reward functions: plain functions (response text, reference answer) -> float, chosen by name or "module:function".

- `integer_match`: 1.0 if the first integer in the response equals the answer, else 0.0. Tolerates surrounding text
  ("The answer is 82."), so it serves both the built-in tiny model and an instruction-tuned model.
- `exact_match`: 1.0 if the stripped response equals the stripped answer.
- `prefix_match`: 1.0 if the stripped response starts with the stripped answer.
- `last_integer_match`: like `integer_match` on the last integer: for models that restate the question first
  ("12 + 35 = 47").
- `digit_match`: partial credit for integer answers: the fraction of digit positions, aligned from the right (units with
  units), where the first integer in the response agrees with the answer, over the longer of the two. 1.0 exactly
  when `integer_match` is 1.0. A dense reward gives GRPO groups unequal rewards far more often than a 0/1 reward, so a
  weak policy still gets a gradient; evaluation still scores exact answers.
"""

from __future__ import annotations

import importlib
import re

from batchscale.errors import UserError
from batchscale.tasks.base import RewardFn

_INTEGER = re.compile(r"-?\d+")


def integer_match(response: str, answer: str) -> float:
    found = _INTEGER.search(response)
    return float(found is not None and found.group() == answer.strip())


def last_integer_match(response: str, answer: str) -> float:
    found = _INTEGER.findall(response)
    return float(bool(found) and found[-1] == answer.strip())


def exact_match(response: str, answer: str) -> float:
    return float(response.strip() == answer.strip())


def prefix_match(response: str, answer: str) -> float:
    return float(response.strip().startswith(answer.strip()))


def digit_match(response: str, answer: str) -> float:
    found = _INTEGER.search(response)
    if found is None:
        return 0.0
    predicted, expected = found.group(), answer.strip()
    agree = sum(a == b for a, b in zip(reversed(predicted), reversed(expected)))
    return agree / max(len(predicted), len(expected))


REWARDS: dict[str, RewardFn] = {f.__name__: f for f in (integer_match, last_integer_match, exact_match, prefix_match, digit_match)}


def resolve_reward(spec: str) -> RewardFn:
    """A built-in name, or "package.module:function" importable from the current environment."""
    if spec in REWARDS:
        return REWARDS[spec]
    module_name, sep, attr = spec.partition(":")
    if not sep:
        raise UserError("task.reward", f"unknown reward {spec!r}",
                        f"use one of {', '.join(REWARDS)} or 'module:function'")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise UserError("task.reward", f"cannot import {spec!r} ({e})",
                        "make the module importable (e.g. on PYTHONPATH) and check the function name") from None
    if not callable(fn):
        raise UserError("task.reward", f"{spec!r} is not callable", "point at a function (response, answer) -> float")
    return fn
