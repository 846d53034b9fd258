"""Advantage estimators: pure functions from scored rollouts to per-token advantages.

Rollouts arrive prompt-major: sample i = p * G + g is response g of prompt p, so rewards reshape to (P, G) for group
statistics.

- GRPO (Shao et al. 2024, DeepSeekMath): A_i = (r_i - mean_group(r)) / (std_group(r) + eps), the same value on every
  response token. `normalize_std=False` gives the unscaled variant (Dr. GRPO, Liu et al. 2025). The std is the
  population std over the G responses (unbiased=False), as in verl; a group whose rewards are all equal gets zero
  advantage, so it contributes no gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

STD_EPS = 1e-6


@dataclass
class AdvantageInputs:
    rewards: torch.Tensor  # (N,) outcome reward per response, N = P * G, prompt-major
    response_mask: torch.Tensor  # (N, T) 1 on response tokens
    samples_per_prompt: int
    normalize_std: bool = True


def group_normalize(rewards: torch.Tensor, samples_per_prompt: int, normalize_std: bool = True) -> torch.Tensor:
    """(N,) rewards -> (N,) advantages centred (and optionally scaled) within each prompt's group of G."""
    groups = rewards.view(-1, samples_per_prompt)  # (P, G)
    centred = groups - groups.mean(dim=1, keepdim=True)  # (P, G)
    if normalize_std:
        centred = centred / (groups.std(dim=1, unbiased=False, keepdim=True) + STD_EPS)
    return centred.reshape(-1)  # (N,)


def grpo_advantages(inputs: AdvantageInputs) -> torch.Tensor:
    per_sample = group_normalize(inputs.rewards, inputs.samples_per_prompt, inputs.normalize_std)  # (N,)
    return per_sample[:, None] * inputs.response_mask  # (N, T)
