"""The update on one page: every optimizer update of one rollout batch, for the actor or the critic.

A rollout batch of B_train = P * G responses feeds `ppo_epochs` passes of `ppo_mini_batches` contiguous mini-batches of
whole prompts (one update in the paper's single pass). Each update runs its mini-batch in two gradient chunks of whole
prompt groups (`train.micro_batches.iter_gradient_chunks`), each chunk in micro-batches: the network's loss on one
micro-batch (`train.actor.Actor.policy_loss`, `train.critic.Critic.value_loss`), weighted as its share of the
mini-batch's loss, then its backward, which adds into .grad. The weights are normalized over the whole mini-batch
(`algorithms.losses.token_weights`), so the accumulated gradient is the mini-batch's whatever `micro_batch_size` is
(the micro-batch equivalence tests hold it to float rounding). Then clip and step: the gradient norm is read before
clipping, the paper's gradient-noise proxy.

The two chunks are random halves of the mini-batch's prompt groups, drawn from the run's seed, the step and the
update's index (`train.micro_batches.derive_halves_seed`: the same run draws the same halves, a resumed one too).
Around each chunk, `train.chunk_norms.ChunkNorms` sets the gradient so far aside and reads the squared norm of the
chunk's own increment (no second backward), turned into the chunk's own mean gradient by W_k, its share of the loss
weights; with the update's norm these give the online gradient noise scale (`telemetry.gradnoise`).
"""

from __future__ import annotations

import math
from typing import Callable, Iterator, Protocol

import numpy as np
import torch

from batchscale.algorithms.losses import loss_normalizer, token_weights
from batchscale.policy.sequences import SequenceBatch
from batchscale.train.chunk_norms import ChunkNorms
from batchscale.train.micro_batches import derive_halves_seed, iter_gradient_chunks

# a network's loss on one micro-batch: (micro-batch, its rows in the rollout batch, its token weights (n, width))
# -> (the micro-batch's share of the mini-batch loss, statistics that sum over micro-batches)
MicroLoss = Callable[[SequenceBatch, torch.Tensor, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


class Network(Protocol):
    """What the update reads of the network it trains (train.actor.Actor, train.critic.Critic)."""

    name: str  # "actor" or "critic": names its record keys
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    plan: object  # config.BatchPlan: micro-batch size, G, epochs and mini-batches
    max_grad_norm: float | None
    aggregation: str
    sort_by_length: bool
    seed: int  # the run's: with the step and the update's index, it draws each update's halves


def update_network(network: Network, batch: SequenceBatch, micro_loss: MicroLoss, step: int) -> list[dict]:
    """Every optimizer update of one rollout batch, at the run's 1-based `step`. One record per update:
    `grad_norm/<network>` before clipping, the micro-batch statistics summed over the update, and its gradient-noise
    terms (`gns/...`, absent when the mini-batch holds a single prompt group)."""
    plan, aggregation = network.plan, network.aggregation
    records = []
    for update, (start, stop) in enumerate(iter_updates(len(batch), plan.ppo_epochs, plan.ppo_mini_batches)):
        mini, _ = batch.rows(start, stop)
        normalizer = max(loss_normalizer(mini.response_mask, aggregation), 1.0)
        shares = token_weights(mini.response_mask, aggregation, normalizer).sum(dim=1)  # (n,) each row's loss share
        halves_seed = derive_halves_seed(network.seed, step, update)
        chunk_norms, stats = ChunkNorms(network.model.parameters(), halves_seed), {}
        for chunk in iter_gradient_chunks(mini, plan.micro_batch_size, plan.samples_per_prompt,
                                          network.sort_by_length, halves_seed):
            with chunk_norms.chunk(shares[torch.cat(chunk)].sum()):  # W_k, a device scalar: no sync per chunk
                for rows in chunk:
                    micro, _ = mini.select(rows)
                    weights = token_weights(micro.response_mask, aggregation, normalizer)  # (n, width)
                    loss, terms = micro_loss(micro, start + rows, weights)
                    loss.backward()
                    for key, value in terms.items():
                        stats[key] = stats.get(key, 0.0) + value
        grad_norm = clip_and_step(network.model, network.optimizer, network.max_grad_norm)
        records.append({f"grad_norm/{network.name}": grad_norm, **stats,
                        **chunk_norms.noise_terms(grad_norm, len(mini), network=network.name)})
    return records


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
