"""Policy losses, written so that micro-batching never changes the math.

Each function returns the micro-batch's share of the full-batch loss: token sums are divided by a `normalizer`
computed once over the whole rollout batch (its total response tokens for token-mean, or B_train for sequence-mean),
never by micro-batch statistics. Summing the micro-batch gradients then gives exactly the single-pass gradient.

- Clipped surrogate (PPO, Schulman et al. 2017) at token level: -min(rho * A, clip(rho, 1 - eps, 1 + eps) * A) with
  rho = exp(logp - logp_old).
- Clipped value loss (PPO2, as in verl and OpenRLHF): 0.5 * max((V - R)^2, (V_clip - R)^2) with
  V_clip = V_old + clip(V - V_old, -c, c); V_old is the critic's value at rollout time, R the GAE return.
- KL to a frozen reference with the k3 estimator (Schulman 2020): exp(ref - logp) - (ref - logp) - 1 >= 0.
"""

from __future__ import annotations

import torch


def loss_normalizer(response_mask: torch.Tensor, aggregation: str) -> float:
    """Batch-wide denominator: total response tokens (token-mean) or number of responses (sequence-mean)."""
    return float(response_mask.sum()) if aggregation == "token-mean" else float(response_mask.shape[0])


def token_weights(response_mask: torch.Tensor, aggregation: str, normalizer: float) -> torch.Tensor:
    """(N, T) weights that turn a per-token loss into this micro-batch's share of the batch loss."""
    mask = response_mask.float()
    if aggregation == "token-mean":  # every response token of the batch weighs the same (DAPO)
        return mask / normalizer
    if aggregation == "sequence-mean":  # each response weighs the same, its tokens averaged (original GRPO)
        return mask / mask.sum(dim=1, keepdim=True).clamp(min=1) / normalizer
    raise ValueError(f"unknown loss aggregation {aggregation!r}")


def clipped_policy_loss(
    logp: torch.Tensor,  # (N, T) log-prob of each response token under the current policy
    logp_old: torch.Tensor,  # (N, T) under the policy that sampled it
    advantages: torch.Tensor,  # (N, T)
    weights: torch.Tensor,  # (N, T) from token_weights
    clip_eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (loss, clipped-fraction numerator): the weighted sum of -min(rho A, clip(rho) A)."""
    ratio = torch.exp(logp - logp_old)  # (N, T)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages
    loss = -(torch.minimum(unclipped, clipped) * weights).sum()
    clip_frac = ((clipped < unclipped).float() * weights).sum().detach()
    return loss, clip_frac


def clipped_value_loss(
    values: torch.Tensor,  # (N, T) the critic's current values
    values_old: torch.Tensor,  # (N, T) its values at rollout time (the ones GAE used)
    returns: torch.Tensor,  # (N, T) regression targets
    weights: torch.Tensor,  # (N, T) from token_weights
    value_clip: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (loss, clipped-fraction numerator): the weighted sum of 0.5 * max((V - R)^2, (V_clip - R)^2)."""
    unclipped = (values - returns) ** 2  # (N, T)
    if value_clip is None:
        return 0.5 * (unclipped * weights).sum(), torch.zeros((), device=values.device)
    clipped_values = values_old + (values - values_old).clamp(-value_clip, value_clip)
    clipped = (clipped_values - returns) ** 2
    loss = 0.5 * (torch.maximum(unclipped, clipped) * weights).sum()
    clip_frac = ((clipped > unclipped).float() * weights).sum().detach()
    return loss, clip_frac


def kl_k3(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """(N, T) per-token k3 estimate of KL(pi || pi_ref); unbiased and non-negative."""
    delta = logp_ref - logp
    return torch.exp(delta) - delta - 1
