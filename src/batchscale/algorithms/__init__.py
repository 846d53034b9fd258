"""Algorithms as registries of pure functions (after verl's core_algos, without its indirection).

An `Algorithm` declares what the shared training loop must provide for it (a critic, a greedy baseline rollout, a
minimum group size) and how it turns scored rollouts into per-token advantages (and, with a critic, into the critic's
regression targets). The loop has no per-algorithm branches: it asks the registry what an algorithm needs and fills
those fields of `AdvantageInputs`. An unknown name fails with the list of valid names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from batchscale.algorithms.advantages import (AdvantageInputs, gae_returns, grpo_advantages, ppo_advantages,
                                              remax_advantages)
from batchscale.errors import UserError


@dataclass(frozen=True)
class Algorithm:
    name: str
    compute_advantages: Callable[[AdvantageInputs], "object"]  # -> (N, T) per-token advantages
    min_samples_per_prompt: int = 1
    needs_critic: bool = False  # the loop computes AdvantageInputs.values and trains a value model
    needs_greedy_baseline: bool = False  # the loop fills AdvantageInputs.baseline_rewards from a greedy rollout
    compute_value_targets: Callable[[AdvantageInputs], "object"] | None = None  # -> (N, T) critic targets
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

register(Algorithm(
    name="ppo",
    compute_advantages=ppo_advantages,
    min_samples_per_prompt=1,  # the critic is the baseline: a single response per prompt is enough
    needs_critic=True,
    compute_value_targets=gae_returns,
    description="clipped surrogate with a learned value model and GAE (Schulman et al. 2017; Ouyang et al. 2022)",
))

register(Algorithm(
    name="remax",
    compute_advantages=remax_advantages,
    min_samples_per_prompt=1,  # the baseline is the prompt's greedy response, not its group
    needs_greedy_baseline=True,
    description="REINFORCE with the greedy response's reward as baseline, no critic (Li et al. 2024)",
))
