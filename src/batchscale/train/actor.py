"""The actor: the policy model, its optimizer and reference model, and its update from one rollout batch.

Single pass: the B_train = P * G responses of a rollout boundary feed exactly one optimizer step. Gradients of the
micro-batches are summed; each micro-batch loss is already its share of the batch loss (losses.token_weights divides by
a batch-wide normalizer), so the accumulated gradient equals the full-batch gradient whatever `micro_batch_size` is.
In the single pass the sampling policy is the current one, so logp_old is logp detached (ratio 1) and the clipped
surrogate reduces to the policy gradient. With `ppo_epochs` > 1 or `ppo_mini_batches` > 1 the rollout batch feeds
epochs x mini-batches updates (`train.update`, the skeleton the critic's update shares); logp_old is then
stored from a no-grad forward before the first update, mini-batches are contiguous runs of whole prompts (the same
split every epoch, so GRPO groups stay together), and each mini-batch's loss is normalized over that mini-batch.
Asynchronous batches multiply each token's term by its truncated importance weight (algorithms.offpolicy), with the
logp_old above as the proximal policy. With `algorithm.kl_coef` > 0 the loss adds a k3 KL penalty to a frozen copy of
the starting policy (the reference model).

Micro-batches are formed from the rows sorted by length and the LM head runs on response positions only
(`train.micro_batches`, `policy.forward`: execution-only, the equivalence tests bound the difference to float
rounding). With `compute_dtype` bfloat16 each forward runs under bf16 autocast over the float32 weights
(`train.precision`).

The gradient norm is logged before clipping: it is the paper's gradient-noise proxy. Micro-batches run in two chunks,
the halves of the update's prompt groups (`train.micro_batches.iter_gradient_chunks`), and the squared norm of each
chunk's gradient is read off the accumulation (`train.chunk_norms`) for the online gradient noise scale
(`telemetry.gradnoise`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from batchscale.algorithms.losses import clipped_policy_loss, kl_k3, loss_normalizer, token_weights
from batchscale.algorithms.offpolicy import OffPolicy
from batchscale.policy.forward import token_logprobs
from batchscale.policy.sequences import SequenceBatch
from batchscale.train.chunk_norms import ChunkNorms, iter_chunked_micro_batches
from batchscale.train.micro_batches import forward_in_micro_batches
from batchscale.train.optimizer import build_optimizer
from batchscale.train.precision import autocast
from batchscale.train.update import mean_stats, run_updates


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
    compute_dtype: torch.dtype = torch.float32,
    sort_by_length: bool = True,
    samples_per_prompt: int = 1,
    chunk_norms: ChunkNorms | None = None,
    off_policy: OffPolicy | None = None,  # asynchronous rollouts: behaviour log-probs and versions (algorithms.offpolicy)
) -> dict:
    """Sum the micro-batch gradients of the batch loss into .grad, in two chunks of whole prompt groups
    (`train.micro_batches.iter_gradient_chunks`); `chunk_norms`, when given, records each chunk's squared gradient norm
    on the way. Returns loss statistics for the log."""
    normalizer = max(loss_normalizer(batch.response_mask, aggregation), 1.0)
    stats = {"loss/policy": 0.0, "actor/clip_frac": 0.0}
    if kl_coef > 0:
        stats["loss/kl"] = 0.0
    if off_policy is not None:
        stats["async/is_weight_mean"] = 0.0
    device_type = batch.input_ids.device.type
    for rows in iter_chunked_micro_batches(batch, micro_batch_size, samples_per_prompt, sort_by_length, aggregation,
                                           chunk_norms):
        mb, width = batch.select(rows)
        with autocast(compute_dtype, device_type):
            logp = token_logprobs(model, mb)  # (n, width)
        old = logp.detach() if logp_old is None else logp_old[rows, :width]
        weights = token_weights(mb.response_mask, aggregation, normalizer)  # (n, width)
        if off_policy is not None:  # truncated importance weight of stale tokens (1 on the current version's)
            weights = weights * off_policy.select(rows, width).weights(old)  # (n, width)
            stats["async/is_weight_mean"] += weights.sum().item()
        loss, clip_frac = clipped_policy_loss(logp, old, advantages[rows, :width], weights, clip_eps)
        stats["loss/policy"] += loss.item()
        stats["actor/clip_frac"] += clip_frac.item()
        if kl_coef > 0:
            with torch.no_grad(), autocast(compute_dtype, device_type):
                logp_ref = token_logprobs(ref_model, mb)
            kl = (kl_k3(logp, logp_ref) * weights).sum()
            stats["loss/kl"] += kl.item()
            loss = loss + kl_coef * kl
        loss.backward()
    return stats


@dataclass
class Actor:
    """The policy model with its optimizer, reference model and update settings: the critic's mirror
    (`train.critic`)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    plan: object  # config.BatchPlan
    clip_eps: float
    max_grad_norm: float | None
    aggregation: str
    ref_model: nn.Module | None = None  # a frozen copy of the starting policy, when kl_coef > 0
    kl_coef: float = 0.0
    compute_dtype: torch.dtype = torch.float32

    def logprobs(self, batch: SequenceBatch) -> torch.Tensor:
        """(N, L - 1) log-probs of the response tokens under the current weights, without gradients."""
        with autocast(self.compute_dtype, batch.input_ids.device.type):
            return forward_in_micro_batches(lambda mb: token_logprobs(self.model, mb), batch,
                                            self.plan.micro_batch_size)

    def update(self, batch: SequenceBatch, advantages: torch.Tensor, off_policy: OffPolicy | None = None) -> dict:
        """Every actor update of one rollout batch (one, by default). Returns loss and gradient-norm statistics,
        averaged over the updates, except `grad_norm/actor`: the first update's norm, before clipping. Only the first
        update's gradient is taken at the policy that sampled the batch, over samples_per_update fresh samples, so it
        is the norm the gradient-noise fit |g|^2 = a + b/B compares across batches (later epochs see a moved policy).
        `gns/grad_sq` and `gns/trace_sigma` are the gradient noise estimates of each update (telemetry.gradnoise),
        absent when an update holds a single prompt group."""
        # later updates must compare against the sampling policy, so store it first
        logp_old = self.logprobs(batch) if self.plan.updates_per_step > 1 else None

        def accumulate(mini: SequenceBatch, rows: slice, width: int, chunk_norms: ChunkNorms) -> dict:
            return accumulate_policy_gradient(
                self.model, mini, advantages[rows, :width], self.plan.micro_batch_size, self.clip_eps,
                self.aggregation, logp_old=None if logp_old is None else logp_old[rows, :width],
                ref_model=self.ref_model, kl_coef=self.kl_coef, compute_dtype=self.compute_dtype,
                samples_per_prompt=self.plan.samples_per_prompt, chunk_norms=chunk_norms,
                off_policy=None if off_policy is None else off_policy.select(rows, width))

        records = run_updates("actor", self.model, self.optimizer, batch, self.plan, self.max_grad_norm, accumulate)
        return {**mean_stats(records), "grad_norm/actor": records[0]["grad_norm/actor"]}


def build_actor(policy_model: nn.Module, cfg, plan, compute_dtype: torch.dtype = torch.float32) -> Actor:
    """The actor of a run (cfg: config.Config, plan: its config.BatchPlan): its optimizer at the scaled lr, and a
    reference model copied before any update when `algorithm.kl_coef` > 0."""
    algorithm = cfg.algorithm
    return Actor(policy_model, build_optimizer(policy_model.parameters(), cfg.optim, plan.lr), plan,
                 algorithm.clip_eps, cfg.optim.max_grad_norm, algorithm.loss_aggregation,
                 ref_model=copy.deepcopy(policy_model) if algorithm.kl_coef > 0 else None,
                 kl_coef=algorithm.kl_coef, compute_dtype=compute_dtype)
