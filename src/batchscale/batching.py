"""Sequences as training tensors, and micro-batches that never change the math.

A rollout batch of N = P * G samples becomes right-padded `input_ids` (prompt + response). Targets are the next
tokens, so every per-token tensor is (N, L - 1): position t holds the log-prob of token t + 1 given tokens <= t, and
`response_mask` marks the positions whose target is a response token. Right padding with causal attention means a
sequence's log-probs do not depend on what else shares its micro-batch, and each micro-batch is trimmed to its own
longest sequence, which saves work without changing any value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch


@dataclass
class SequenceBatch:
    input_ids: torch.Tensor  # (N, L) right-padded prompt + response
    attention_mask: torch.Tensor  # (N, L)
    response_mask: torch.Tensor  # (N, L - 1) 1 where the target token is a response token

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def rows(self, start: int, stop: int) -> tuple["SequenceBatch", int]:
        """Rows [start, stop), trimmed to their longest sequence. Returns the slice and its width in target positions."""
        length = int(self.attention_mask[start:stop].sum(dim=1).max())
        width = length - 1
        return SequenceBatch(
            self.input_ids[start:stop, :length],
            self.attention_mask[start:stop, :length],
            self.response_mask[start:stop, :width],
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


def iter_micro_batches(num_rows: int, micro_batch_size: int) -> Iterator[tuple[int, int]]:
    """(start, stop) row ranges covering the batch in order; micro_batch_size divides num_rows (checked by config)."""
    for start in range(0, num_rows, micro_batch_size):
        yield start, min(start + micro_batch_size, num_rows)


def token_logprobs(model, batch: SequenceBatch) -> torch.Tensor:
    """(N, L - 1) log-prob of each next token, in float32 whatever the model dtype."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()  # (N, L-1, V)
    targets = batch.input_ids[:, 1:].unsqueeze(-1)  # (N, L-1, 1)
    return logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # (N, L-1)


@torch.no_grad()
def forward_in_micro_batches(fn, batch: SequenceBatch, micro_batch_size: int) -> torch.Tensor:
    """(N, L - 1) of a per-token function (log-probs, values) computed micro-batch by micro-batch without gradients;
    0 past each micro-batch's own width."""
    out = torch.zeros(batch.response_mask.shape, dtype=torch.float32, device=batch.response_mask.device)  # (N, L-1)
    for start, stop in iter_micro_batches(len(batch), micro_batch_size):
        mb, width = batch.rows(start, stop)
        out[start:stop, :width] = fn(mb).float()
    return out
