"""The update skeleton the actor and the critic share: epochs x mini-batches x gradient chunks, then clip and step.

A rollout batch of B_train = P * G responses feeds `ppo_epochs` passes of `ppo_mini_batches` contiguous mini-batches
(one update in the paper's single pass). For each, the network's own `accumulate` sums the micro-batch gradients of the
mini-batch's loss into .grad in two chunks of whole prompt groups (`train.chunk_norms` records each chunk's squared
norm on the way), and `clip_and_step` applies it. Each mini-batch's loss is normalized over that mini-batch
(`algorithms.losses.loss_normalizer`), so the micro-batches of an update sum to the full mini-batch's gradient whatever
`micro_batch_size` is. The gradient norm is read before clipping: it is the paper's gradient-noise proxy.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator

import numpy as np
import torch

from batchscale.policy.sequences import SequenceBatch
from batchscale.train.chunk_norms import ChunkNorms

# the network's gradient accumulation over one mini-batch: (mini-batch, its rows in the batch, its width, chunk norms)
Accumulate = Callable[[SequenceBatch, slice, int, ChunkNorms], dict]


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


def run_updates(network: str, model, optimizer: torch.optim.Optimizer, batch: SequenceBatch, plan,
                max_grad_norm: float | None, accumulate: Accumulate) -> list[dict]:
    """Every update of one rollout batch for `network` ("actor" or "critic"), on `plan`'s (config.BatchPlan)
    schedule. Returns one record per update: `grad_norm/<network>` before clipping, what `accumulate` returned, and the
    update's gradient-noise terms (`gns/...`, absent when the mini-batch holds a single prompt group)."""
    records = []
    for start, stop in iter_updates(len(batch), plan.ppo_epochs, plan.ppo_mini_batches):
        mini, width = batch.rows(start, stop)
        chunk_norms = ChunkNorms(model.parameters())
        stats = accumulate(mini, slice(start, stop), width, chunk_norms)
        grad_norm = clip_and_step(model, optimizer, max_grad_norm)
        records.append({f"grad_norm/{network}": grad_norm, **stats,
                        **chunk_norms.noise_terms(grad_norm, len(mini), network=network)})
    return records
