"""The squared norm of each chunk's gradient, taken from the accumulation the update does anyway (no second backward).

An update accumulates its micro-batch gradients into .grad chunk by chunk (`train.micro_batches.iter_gradient_chunks`:
chunks of whole prompt groups). Before a chunk, the gradient accumulated so far is set aside (a pointer move, no copy)
and .grad starts empty, so after the chunk's backward passes .grad holds exactly the chunk's increment d_k: one squared
norm per chunk, then one in-place add folds it back into the running sum. The sum is the same gradient as plain
accumulation up to float rounding (the micro-batch equivalence tests hold it to that).

Each micro-batch loss is its share of the batch loss (normalized by the batch's tokens T, or rows), so d_k is the
chunk's own mean gradient scaled by T_k / T; the chunk's mean gradient has squared norm |d_k|^2 (T / T_k)^2. With
the update's gradient norm (before clipping) these give the McCandlish estimators (`telemetry.gradnoise`). The norms
stay on the device until the update ends: one synchronization per update, not per chunk.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from batchscale.rundir.run import GNS_STEP_KEYS
from batchscale.telemetry.gradnoise import estimate_noise_terms


class ChunkNorms:
    """Accumulates a model's gradient chunk by chunk, recording each chunk's squared norm and size."""

    def __init__(self, parameters):
        self.parameters = [p for p in parameters if p.requires_grad]
        self.squared_norms: list[torch.Tensor] = []  # |d_k|^2, on the device
        self.scales: list[float] = []  # T / T_k
        self.samples: list[int] = []  # b_k, rows

    @contextmanager
    def chunk(self, samples: int, scale: float):
        """Run one chunk's backward passes inside this block; `scale` = T / T_k turns its increment into the chunk's
        own mean gradient."""
        so_far = [p.grad for p in self.parameters]
        for p in self.parameters:
            p.grad = None
        yield
        increments = [p.grad for p in self.parameters if p.grad is not None]
        self.squared_norms.append(torch.nn.utils.get_total_norm(increments).square() if increments
                                  else torch.zeros((), device=self.parameters[0].device))
        self.scales.append(scale)
        self.samples.append(samples)
        for p, total in zip(self.parameters, so_far):
            if total is not None:
                p.grad = total if p.grad is None else total.add_(p.grad)

    def noise_terms(self, batch_grad_norm: float, batch_samples: int, network: str = "actor") -> dict:
        """{gns/grad_sq, gns/trace_sigma} (or gns/critic/...) of this update; empty with a single chunk."""
        squared_norms = torch.stack(self.squared_norms).tolist() if self.squared_norms else []  # one sync
        chunk_grad_sq = [sq * scale ** 2 for sq, scale in zip(squared_norms, self.scales)]
        terms = estimate_noise_terms(chunk_grad_sq, self.samples, batch_grad_norm ** 2, batch_samples)
        if terms is None:
            return {}
        keys = GNS_STEP_KEYS[network]
        return {keys["grad_sq"]: terms[0], keys["trace_sigma"]: terms[1]}
