"""Sequences as training tensors, and micro-batches that never change the math.

A rollout batch of N = P * G samples becomes right-padded `input_ids` (prompt + response). Targets are the next
tokens, so every per-token tensor is (N, L - 1): position t holds the log-prob of token t + 1 given tokens <= t, and
`response_mask` marks the positions whose target is a response token. Right padding with causal attention means a
sequence's log-probs do not depend on what else shares its micro-batch, and each micro-batch is trimmed to its own
longest sequence, which saves work without changing any value.

Execution-only choices, none of which changes a value beyond float rounding (the micro-batch equivalence tests hold
them to that):
- Micro-batches are formed from the rows sorted by length (longest first, ties in batch order), so sequences of
  similar length share a micro-batch and few padded positions enter the arithmetic. The sort only picks which rows a
  micro-batch holds: every per-row tensor (rewards, advantages, log-probs, values) keeps the batch's own row order,
  and micro-batches are gathered from it and scattered back into it by row index. The micro-batch losses are shares of
  one batch-wide loss, so their summed gradient does not depend on how rows are grouped.
- The LM head and the log-softmax run only on the positions whose target is a response token (`token_logprobs`):
  prompt and padding positions get no (M x V) logits, which at a 49k-token vocabulary is a fifth of a small model's
  forward FLOPs and most of its activation memory.
- Rows that share a prompt (a GRPO group's G samples) run the body over that prompt once per micro-batch
  (`shared_prompts`), when that computes fewer token positions than the plain forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from batchscale.shared_prompts import response_hidden_states


@dataclass
class SequenceBatch:
    input_ids: torch.Tensor  # (N, L) right-padded prompt + response
    attention_mask: torch.Tensor  # (N, L)
    response_mask: torch.Tensor  # (N, L - 1) 1 where the target token is a response token

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def rows(self, start: int, stop: int) -> tuple["SequenceBatch", int]:
        """Rows [start, stop), trimmed to their longest sequence. Returns the slice and its width in target positions."""
        return self.select(torch.arange(start, stop, device=self.input_ids.device))

    def select(self, rows: torch.Tensor) -> tuple["SequenceBatch", int]:
        """The given rows (indices, in that order), trimmed to their longest sequence. Returns the sub-batch and its
        width in target positions."""
        attention_mask = self.attention_mask[rows]  # (n, L)
        length = int(attention_mask.sum(dim=1).max())
        width = length - 1
        return SequenceBatch(
            self.input_ids[rows, :length],
            attention_mask[:, :length],
            self.response_mask[rows, :width],
        ), width


def collate(prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int, device="cpu") -> SequenceBatch:
    lengths = [len(p) + len(r) for p, r in zip(prompt_ids, response_ids, strict=True)]
    n, width = len(lengths), max(lengths)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    response_mask = torch.zeros((n, width - 1), dtype=torch.float32)
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        input_ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        attention_mask[i, : len(p) + len(r)] = 1
        response_mask[i, len(p) - 1 : len(p) + len(r) - 1] = 1  # targets p..p+r-1 are predicted at p-1..p+r-2
    return SequenceBatch(input_ids.to(device), attention_mask.to(device), response_mask.to(device))


def iter_micro_batches(batch: SequenceBatch, micro_batch_size: int, sort_by_length: bool = True) -> Iterator[torch.Tensor]:
    """Row indices of each micro-batch, covering the batch once; micro_batch_size divides len(batch) (checked by
    config). Sorted: rows longest first (stable, so equal lengths keep batch order); unsorted: batch order."""
    lengths = batch.attention_mask.sum(dim=1)  # (N,)
    order = (torch.argsort(lengths, descending=True, stable=True) if sort_by_length
             else torch.arange(len(batch), device=lengths.device))  # (N,)
    yield from order.split(micro_batch_size)


def iter_gradient_chunks(batch: SequenceBatch, micro_batch_size: int, samples_per_prompt: int = 1,
                         sort_by_length: bool = True) -> Iterator[list[torch.Tensor]]:
    """The micro-batches of a gradient-accumulating update, in two chunks of whole prompt groups (the rows of a group
    are contiguous: prompt-major), so the gradient-noise estimate (telemetry.gradnoise) has a smaller batch, half
    the update, to compare with: correlated responses of one prompt never straddle the two. Each chunk is a list of
    micro-batch row indices, of at most `micro_batch_size` rows; the chunks cover the batch once (an update of one
    prompt group is one chunk). Sorted: groups by their longest row, the longer half of them first, then each
    chunk's rows longest first (stable), so micro-batches still pack rows of similar length; unsorted: batch order.

    Why two halves and not one chunk per micro-batch: whole groups in every micro-batch pad each to its group's
    longest response, which took 1.32x the update time of length-sorted micro-batches on SmolLM2-135M (docs/LOG.md,
    issue 16); two halves keep most of the sort, and in the many dimensions of a model's gradient the estimate
    from two halves is nearly as precise as from many chunks (telemetry.gradnoise)."""
    lengths = batch.attention_mask.sum(dim=1)  # (N,)
    groups = len(batch) // samples_per_prompt
    offsets = torch.arange(samples_per_prompt, device=lengths.device)  # (G,)
    group_lengths = lengths.view(groups, samples_per_prompt).max(dim=1).values  # (P,)
    group_order = (torch.argsort(group_lengths, descending=True, stable=True) if sort_by_length
                   else torch.arange(groups, device=lengths.device))  # (P,)
    for chunk_groups in group_order.tensor_split(min(groups, 2)):
        rows = (chunk_groups[:, None] * samples_per_prompt + offsets).flatten()  # (n,)
        if sort_by_length:
            rows = rows[torch.argsort(lengths[rows], descending=True, stable=True)]
        yield list(rows.split(micro_batch_size))


def lm_head_applies_alone(model) -> bool:
    """Whether the model's logits are exactly its output embedding applied to the body's last hidden state, so the
    head can run on a subset of positions. Families that scale or soft-cap logits after the head (Gemma 2's
    final_logit_softcapping, Cohere's logit_scale, Granite's logits_scaling) take the full forward instead."""
    cfg = model.config
    post = (getattr(cfg, name, None) for name in ("final_logit_softcapping", "logit_scale", "logits_scaling"))
    return (model.get_output_embeddings() is not None and model.base_model is not model
            and all(value in (None, 1, 1.0) for value in post))


def response_logits(model, batch: SequenceBatch, positions: torch.Tensor) -> torch.Tensor:
    """(M, V) float32 logits at the M target positions marked in `positions` (N, L - 1), in row-major order."""
    if not lm_head_applies_alone(model):
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]  # (N, L-1, V)
        return logits[positions].float()
    hidden = response_hidden_states(model.base_model, batch, positions)  # (M, H)
    return model.get_output_embeddings()(hidden).float()  # (M, V)


def token_logprobs(model, batch: SequenceBatch) -> torch.Tensor:
    """(N, L - 1) log-prob of each response token, 0 at every other position, in float32 whatever the model dtype.
    The LM head and log-softmax run on response positions only."""
    positions = batch.response_mask > 0  # (N, L-1)
    logits = response_logits(model, batch, positions)  # (M, V)
    targets = batch.input_ids[:, 1:][positions]  # (M,)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # (M,)
    return torch.zeros(positions.shape, dtype=logp.dtype, device=logp.device).masked_scatter(positions, logp)


@torch.no_grad()
def forward_in_micro_batches(fn, batch: SequenceBatch, micro_batch_size: int) -> torch.Tensor:
    """(N, L - 1) of a per-token function (log-probs, values) computed micro-batch by micro-batch without gradients,
    in batch row order; 0 past each micro-batch's own width."""
    out = torch.zeros(batch.response_mask.shape, dtype=torch.float32, device=batch.response_mask.device)  # (N, L-1)
    for rows in iter_micro_batches(batch, micro_batch_size):
        mb, width = batch.select(rows)
        out[rows, :width] = fn(mb).float()
    return out
