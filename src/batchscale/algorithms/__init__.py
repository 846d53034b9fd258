"""Algorithms as registries of pure functions (after verl's core_algos, without its indirection).

An `Algorithm` declares what the shared training loop must provide for it (a critic, a greedy baseline rollout, a
minimum group size) and how it turns scored rollouts into per-token advantages. The loop has no per-algorithm
branches: it asks the registry. An unknown name fails with the list of valid names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from batchscale.algorithms.advantages import AdvantageInputs, grpo_advantages
from batchscale.errors import UserError


@dataclass(frozen=True)
class Algorithm:
    name: str
    compute_advantages: Callable[[AdvantageInputs], "object"]  # -> (N, T) per-token advantages
    min_samples_per_prompt: int = 1
    needs_critic: bool = False
    needs_greedy_baseline: bool = False
    description: str = ""


ALGORITHMS: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


def get_algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise UserError("algorithm.name", f"unknown algorithm {name!r}", f"choose one of: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[name]


register(Algorithm(
    name="grpo",
    compute_advantages=grpo_advantages,
    min_samples_per_prompt=2,  # the baseline is the mean of the prompt's other responses: a group of one has none
    description="group-normalized outcome rewards, no critic (Shao et al. 2024)",
))
