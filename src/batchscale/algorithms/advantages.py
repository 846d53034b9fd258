"""Advantage estimators: pure functions from scored rollouts to per-token advantages.

Rollouts arrive prompt-major: sample i = p * G + g is response g of prompt p, so rewards reshape to (P, G) for group
statistics.

- GRPO (Shao et al. 2024, DeepSeekMath): A_i = (r_i - mean_group(r)) / (std_group(r) + eps), the same value on every
  response token. `normalize_std=False` gives the unscaled variant (Dr. GRPO, Liu et al. 2025). The std is the
  population std over the G responses (unbiased=False), as in verl; a group whose rewards are all equal gets zero
  advantage, so it contributes no gradient.
- ReMax (Li et al. 2024): A_i = r_i - r(greedy response of i's prompt), the same value on every response token; the
  greedy reward is a per-prompt baseline that costs one extra (greedy) generation per prompt and no critic.
- PPO with GAE(gamma, lambda) (Schulman et al. 2016): the outcome reward sits on the last response token and every other
  token's reward is 0; delta_t = r_t + gamma V_{t+1} - V_t with V = 0 after the last token, A_t = delta_t +
  gamma lambda A_{t+1}, and the critic's targets are the returns A_t + V_t. As in verl and OpenRLHF, no per-token KL
  penalty is folded into the reward (`algorithm.kl_coef` adds KL to the loss instead), and the advantages are whitened
  over all response tokens of the rollout batch (mean 0, std 1) before the policy loss, always over the whole batch so
  that micro- and mini-batching never change them.

Per-token tensors follow `policy.sequences`: (N, T) with T = L - 1, position t the state before response token t + 1,
and each row's response positions contiguous.
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
    baseline_rewards: torch.Tensor | None = None  # (P,) reward of each prompt's greedy response (ReMax)
    values: torch.Tensor | None = None  # (N, T) the critic's V at each position, before the update (PPO)
    gamma: float = 1.0
    gae_lambda: float = 1.0
    whiten: bool = True


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


def remax_advantages(inputs: AdvantageInputs) -> torch.Tensor:
    """A_i = r_i - r(greedy of i's prompt) on every response token of sample i."""
    baseline = inputs.baseline_rewards.repeat_interleave(inputs.samples_per_prompt)  # (P,) -> (N,) prompt-major
    return (inputs.rewards - baseline)[:, None] * inputs.response_mask  # (N, T)


def outcome_token_rewards(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(N,) outcome rewards -> (N, T) with each reward on its sample's last response position, 0 elsewhere."""
    positions = torch.arange(response_mask.shape[1], device=response_mask.device)  # (T,)
    last = (positions * (response_mask > 0)).amax(dim=1)  # (N,) index of the last response position
    token_rewards = torch.zeros_like(response_mask, dtype=rewards.dtype)  # (N, T)
    rows = torch.arange(len(rewards), device=response_mask.device)  # (N,)
    token_rewards[rows, last] = rewards * (response_mask.sum(dim=1) > 0)
    return token_rewards


def gae(token_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor, gamma: float,
        gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over response positions. Returns (advantages, returns), both (N, T), 0 off the
    response. Positions past a row's last response token count as terminal (V = 0, A = 0)."""
    mask = response_mask.float()
    values = values * mask  # (N, T)
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])  # (N,)
    next_advantage = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.shape[1])):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]  # (N,)
        advantages[:, t] = (delta + gamma * gae_lambda * next_advantage) * mask[:, t]
        # off the response (prompt positions, padding) nothing flows backwards; the response is contiguous per row
        next_value, next_advantage = values[:, t], advantages[:, t]
    return advantages, (advantages + values) * mask


def whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked (values - mean) / std over every masked entry of the batch (population std); 0 off the mask."""
    mask = mask.float()
    count = mask.sum().clamp(min=1)
    mean = (values * mask).sum() / count
    var = (((values - mean) * mask) ** 2).sum() / count
    return (values - mean) * torch.rsqrt(var + 1e-8) * mask  # 1e-8 as verl's masked_whiten


def ppo_advantages(inputs: AdvantageInputs) -> torch.Tensor:
    token_rewards = outcome_token_rewards(inputs.rewards, inputs.response_mask)  # (N, T)
    advantages, _ = gae(token_rewards, inputs.values, inputs.response_mask, inputs.gamma, inputs.gae_lambda)
    return whiten(advantages, inputs.response_mask) if inputs.whiten else advantages


def gae_returns(inputs: AdvantageInputs) -> torch.Tensor:
    """(N, T) the critic's regression targets: GAE advantages (not whitened) plus the values they were computed from."""
    token_rewards = outcome_token_rewards(inputs.rewards, inputs.response_mask)
    return gae(token_rewards, inputs.values, inputs.response_mask, inputs.gamma, inputs.gae_lambda)[1]
