"""Mean over seeds with a percentile-bootstrap confidence interval (Efron & Tibshirani 1993, ch. 13).

Resample the seeds with replacement `n_resamples` times, take the mean of each resample, and report the (alpha/2, 1-alpha/2)
quantiles of those means. A seeded numpy Generator makes the interval reproducible.

Censoring rule for samples-to-target: the mean and CI are over the seeds that *reached* the target; `reached` and `censored`
counts travel with them. This is optimistic when some seeds are censored (the slowest seeds are missing), so the report
flags any label with censored seeds; with no seed reached the mean is None, with fewer than 2 reached the CI is None
(one value has no spread to resample). Departure from survival analysis: no Kaplan-Meier estimate, since a handful of seeds
cannot support one and the censoring horizon differs by label.
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


def summarize_censored(values: list[float | None], seed: int = 0, confidence: float = DEFAULT_CONFIDENCE) -> dict:
    """{mean, ci_low, ci_high, reached, censored} over seeds; None entries are censored seeds."""
    reached_values = [v for v in values if v is not None]
    summary = {"mean": None, "ci_low": None, "ci_high": None}
    if reached_values:
        mean, low, high = bootstrap_mean_ci(np.array(reached_values), confidence=confidence, seed=seed)
        summary = {"mean": mean, "ci_low": low, "ci_high": high}
    return {**summary, "reached": len(reached_values), "censored": len(values) - len(reached_values)}
