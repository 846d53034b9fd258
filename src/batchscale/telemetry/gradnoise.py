"""The gradient noise scale measured inside one run, and the samples penalty it predicts (torch-free).

McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", App. A.1. A batch mean gradient g_b over b
independent units has E|g_b|^2 = |G|^2 + tr(Sigma) / b, with G the true gradient and Sigma the per-unit covariance. Two
batch sizes b < B measured on the same step give the unbiased estimators

    |G|^2     ~ (B |g_B|^2 - b |g_b|^2) / (B - b)
    tr(Sigma) ~ (|g_b|^2 - |g_B|^2) / (1/b - 1/B)

Here the big batch is the update (g_B its gradient, before clipping) and the small ones its chunks
(`train.chunk_norms`): two random halves of its prompt groups (`train.micro_batches.iter_gradient_chunks`). Departure
1, two chunks and not one per micro-batch: micro-batches of whole groups cost 1.32x the update time in padding
(docs/LOG.md); in a model's many dimensions the chunks' spread concentrates, so two chunks estimate tr(Sigma) nearly as
well as many, and |G|^2's noise comes mostly from |g_B|^2 itself (simulated: its sd is 1.3x that of eight chunks, in
1000 dimensions). The halves must be random: halves by length read any difference between long and short groups'
gradients as noise (issue 38). The per-step estimates are noisy (either can come out negative), so the online
B_noise = tr(Sigma) / |G|^2 is the ratio of two exponential moving averages, of the numerator and of the denominator
separately (same decay, both starting at 0, so their start-up bias cancels in the ratio and no correction is needed).

Departure 2, the loss weights (`estimate_weighted_noise_terms`). The update's loss is not a plain mean over groups:
group i enters it with its share w_i of the loss weights (`algorithms.losses.token_weights`, sum_i w_i = 1): its
response tokens over the update's, T_i / T, with token-mean aggregation; 1 / P with sequence-mean. So g_B = sum_i w_i
x_i, x_i the group's own weighted-mean gradient, and chunk k, holding the share W_k = sum_{i in k} w_i, accumulates the
increment d_k = sum_{i in k} w_i x_i = W_k g_k (g_k its own mean gradient), with g_B = sum_k d_k. For x_i independent
with a common mean E x_i = G, and V_k = sum_{i in k} w_i^2 tr Cov(x_i):

    E|d_k|^2 = W_k^2 |G|^2 + V_k,        E|g_B|^2 = |G|^2 + V,   V = sum_k V_k (the update's noise)

so E(|g_B|^2 - sum_k |d_k|^2) = |G|^2 (1 - sum_k W_k^2), and

    |G|^2 ~ (|g_B|^2 - sum_k W_k^2 |g_k|^2) / (1 - sum_k W_k^2),        V ~ |g_B|^2 - |G|^2

are unbiased whatever the weights and whatever each group's covariance: no assumption that longer responses are as
noisy as short ones (per-token noise averages down in long ones), none that a chunk's rows count its samples. What
they need is a split drawn independently of the groups: then a group's mean may depend on its length class, which
counts as noise, as it does between updates (simulated with token-mean weights following the class too: 0.96x the
update's measured noise scale at 1,000 steps). With every sample weighing the same (W_k = b_k / B) this is McCandlish's pair above exactly for two equal halves; for
unequal ones it replaces his form with b the harmonic mean of the sizes (unbiased too, for equal weights only). Before
issue 38 the sizes were the halves' row counts, which is right only for equal weights: with token-mean and 2- vs
4-token groups in halves by length it read B_noise at 0.48x the truth (tests/test_gradnoise_halves.py). For a plain
picture of V: with the same covariance Sigma_g for every group, V = tr(Sigma_g) sum_i w_i^2, the noise of
1 / sum_i w_i^2 equal groups (Kish's effective size; P for equal weights, fewer for unequal ones).

Unit. tr(Sigma) is given in samples of the update, tr(Sigma) = N V with N its samples (responses), so that
E|g_B|^2 = |G|^2 + tr(Sigma) / N: B_noise = tr(Sigma) / |G|^2 is in samples per update, directly comparable with
samples_per_step (single pass) and with analysis's B_simple, for the run's own G. With equal weights, N V = G
tr(Sigma_g): G times the value per prompt group. With token-mean weights of unequal lengths it is the noise per sample
of the update's own mix of lengths (G (1 + cv^2) tr(Sigma_g) for a common Sigma_g, cv the coefficient of variation of
the groups' token counts), which a prediction at another batch size assumes unchanged. Responses of one prompt group
are correlated, so chunks hold whole groups and the group is the independent unit (an update of a single prompt group
has no estimate).

Prediction (McCandlish eq. 2.11): samples to reach a target E(B) = E_min (1 + B / B_noise), so relative to a reference
batch rN(B) = (1 + B / B_noise) / (1 + B_ref / B_noise).

A run's B_noise (`summarize_noise_scale`, `pool_noise_scales` over seeds) is read from the per-step estimates
`gns/grad_sq` and `gns/trace_sigma` over the second half of each run's steps (the first half carries the start-up,
when the gradient is still large): the ratio of their means, mean tr(Sigma) / mean |G|^2. Each step's estimates are
unbiased and nearly independent of the next step's, so the long-window means are too, and one outlier step moves them
by 1/n of its size (the online EMA, about ten steps long, could be flipped negative by one). Trimmed means and medians
were tried and rejected: the per-step estimates are skewed, so both are biased (10%-trimmed means by 14% in a heavy-
tailed simulation where the plain means were within 4%; docs/LOG.md). The interval is a delta-method interval on the
inverse, r = 1 / B_noise = mean |G|^2 / mean tr(Sigma), from the scatter of blocks of BLOCK_STEPS consecutive steps (a
guard against correlation between neighbouring steps), with Student's t at the blocks' degrees of freedom: always
finite while mean tr(Sigma) > 0. Inverted, it is B_noise's interval; where its lower end of r is <= 0, |G|^2 is not
resolved above the noise at the run's batch and B_noise's upper end is infinite (null in JSON): the run says how many
more steps would resolve it, at the present scatter (`steps_to_resolve`). Simulated with a known drifting truth, the
nominal 80% interval covers it 77-80% of the time (tests/test_gradnoise_summary.py). Runs that log only the EMA
(`gns/b_noise`, no per-step terms) fall back on its median over the second half, with the 10th-90th percentiles of the
steps as its spread (method "ema median").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchscale.rundir.run import GNS_STEP_KEYS

EMA_DECAY = 0.9  # about the last ten steps (the online gns/b_noise)
SPREAD_PERCENTILES = (10.0, 90.0)  # the EMA fallback's spread
INTERVAL_LEVEL = 0.80  # B_noise's interval (two-sided)
BLOCK_STEPS = 4  # consecutive steps per block of the interval's scatter
MIN_B_NOISE = 1e-9  # a step with no noise resolved (tr(Sigma) EMA <= 0) logs 0: read as this


def estimate_weighted_noise_terms(chunk_grad_sq: list[float], chunk_weights: list[float], batch_grad_sq: float,
                                  batch_samples: int) -> tuple[float, float] | None:
    """(|G|^2, tr(Sigma)) of one update (module docstring, departure 2) from the squared norms |g_k|^2 of its chunks'
    own mean gradients, the chunks' shares W_k of the loss weights (any positive scale: normalized here), the update's
    squared gradient norm and its samples N; tr(Sigma) in samples of the update. None with fewer than two chunks or a
    chunk of no weight."""
    total = float(sum(chunk_weights))
    if len(chunk_grad_sq) < 2 or min(chunk_weights) <= 0 or not math.isfinite(total):
        return None
    shares = [w / total for w in chunk_weights]  # W_k
    increments_sq = sum(w * w * sq for w, sq in zip(shares, chunk_grad_sq))  # sum_k |d_k|^2
    grad_sq = (batch_grad_sq - increments_sq) / (1.0 - sum(w * w for w in shares))
    return grad_sq, batch_samples * (batch_grad_sq - grad_sq)


def estimate_noise_terms(chunk_grad_sq: list[float], chunk_samples: list[int], batch_grad_sq: float,
                         batch_samples: int) -> tuple[float, float] | None:
    """(|G|^2, tr(Sigma)) from the squared norms of the chunks' own mean gradients and of the batch gradient, every
    sample weighing the same (McCandlish's estimators for equal chunks); None with fewer than two chunks (no smaller
    batch to compare with)."""
    return estimate_weighted_noise_terms(chunk_grad_sq, chunk_samples, batch_grad_sq, batch_samples)


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
    """B_noise in samples with its interval (math.inf: beyond what the run resolves), how many steps it was read
    from (of which how many logged the EMA unresolved), and, when the interval's upper end is infinite, how many more
    window steps would resolve it (None: not estimable, |G|^2's mean not positive)."""

    value: float
    low: float
    high: float
    steps: int
    unresolved_steps: int = 0
    method: str = "ratio of means"
    steps_to_resolve: int | None = 0

    @property
    def resolved(self) -> bool:
        return math.isfinite(self.value) and math.isfinite(self.high)

    def to_json(self) -> dict:
        """{value, low, high} (null for infinity: the gradient was pure noise at the run's batch), resolved, method."""
        ends = {key: None if math.isinf(v) else v for key, v in
                (("value", self.value), ("low", self.low), ("high", self.high))}
        return {**ends, "resolved": self.resolved, "method": self.method}


def summarize_noise_scale(steps: list[dict], network: str = "actor") -> NoiseScale | None:
    """B_noise of a run from its step records (see the module docstring); None when never logged."""
    return pool_noise_scales([steps], network)


def pool_noise_scales(step_lists: list[list[dict]], network: str = "actor") -> NoiseScale | None:
    """B_noise over one or several runs of one configuration (seeds): the ratio of the means of the per-step terms
    over the second half of each run, pooled, with its interval (module docstring); the EMA's median for runs that
    log only gns/b_noise; None when none of them logged either."""
    keys = GNS_STEP_KEYS[network]
    windows = [[r for r in steps[len(steps) // 2:] if _is_number(r.get(keys["grad_sq"]))
                and _is_number(r.get(keys["trace_sigma"]))] for steps in step_lists]
    terms = [np.array([[r[keys["grad_sq"]], r[keys["trace_sigma"]]] for r in window]) for window in windows if window]
    if terms:
        unresolved = sum(1 for steps in step_lists for r in steps[len(steps) // 2:] if keys["b_noise"] in r
                         and not _is_number(r[keys["b_noise"]]))
        return ratio_of_means(terms, unresolved)
    return _ema_median(step_lists, keys["b_noise"])


def ratio_of_means(runs: list[np.ndarray], unresolved_steps: int = 0) -> NoiseScale:
    """B_noise = mean tr(Sigma) / mean |G|^2 over the steps of `runs` (each (n, 2): |G|^2, tr(Sigma) per step), with
    the delta-method interval of its inverse over blocks of BLOCK_STEPS steps (module docstring)."""
    from scipy import stats

    blocks = []
    for terms in runs:  # blocks within a run, so no block straddles two seeds
        usable = len(terms) // BLOCK_STEPS * BLOCK_STEPS or len(terms)
        size = BLOCK_STEPS if usable >= BLOCK_STEPS else len(terms)
        blocks += list(terms[:usable].reshape(-1, size, 2).mean(axis=1))
    blocks = np.array(blocks)  # (m, 2) block means
    steps = sum(len(terms) for terms in runs)
    grad_sq, trace_sigma = np.concatenate(runs).mean(axis=0)
    if trace_sigma <= 0:  # no noise resolved above zero: nothing bounds B_noise from this run
        return NoiseScale(MIN_B_NOISE, MIN_B_NOISE, math.inf, steps, unresolved_steps, steps_to_resolve=None)
    inverse = grad_sq / trace_sigma
    if len(blocks) < 2:
        return NoiseScale(_invert(inverse), 0.0, math.inf, steps, unresolved_steps, steps_to_resolve=None)
    scatter = blocks[:, 0] - inverse * blocks[:, 1]
    se = float(np.std(scatter, ddof=1) / math.sqrt(len(blocks)) / trace_sigma)
    t = float(stats.t.ppf(0.5 + INTERVAL_LEVEL / 2, len(blocks) - 1))
    low_inverse, high_inverse = inverse - t * se, inverse + t * se
    to_resolve = 0
    if low_inverse <= 0:  # steps at which t * se(n) < inverse, se shrinking as 1/sqrt(n)
        to_resolve = None if inverse <= 0 else max(1, math.ceil(steps * ((t * se / inverse) ** 2 - 1)))
    return NoiseScale(_invert(inverse), _invert(high_inverse), _invert(low_inverse), steps, unresolved_steps,
                      steps_to_resolve=to_resolve)


def _ema_median(step_lists: list[list[dict]], key: str) -> NoiseScale | None:
    """The fallback for runs that log only the EMA: its median over the second halves, the 10th-90th percentiles of
    1/B_noise over those steps as the spread (a step that logged null counts as B_noise = infinity)."""
    logged = [r[key] for steps in step_lists for r in steps[len(steps) // 2:] if key in r]
    if not logged:
        return None
    inverse = np.array([1.0 / max(float(v), MIN_B_NOISE) if _is_number(v) else 0.0 for v in logged])
    upper, middle, lower = np.percentile(inverse, [SPREAD_PERCENTILES[1], 50.0, SPREAD_PERCENTILES[0]])
    return NoiseScale(_invert(middle), _invert(upper), _invert(lower), len(logged),
                      sum(1 for v in logged if not _is_number(v)), method="ema median",
                      steps_to_resolve=0 if lower > 0 else None)


def predict_samples_penalty(samples_per_step: float, reference_samples_per_step: float, b_noise: float) -> float:
    """rN(B) = (1 + B / B_noise) / (1 + B_ref / B_noise): samples to target relative to the reference batch."""
    return (1.0 + samples_per_step / b_noise) / (1.0 + reference_samples_per_step / b_noise)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _invert(inverse: float) -> float:
    return 1.0 / inverse if inverse > 0 else math.inf
