"""Mean over seeds with a percentile-bootstrap confidence interval (Efron & Tibshirani 1993, ch. 13).

Resample the seeds with replacement `n_resamples` times, take the mean of each resample, and report the (alpha/2, 1-alpha/2)
quantiles of those means. A seeded numpy Generator makes the interval reproducible.

No longer what `analyze` reports (see intervals.py: with 2-5 seeds it covers far below its nominal level); kept as the
baseline that the coverage simulation (analysis/coverage.py, benchmarks/coverage_n_star.py) compares against.
"""

from __future__ import annotations

import numpy as np

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000


def bootstrap_mean_ci(
    values: np.ndarray,
    confidence: float = DEFAULT_CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float | None, float | None]:
    """(mean, ci_low, ci_high) of `values`; the CI is None with fewer than 2 values."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        raise ValueError("bootstrap_mean_ci needs at least one value")
    mean = float(values.mean())
    if values.size < 2:
        return mean, None, None
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, values.size, size=(n_resamples, values.size))  # (resamples, seeds)
    resampled_means = values[indices].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(resampled_means, [alpha / 2, 1 - alpha / 2])
    return mean, float(low), float(high)
