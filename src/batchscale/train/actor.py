"""The actor: the policy model, its optimizer and reference model, and its loss on one micro-batch.

The loss is PPO's clipped surrogate at token level (`algorithms.losses`), each micro-batch's its share of the
mini-batch's loss; `train.update` runs it over epochs x mini-batches x gradient chunks x micro-batches. In the paper's
single pass the sampling policy is the current one, so logp_old is logp detached (ratio 1) and the surrogate reduces to
the policy gradient. With `ppo_epochs` > 1 or `ppo_mini_batches` > 1, logp_old is stored from a no-grad forward before
the first update. Asynchronous batches multiply each token's term by its truncated importance weight
(algorithms.offpolicy), with logp_old as the proximal policy. With `algorithm.kl_coef` > 0 the loss adds a k3 KL
penalty to a frozen copy of the starting policy (the reference model). The LM head runs on response positions only
(`policy.forward`); with `compute_dtype` bfloat16 each forward runs under bf16 autocast over the float32 weights
(`train.precision`).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from batchscale.algorithms.losses import clipped_policy_loss, kl_k3
from batchscale.algorithms.offpolicy import OffPolicy
from batchscale.policy.forward import token_logprobs
from batchscale.policy.sequences import SequenceBatch
from batchscale.train.micro_batches import forward_in_micro_batches
from batchscale.train.optimizer import build_optimizer
from batchscale.train.precision import autocast
from batchscale.train.update import mean_stats, update_network


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
    sort_by_length: bool = True  # micro-batches of length-sorted rows (execution only: train.micro_batches)
    seed: int = 0  # the run's: with the step, it draws each update's halves (train.micro_batches)
    name: ClassVar[str] = "actor"

    def logprobs(self, batch: SequenceBatch) -> torch.Tensor:
        """(N, L - 1) log-probs of the response tokens under the current weights, without gradients."""
        with autocast(self.compute_dtype, batch.input_ids.device.type):
            return forward_in_micro_batches(lambda mb: token_logprobs(self.model, mb), batch,
                                            self.plan.micro_batch_size)

    def update(self, batch: SequenceBatch, advantages: torch.Tensor, off_policy: OffPolicy | None = None,
               step: int = 0) -> dict:
        """Every actor update of one rollout batch (one, by default). Returns loss and gradient-norm statistics,
        averaged over the updates, except `grad_norm/actor`: the first update's norm, before clipping. Only the first
        update's gradient is taken at the policy that sampled the batch, over samples_per_update fresh samples, so it
        is the norm the gradient-noise fit |g|^2 = a + b/B compares across batches (later epochs see a moved policy).
        `gns/grad_sq` and `gns/trace_sigma` are the gradient noise estimates of each update (telemetry.gradnoise),
        absent when an update holds a single prompt group."""
        # later updates must compare against the sampling policy, so store it first
        logp_old = self.logprobs(batch) if self.plan.updates_per_step > 1 else None
        loss = functools.partial(self.policy_loss, advantages=advantages, logp_old=logp_old, off_policy=off_policy)
        records = update_network(self, batch, loss, step)
        return {**mean_stats(records), "grad_norm/actor": records[0]["grad_norm/actor"]}

    def policy_loss(self, micro: SequenceBatch, rows: torch.Tensor, weights: torch.Tensor, advantages: torch.Tensor,
                    logp_old: torch.Tensor | None = None, off_policy: OffPolicy | None = None) -> tuple[torch.Tensor, dict]:
        """The clipped surrogate (plus the KL penalty) of one micro-batch, its `rows` of the rollout batch weighted by
        `weights` (n, width), and its statistics. `advantages`, `logp_old` and `off_policy` are the rollout batch's
        (N, L-1); without `logp_old` the sampling policy is the current one (the single pass)."""
        width = weights.shape[1]
        device_type = micro.input_ids.device.type
        with autocast(self.compute_dtype, device_type):
            logp = token_logprobs(self.model, micro)  # (n, width)
        old = logp.detach() if logp_old is None else logp_old[rows, :width]
        if off_policy is not None:  # truncated importance weight of stale tokens (1 on the current version's)
            weights = weights * off_policy.select(rows, width).weights(old)  # (n, width)
        loss, clip_frac = clipped_policy_loss(logp, old, advantages[rows, :width], weights, self.clip_eps)
        stats = {"loss/policy": loss.item(), "actor/clip_frac": clip_frac.item()}
        if self.kl_coef > 0:
            with torch.no_grad(), autocast(self.compute_dtype, device_type):
                logp_ref = token_logprobs(self.ref_model, micro)
            kl = (kl_k3(logp, logp_ref) * weights).sum()
            stats["loss/kl"] = kl.item()
            loss = loss + self.kl_coef * kl
        if off_policy is not None:
            stats["async/is_weight_mean"] = weights.sum().item()  # token weights sum to 1: the mean weight
        return loss, stats


def build_actor(policy_model: nn.Module, cfg, plan, compute_dtype: torch.dtype = torch.float32) -> Actor:
    """The actor of a run (cfg: config.Config, plan: its config.BatchPlan): its optimizer at the scaled lr, and a
    reference model copied before any update when `algorithm.kl_coef` > 0."""
    algorithm = cfg.algorithm
    return Actor(policy_model, build_optimizer(policy_model.parameters(), cfg.optim, plan.lr), plan,
                 algorithm.clip_eps, cfg.optim.max_grad_norm, algorithm.loss_aggregation,
                 ref_model=copy.deepcopy(policy_model) if algorithm.kl_coef > 0 else None,
                 kl_coef=algorithm.kl_coef, compute_dtype=compute_dtype, seed=cfg.run.seed)
