"""The gradient noise scale measured inside one run, and the samples penalty it predicts (torch-free).

McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", App. A.1. A batch mean gradient g_b over b
independent units has E|g_b|^2 = |G|^2 + tr(Sigma) / b, with G the true gradient and Sigma the per-unit covariance. Two
batch sizes b < B measured on the same step give the unbiased estimators

    |G|^2     ~ (B |g_B|^2 - b |g_b|^2) / (B - b)
    tr(Sigma) ~ (|g_b|^2 - |g_B|^2) / (1/b - 1/B)

Here g_B is the update's gradient and g_b the mean gradient of one chunk of it (`train.chunk_norms`), |g_b|^2 averaged
over the update's chunks. Departure from "one chunk per micro-batch": the chunks are the two halves of the update's
prompt groups (`train.micro_batches.iter_gradient_chunks`: micro-batches of whole groups cost 1.32x the update time in
padding, docs/LOG.md); in a model's many dimensions |g_b|^2 - |g_B|^2 concentrates, so two chunks estimate tr(Sigma)
nearly as well as many, and |G|^2's noise comes mostly from |g_B|^2 itself (simulated: its sd is 1.3x that of eight
chunks, in 1000 dimensions). Chunks may differ in size by one prompt group; since E mean_k |g_bk|^2 = |G|^2 + tr(Sigma)
mean_k(1/b_k), b is the harmonic mean of the chunk sizes and the estimators stay unbiased. The per-step estimates are
noisy (either can come out negative), so B_noise = tr(Sigma) / |G|^2 is the ratio of two exponential moving averages, of
the numerator and of the denominator separately (same decay, both starting at 0, so their start-up bias cancels in the
ratio and no correction is needed).

Unit. Responses of one prompt group are correlated, so chunks hold whole groups and the group is the independent unit
(an update of a single prompt group has no estimate).
b and B are counted in samples (responses), which for whole groups of G is G times the count in groups: |G|^2 is the
same either way, and tr(Sigma) and B_noise come out in samples, G times their value per prompt group. So B_noise is in
samples per update, directly comparable with samples_per_step (single pass) and with analysis's B_simple, for the run's
own G. Departure: with token-mean aggregation the gradient is token-weighted, not a plain mean over samples; b and B
still count samples.

Prediction (McCandlish eq. 2.11): samples to reach a target E(B) = E_min (1 + B / B_noise), so relative to a reference
batch rN(B) = (1 + B / B_noise) / (1 + B_ref / B_noise). `summarize_noise_scale` reads B_noise from a run log: the
median of the logged EMA over the second half of the run's steps (the first half carries the start-up, when the EMA
has seen few steps and the gradient is still large), with the 10th and 90th percentiles over those steps as its spread.
A step whose EMA of |G|^2 is not positive logs B_noise as null: the gradient is pure noise at that batch, B_noise lies
beyond what the run resolves, and it counts as infinite (rN = 1 for every batch, the formula's limit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchscale.rundir.run import GNS_STEP_KEYS

EMA_DECAY = 0.9  # about the last ten steps
SPREAD_PERCENTILES = (10.0, 90.0)
MIN_B_NOISE = 1e-9  # a step with no noise resolved (tr(Sigma) EMA <= 0) logs 0: read as this


def estimate_noise_terms(chunk_grad_sq: list[float], chunk_samples: list[int], batch_grad_sq: float,
                         batch_samples: int) -> tuple[float, float] | None:
    """(|G|^2, tr(Sigma)) from the squared norms of the chunks' own mean gradients and of the batch gradient; None
    with fewer than two chunks (no smaller batch to compare with)."""
    if len(chunk_grad_sq) < 2:
        return None
    small = len(chunk_samples) / sum(1.0 / b for b in chunk_samples)  # harmonic mean: E|g_b|^2 is linear in 1/b
    small_grad_sq = float(np.mean(chunk_grad_sq))
    big = float(batch_samples)
    grad_sq = (big * batch_grad_sq - small * small_grad_sq) / (big - small)
    trace_sigma = (small_grad_sq - batch_grad_sq) / (1.0 / small - 1.0 / big)
    return grad_sq, trace_sigma


class NoiseScaleEMA:
    """B_noise = EMA(tr(Sigma)) / EMA(|G|^2) of one network, updated once per step."""

    def __init__(self, network: str = "actor", decay: float = EMA_DECAY):
        self.keys = GNS_STEP_KEYS[network]
        self.decay = decay
        self.grad_sq = 0.0
        self.trace_sigma = 0.0

    def observe(self, stats: dict) -> dict:
        """{gns/b_noise: ...} for a step whose statistics hold this network's estimates (else {}); None while the
        EMA of |G|^2 is not positive (no true gradient resolved above the noise: B_noise beyond what the run
        measures), 0 while that of tr(Sigma) is not (no noise resolved)."""
        if self.keys["grad_sq"] not in stats:
            return {}
        self.grad_sq = self.decay * self.grad_sq + (1 - self.decay) * stats[self.keys["grad_sq"]]
        self.trace_sigma = self.decay * self.trace_sigma + (1 - self.decay) * stats[self.keys["trace_sigma"]]
        if self.grad_sq <= 0:
            return {self.keys["b_noise"]: None}
        return {self.keys["b_noise"]: max(self.trace_sigma, 0.0) / self.grad_sq}


@dataclass(frozen=True)
class NoiseScale:
    """B_noise in samples with its spread over steps (math.inf: beyond what the run resolves), and how many steps it
    was read from, of which how many logged it unresolved."""

    value: float
    low: float
    high: float
    steps: int
    unresolved_steps: int = 0

    def to_json(self) -> dict:
        """{value, low, high}; null for infinity (JSON has none): the gradient was pure noise at the run's batch."""
        return {key: None if math.isinf(v) else v for key, v in
                (("value", self.value), ("low", self.low), ("high", self.high))}


def summarize_noise_scale(steps: list[dict], network: str = "actor") -> NoiseScale | None:
    """B_noise of a run from its step records (see the module docstring); None when never logged."""
    return pool_noise_scales([steps], network)


def pool_noise_scales(step_lists: list[list[dict]], network: str = "actor") -> NoiseScale | None:
    """B_noise over one or several runs of one configuration (seeds): the second half of each run's logged EMA,
    pooled; None when none of them logged it. A step that logged it as null (the EMA of |G|^2 not positive: no
    true gradient resolved above the noise) counts as B_noise = infinity. The median and percentiles are taken of
    1/B_noise, which stays finite (0 for those steps), and turned back."""
    key = GNS_STEP_KEYS[network]["b_noise"]
    logged = [r[key] for steps in step_lists for r in steps[len(steps) // 2:] if key in r]
    if not logged:
        return None
    inverse = np.array([1.0 / max(float(v), MIN_B_NOISE) if _is_number(v) else 0.0 for v in logged])
    upper, middle, lower = np.percentile(inverse, [SPREAD_PERCENTILES[1], 50.0, SPREAD_PERCENTILES[0]])
    return NoiseScale(_invert(middle), _invert(upper), _invert(lower), len(logged),
                      sum(1 for v in logged if not _is_number(v)))


def predict_samples_penalty(samples_per_step: float, reference_samples_per_step: float, b_noise: float) -> float:
    """rN(B) = (1 + B / B_noise) / (1 + B_ref / B_noise): samples to target relative to the reference batch."""
    return (1.0 + samples_per_step / b_noise) / (1.0 + reference_samples_per_step / b_noise)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _invert(inverse: float) -> float:
    return 1.0 / inverse if inverse > 0 else math.inf
