"""Micro-batches and gradient chunks: how an update's rows are grouped for execution, which never changes the math.

Execution-only choices, none of which changes a value beyond float rounding (the micro-batch equivalence tests hold
them to that):
- Micro-batches are formed from the rows sorted by length (longest first, ties in batch order), so sequences of
  similar length share a micro-batch and few padded positions enter the arithmetic. The sort only picks which rows a
  micro-batch holds: every per-row tensor (rewards, advantages, log-probs, values) keeps the batch's own row order,
  and micro-batches are gathered from it and scattered back into it by row index. The micro-batch losses are shares of
  one batch-wide loss, so their summed gradient does not depend on how rows are grouped.
- A gradient-accumulating update runs its micro-batches in two chunks of whole prompt groups (`iter_gradient_chunks`),
  whose gradients give the online gradient-noise estimate (`train.chunk_norms`, `telemetry.gradnoise`). The halves
  are drawn at random, from a generator of their own seeded by the run's seed, the step and the update
  (`derive_halves_seed`): the same config and seed give the same halves, a resumed run draws what the uninterrupted
  one drew without any saved state, and the global streams that sampling uses are never touched.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from batchscale.policy.sequences import SequenceBatch


def iter_micro_batches(batch: SequenceBatch, micro_batch_size: int, sort_by_length: bool = True) -> Iterator[torch.Tensor]:
    """Row indices of each micro-batch, covering the batch once; micro_batch_size divides len(batch) (checked by
    config). Sorted: rows longest first (stable, so equal lengths keep batch order); unsorted: batch order."""
    lengths = batch.attention_mask.sum(dim=1)  # (N,)
    order = (torch.argsort(lengths, descending=True, stable=True) if sort_by_length
             else torch.arange(len(batch), device=lengths.device))  # (N,)
    yield from order.split(micro_batch_size)


def derive_halves_seed(run_seed: int, step: int, update: int = 0) -> int:
    """The seed of one update's draw of halves (`iter_gradient_chunks`): a function of the run's seed, the 1-based step
    and the update's index within the step (PPO epochs x mini-batches), so a checkpoint needs no generator state."""
    return int(np.random.SeedSequence([run_seed, step, update]).generate_state(1)[0])


def iter_gradient_chunks(batch: SequenceBatch, micro_batch_size: int, samples_per_prompt: int = 1,
                         sort_by_length: bool = True, halves_seed: int = 0) -> Iterator[list[torch.Tensor]]:
    """The micro-batches of a gradient-accumulating update, in two chunks of whole prompt groups (the rows of a group
    are contiguous: prompt-major), so the gradient-noise estimate (telemetry.gradnoise) has a smaller batch, half
    the update, to compare with: correlated responses of one prompt never straddle the two. Each chunk is a list of
    micro-batch row indices, of at most `micro_batch_size` rows; the chunks cover the batch once (an update of one
    prompt group is one chunk). Which groups form each half is a random draw (a permutation of the groups from a
    generator seeded by `halves_seed`; with an odd count the first half has one group more). Sorted: each chunk's rows
    longest first (stable), so micro-batches still pack rows of similar length; unsorted: batch order.

    Why random halves: the two halves must be two independent draws of the same process, or the difference between
    them is read as noise. Halves by length (the longer groups first, as before issue 38) split a task's length
    classes, whose gradients differ (the 3-digit sums, the carry being learned): in simulation a class explaining 3% of
    a group's gradient variance read B_noise 1.5-1.7x the truth at P = 4 and 15x at P = 16
    (tests/test_gradnoise_halves.py).

    Why two halves and not one chunk per micro-batch: whole groups in every micro-batch pad each to its group's
    longest response, which took 1.32x the update time of length-sorted micro-batches on SmolLM2-135M (docs/LOG.md,
    issue 16); two halves keep most of the sort, and in the many dimensions of a model's gradient the estimate
    from two halves is nearly as precise as from many chunks (telemetry.gradnoise)."""
    lengths = batch.attention_mask.sum(dim=1)  # (N,)
    groups = len(batch) // samples_per_prompt
    offsets = torch.arange(samples_per_prompt, device=lengths.device)  # (G,)
    draw = torch.Generator().manual_seed(halves_seed)  # its own stream: sampling's global generators stay untouched
    group_order = torch.randperm(groups, generator=draw).to(lengths.device)  # (P,)
    for chunk_groups in group_order.tensor_split(min(groups, 2)):
        rows = (chunk_groups.sort().values[:, None] * samples_per_prompt + offsets).flatten()  # (n,) batch order
        if sort_by_length:
            rows = rows[torch.argsort(lengths[rows], descending=True, stable=True)]
        yield list(rows.split(micro_batch_size))


@torch.no_grad()
def forward_in_micro_batches(fn, batch: SequenceBatch, micro_batch_size: int) -> torch.Tensor:
    """(N, L - 1) of a per-token function (log-probs, values) computed micro-batch by micro-batch without gradients,
    in batch row order; 0 past each micro-batch's own width."""
    out = torch.zeros(batch.response_mask.shape, dtype=torch.float32, device=batch.response_mask.device)  # (N, L-1)
    for rows in iter_micro_batches(batch, micro_batch_size):
        mb, width = batch.select(rows)
        out[rows, :width] = fn(mb).float()
    return out
