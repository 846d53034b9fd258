"""The PPO critic: a value model of the policy's own family, its own optimizer, and its loss on one micro-batch.

The value model is the policy's transformer body (its `base_model`: the decoder without the LM head) with a scalar
linear head, as in OpenRLHF's critic and TRL's value head, copied from the policy before the first update: it starts
from the same checkpoint whatever the policy was loaded from, with no second load nor a per-architecture
`...ForTokenClassification` class (not every family has one, and their heads carry dropout). The head starts near 0
(std 1 / (hidden + 1), as in OpenRLHF) and computes in float32 whatever the body's dtype; at (hidden x 1) it costs
next to nothing at every position, so it is left there.

Values are per-token like every other tensor of `policy.sequences`: (N, L - 1), position t the value of the state after
tokens <= t. The loss is the clipped value loss (`losses.clipped_value_loss`) with the policy loss's batch-wide
normalizer; `train.update` runs it as it runs the actor's. The critic's learning rate is scaled by its own rule
(`critic.lr`, `critic.lr_rule`, `config.CriticPlan`), with its own clipping and `optim`'s other Adam settings, and it
shares the actor's execution choices (length-sorted micro-batches, bf16 autocast over float32 weights).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from batchscale.algorithms.losses import clipped_value_loss
from batchscale.policy.sequences import SequenceBatch
from batchscale.train.micro_batches import forward_in_micro_batches
from batchscale.train.optimizer import build_optimizer
from batchscale.train.precision import autocast
from batchscale.train.update import mean_stats, update_network


class ValueModel(nn.Module):
    def __init__(self, body: nn.Module, hidden_size: int):
        super().__init__()
        self.body = body
        self.head = nn.Linear(hidden_size, 1, dtype=torch.float32, device=next(body.parameters()).device)
        nn.init.normal_(self.head.weight, std=1 / (hidden_size + 1))
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        with torch.autocast(hidden.device.type, enabled=False):  # the head stays float32 under bf16 autocast too
            return self.head(hidden.float()).squeeze(-1)  # (N, L, H) -> (N, L)


def build_value_model(policy_model: nn.Module) -> ValueModel:
    """A value model from the policy's body, copied before any update (so: from the policy's checkpoint)."""
    body = copy.deepcopy(policy_model.base_model)
    return ValueModel(body, policy_model.config.hidden_size).eval()  # eval: no dropout, the update is deterministic


def token_values(model: ValueModel, batch: SequenceBatch) -> torch.Tensor:
    """(N, L - 1) V at each position whose next token is a target, aligned with `policy.forward.token_logprobs`."""
    return model(batch.input_ids, batch.attention_mask)[:, :-1]


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float | None:
    """1 - Var(R - V) / Var(R) over response tokens: 1 is a perfect critic, 0 no better than a constant; None when
    the returns do not vary (every response scored the same), where it is undefined."""
    keep = mask > 0
    target, residual = returns[keep], (returns - values)[keep]
    variance = target.var(unbiased=False)
    return float(1 - residual.var(unbiased=False) / variance) if variance > 0 else None


@dataclass
class Critic:
    """The value model with its optimizer and update settings: what the training loop holds for `needs_critic`,
    the actor's mirror (`train.actor`)."""

    model: ValueModel
    optimizer: torch.optim.Optimizer
    plan: object  # config.BatchPlan
    value_clip: float | None
    max_grad_norm: float | None
    aggregation: str
    compute_dtype: torch.dtype = torch.float32
    sort_by_length: bool = True  # micro-batches of length-sorted rows (execution only: train.micro_batches)
    seed: int = 0  # the run's: with the step, it draws each update's halves (train.micro_batches)
    name: ClassVar[str] = "critic"

    def values(self, batch: SequenceBatch) -> torch.Tensor:
        """(N, L - 1) values at rollout time, without gradients."""
        with autocast(self.compute_dtype, batch.input_ids.device.type):
            return forward_in_micro_batches(lambda mb: token_values(self.model, mb), batch, self.plan.micro_batch_size)

    def update(self, batch: SequenceBatch, values_old: torch.Tensor, returns: torch.Tensor, step: int = 0) -> dict:
        """Every critic update of one rollout batch; statistics averaged over them, gradient norm before clipping,
        and the critic's gradient noise estimates (`gns/critic/grad_sq`, `gns/critic/trace_sigma`)."""
        loss = functools.partial(self.value_loss, values_old=values_old, returns=returns)
        records = update_network(self, batch, loss, step)
        return {
            **mean_stats(records),
            "lr/critic": self.optimizer.param_groups[0]["lr"],
            "critic/explained_variance": explained_variance(values_old, returns, batch.response_mask),
            "critic/value_mean": float(values_old[batch.response_mask > 0].mean()),
        }

    def value_loss(self, micro: SequenceBatch, rows: torch.Tensor, weights: torch.Tensor, values_old: torch.Tensor,
                   returns: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The clipped value loss of one micro-batch, its `rows` of the rollout batch weighted by `weights`
        (n, width), and its statistics; `values_old` (at rollout time) and `returns` are the rollout batch's (N, L-1)."""
        width = weights.shape[1]
        with autocast(self.compute_dtype, micro.input_ids.device.type):
            values = token_values(self.model, micro)  # (n, width)
        loss, clip_frac = clipped_value_loss(values, values_old[rows, :width], returns[rows, :width], weights,
                                             self.value_clip)
        return loss, {"loss/value": loss.item(), "critic/value_clip_frac": clip_frac.item()}


def build_critic(policy_model: nn.Module, cfg, plan, compute_dtype: torch.dtype = torch.float32) -> Critic:
    """The critic of a run (cfg: config.Config, plan: its config.BatchPlan): a value model copied from the policy's
    body, and its optimizer at the critic's own scaled lr."""
    model = build_value_model(policy_model)
    optimizer = build_optimizer(model.parameters(), cfg.optim, plan.critic.lr)
    return Critic(model, optimizer, plan, cfg.critic.value_clip, cfg.critic.max_grad_norm,
                  cfg.algorithm.loss_aggregation, compute_dtype, seed=cfg.run.seed)
