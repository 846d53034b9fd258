"""Sequences as training tensors: a rollout batch of prompt + response token ids, right-padded.

A rollout batch of N = P * G samples becomes right-padded `input_ids` (prompt + response). Targets are the next
tokens, so every per-token tensor is (N, L - 1): position t holds the log-prob of token t + 1 given tokens <= t, and
`response_mask` marks the positions whose target is a response token. Right padding with causal attention means a
sequence's log-probs do not depend on what else shares its micro-batch, and each sub-batch (`SequenceBatch.select`) is
trimmed to its own longest sequence, which saves work without changing any value.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SequenceBatch:
    input_ids: torch.Tensor  # (N, L) right-padded prompt + response
    attention_mask: torch.Tensor  # (N, L)
    response_mask: torch.Tensor  # (N, L - 1) 1 where the target token is a response token

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def rows(self, start: int, stop: int) -> tuple["SequenceBatch", int]:
        """Rows [start, stop), trimmed to their longest sequence. Returns the slice and its width in target
        positions."""
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
