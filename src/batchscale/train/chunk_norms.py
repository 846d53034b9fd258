"""The squared norm of each chunk's gradient, taken from the accumulation the update does anyway (no second backward).

An update accumulates its micro-batch gradients into .grad chunk by chunk (`train.micro_batches.iter_gradient_chunks`:
two random halves of whole prompt groups, drawn from the seed `ChunkNorms.halves_seed`). Before a chunk, the gradient
accumulated so far is set aside (a pointer move, no copy) and .grad starts empty, so after the chunk's backward passes
.grad holds exactly the chunk's increment d_k: one squared norm per chunk, then one in-place add folds it back into the
running sum. The sum is the same gradient as plain accumulation up to float rounding (the micro-batch equivalence tests
hold it to that).

Each micro-batch loss is its share of the batch loss (`algorithms.losses.token_weights`: tokens over the batch's tokens,
or rows over its rows), so d_k is the chunk's own weighted-mean gradient times W_k, the chunk's share of the loss
weights: |g_k|^2 = |d_k|^2 / W_k^2. With W_k and the update's gradient norm (before clipping), these give the
weighted McCandlish estimators (`telemetry.gradnoise`, departure 2).
The weights are the loss's own (the same token_weights the actor's and the critic's losses use), so token-mean and
sequence-mean are both measured as they train. Norms and weights stay on the device until the update ends: one
synchronization per update, not per chunk.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from batchscale.rundir.run import GNS_STEP_KEYS
from batchscale.telemetry.gradnoise import estimate_weighted_noise_terms


class ChunkNorms:
    """Accumulates a model's gradient chunk by chunk, recording each chunk's squared norm and loss weights;
    `halves_seed` draws which prompt groups form each chunk (`train.micro_batches.derive_halves_seed`)."""

    def __init__(self, parameters, halves_seed: int = 0):
        self.parameters = [p for p in parameters if p.requires_grad]
        self.halves_seed = halves_seed
        self.squared_norms: list[torch.Tensor] = []  # |d_k|^2, on the device
        self.weights: list[torch.Tensor] = []  # W_k, the chunk's share of the loss weights

    @contextmanager
    def chunk(self, weight: torch.Tensor):
        """Run one chunk's backward passes inside this block; `weight` (W_k, its share of the loss weights) turns its
        increment into the chunk's own mean gradient."""
        so_far = [p.grad for p in self.parameters]
        for p in self.parameters:
            p.grad = None
        yield
        increments = [p.grad for p in self.parameters if p.grad is not None]
        self.squared_norms.append(torch.nn.utils.get_total_norm(increments).square() if increments
                                  else torch.zeros((), device=self.parameters[0].device))
        self.weights.append(weight)
        for p, total in zip(self.parameters, so_far):
            if total is not None:
                p.grad = total if p.grad is None else total.add_(p.grad)

    def noise_terms(self, batch_grad_norm: float, batch_samples: int, network: str = "actor") -> dict:
        """{gns/grad_sq, gns/trace_sigma} (or gns/critic/...) of this update; empty with a single chunk."""
        if len(self.squared_norms) < 2:
            return {}
        k = len(self.squared_norms)
        values = torch.stack([t.float() for t in (*self.squared_norms, *self.weights)]).tolist()  # one sync
        squared_norms, weights = values[:k], values[k:]
        if min(weights) <= 0:  # a chunk without loss weight (no response tokens): no mean gradient to compare
            return {}
        chunk_grad_sq = [sq / w ** 2 for sq, w in zip(squared_norms, weights)]
        terms = estimate_weighted_noise_terms(chunk_grad_sq, weights, batch_grad_norm ** 2, batch_samples)
        if terms is None:
            return {}
        keys = GNS_STEP_KEYS[network]
        return {keys["grad_sq"]: terms[0], keys["trace_sigma"]: terms[1]}
