"""What each algorithm needs from the shared training loop, by name: torch-free, so that the config, export and the
CLI can validate an algorithm without loading the training stack.

An `AlgorithmSpec` declares what the loop must provide (a critic, a greedy baseline rollout) and the smallest group
it works with. The functions that turn rollouts into advantages live in `registry.py`, keyed by the same names. An
unknown name fails with the list of valid ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchscale.errors import UserError


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str
    min_samples_per_prompt: int = 1
    needs_critic: bool = False  # the loop computes values and trains a value model
    needs_greedy_baseline: bool = False  # the loop generates and scores one greedy response per prompt
    description: str = ""


ALGORITHM_SPECS: dict[str, AlgorithmSpec] = {spec.name: spec for spec in (
    AlgorithmSpec(
        name="grpo",
        min_samples_per_prompt=2,  # the baseline is the mean of the prompt's other responses: a group of one has none
        description="group-normalized outcome rewards, no critic (Shao et al. 2024)",
    ),
    AlgorithmSpec(
        name="ppo",
        min_samples_per_prompt=1,  # the critic is the baseline: a single response per prompt is enough
        needs_critic=True,
        description="clipped surrogate with a learned value model and GAE (Schulman et al. 2017; Ouyang et al. 2022)",
    ),
    AlgorithmSpec(
        name="remax",
        min_samples_per_prompt=1,  # the baseline is the prompt's greedy response, not its group
        needs_greedy_baseline=True,
        description="REINFORCE with the greedy response's reward as baseline, no critic (Li et al. 2024)",
    ),
)}


def get_algorithm_spec(name: str) -> AlgorithmSpec:
    if name not in ALGORITHM_SPECS:
        raise UserError("algorithm.name", f"unknown algorithm {name!r}",
                        f"choose one of: {', '.join(sorted(ALGORITHM_SPECS))}")
    return ALGORITHM_SPECS[name]
