"""One optimizer update from one rollout batch, accumulated over micro-batches.

Single pass: the B_train = P * G responses of a rollout boundary feed exactly one optimizer step. Gradients of the
micro-batches are summed; each micro-batch loss is already its share of the batch loss (losses.token_weights divides by
a batch-wide normalizer), so the accumulated gradient equals the full-batch gradient whatever `micro_batch_size` is.
In the single pass the sampling policy is the current one, so logp_old is logp detached (ratio 1) and the clipped
surrogate reduces to the policy gradient; extra epochs (PPO) pass the stored logp_old.

The gradient norm is logged before clipping: it is the paper's gradient-noise proxy.
"""

from __future__ import annotations

import math

import torch

from batchscale.algorithms.losses import clipped_policy_loss, kl_k3, token_weights
from batchscale.batching import SequenceBatch, iter_micro_batches, token_logprobs


def build_optimizer(params, optim_cfg, lr: float) -> torch.optim.Optimizer:
    cls = torch.optim.AdamW if optim_cfg.name == "adamw" else torch.optim.Adam
    return cls(params, lr=lr, betas=tuple(optim_cfg.betas), eps=optim_cfg.eps, weight_decay=optim_cfg.weight_decay)


def loss_normalizer(response_mask: torch.Tensor, aggregation: str) -> float:
    """Batch-wide denominator: total response tokens (token-mean) or number of responses (sequence-mean)."""
    return float(response_mask.sum()) if aggregation == "token-mean" else float(response_mask.shape[0])


def accumulate_policy_gradient(
    model,
    batch: SequenceBatch,
    advantages: torch.Tensor,  # (N, L-1)
    micro_batch_size: int,
    clip_eps: float,
    aggregation: str = "token-mean",
    logp_old: torch.Tensor | None = None,  # (N, L-1); None: single pass, the sampling policy is the current one
    ref_model=None,
    kl_coef: float = 0.0,
) -> dict:
    """Sum the micro-batch gradients of the batch loss into .grad. Returns loss statistics for the log."""
    normalizer = max(loss_normalizer(batch.response_mask, aggregation), 1.0)
    stats = {"loss/policy": 0.0, "actor/clip_frac": 0.0}
    if kl_coef > 0:
        stats["loss/kl"] = 0.0
    for start, stop in iter_micro_batches(len(batch), micro_batch_size):
        mb, width = batch.rows(start, stop)
        logp = token_logprobs(model, mb)  # (n, width)
        old = logp.detach() if logp_old is None else logp_old[start:stop, :width]
        weights = token_weights(mb.response_mask, aggregation, normalizer)  # (n, width)
        loss, clip_frac = clipped_policy_loss(logp, old, advantages[start:stop, :width], weights, clip_eps)
        stats["loss/policy"] += loss.item()
        stats["actor/clip_frac"] += clip_frac.item()
        if kl_coef > 0:
            with torch.no_grad():
                logp_ref = token_logprobs(ref_model, mb)
            kl = (kl_k3(logp, logp_ref) * weights).sum()
            stats["loss/kl"] += kl.item()
            loss = loss + kl_coef * kl
        loss.backward()
    return stats


def clip_and_step(model, optimizer: torch.optim.Optimizer, max_grad_norm: float | None) -> float:
    """Clip (if configured), step, zero the grads. Returns the gradient norm before clipping."""
    limit = max_grad_norm if max_grad_norm is not None else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), limit)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(grad_norm)
