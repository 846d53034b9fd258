"""Algorithms as registries of pure functions (after verl's core_algos, without its indirection).

An `Algorithm` is its torch-free `AlgorithmSpec` (what the shared loop must provide: a critic, a greedy baseline
rollout, a minimum group size; see specs.py) plus the functions that turn scored rollouts into per-token advantages
and, with a critic, into the critic's regression targets. The loop has no per-algorithm branches: it asks the
algorithm what it needs and fills those fields of `AdvantageInputs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from batchscale.algorithms.advantages import (AdvantageInputs, gae_returns, grpo_advantages, ppo_advantages,
                                              remax_advantages)
from batchscale.algorithms.specs import AlgorithmSpec, get_algorithm_spec


@dataclass(frozen=True)
class Algorithm:
    spec: AlgorithmSpec
    compute_advantages: Callable[[AdvantageInputs], "object"]  # -> (N, T) per-token advantages
    compute_value_targets: Callable[[AdvantageInputs], "object"] | None = None  # -> (N, T) critic targets

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def needs_critic(self) -> bool:
        return self.spec.needs_critic

    @property
    def needs_greedy_baseline(self) -> bool:
        return self.spec.needs_greedy_baseline


FUNCTIONS: dict[str, dict] = {
    "grpo": {"compute_advantages": grpo_advantages},
    "ppo": {"compute_advantages": ppo_advantages, "compute_value_targets": gae_returns},
    "remax": {"compute_advantages": remax_advantages},
}


def get_algorithm(name: str) -> Algorithm:
    """The algorithm called `name`; an unknown name is a UserError listing the valid ones."""
    return Algorithm(get_algorithm_spec(name), **FUNCTIONS[name])
