"""What the actor's and the critic's updates share: the optimizer, the update schedule, the loss normalizer, and
clip-then-step.

A rollout batch of B_train = P * G responses feeds `ppo_epochs` passes of `ppo_mini_batches` contiguous mini-batches
(one update in the paper's single pass). Each mini-batch's loss is normalized batch-wide (`loss_normalizer`), so the
micro-batches of an update sum to the full mini-batch's gradient whatever `micro_batch_size` is. The gradient norm is
read before clipping: it is the paper's gradient-noise proxy.
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import torch


def build_optimizer(params, optim_cfg, lr: float) -> torch.optim.Optimizer:
    cls = torch.optim.AdamW if optim_cfg.name == "adamw" else torch.optim.Adam
    return cls(params, lr=lr, betas=tuple(optim_cfg.betas), eps=optim_cfg.eps, weight_decay=optim_cfg.weight_decay)


def loss_normalizer(response_mask: torch.Tensor, aggregation: str) -> float:
    """Batch-wide denominator: total response tokens (token-mean) or number of responses (sequence-mean)."""
    return float(response_mask.sum()) if aggregation == "token-mean" else float(response_mask.shape[0])


def iter_updates(num_rows: int, epochs: int, mini_batches: int) -> Iterator[tuple[int, int]]:
    """(start, stop) rows of each optimizer update: `epochs` passes over `mini_batches` contiguous mini-batches."""
    size = num_rows // mini_batches
    for _ in range(epochs):
        for start in range(0, num_rows, size):
            yield start, start + size


def clip_and_step(model, optimizer: torch.optim.Optimizer, max_grad_norm: float | None) -> float:
    """Clip (if configured), step, zero the grads. Returns the gradient norm before clipping."""
    limit = max_grad_norm if max_grad_norm is not None else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), limit)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(grad_norm)


def mean_stats(records: list[dict]) -> dict:
    """Per-update statistics averaged over a step's updates (a single update: its own values)."""
    return {key: float(np.mean([r[key] for r in records])) for key in records[0]}
