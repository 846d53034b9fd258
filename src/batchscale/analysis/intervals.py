"""Samples-to-target over seeds: the mean, and a t-interval on log N* that holds its coverage with 2-5 seeds.

Interval (Student 1908; on the log scale because N* is a positive, right-skewed time and a seed's luck acts as a factor
on it): with the n seeds that reached the target, m = mean(ln N*), s = sd(ln N*) (ddof=1),

    [exp(m - t * s / sqrt(n)), exp(m + t * s / sqrt(n))],   t = the (1 + confidence)/2 quantile of Student's t, n-1 df.

It covers the geometric mean of N* over seeds (exp E[ln N*], the median when ln N* is symmetric). Why not the percentile
bootstrap used before: with n seeds a resample takes at most n distinct values and its spread is (n-1)/n of the sample's,
so it under-covers badly at the seed counts sweeps afford (simulated: 50% at 2 seeds, 74% at 3, 81% at 4 for a nominal
95%; benchmarks/coverage_n_star.py and docs/LOG.md). The t quantile pays for the unknown spread honestly: wide at 2 seeds.

The point estimate `mean` stays the arithmetic mean over reached seeds (rN = mean N*(B) / mean N*(B_ref), as the paper's
ratios are); `log_mean` and `log_sd` travel with it so that the plan can test log T (plan/resolve.py).

Censoring: the mean and interval are over the seeds that *reached* the target; `reached` and `censored` count both. With
one reached seed there is no interval and `interval` says "one seed: uncertainty unknown". A seed with N* = 0 (the target
met at the first eval) has no logarithm: no interval then, and `interval` says why. Departure from survival analysis: no
Kaplan-Meier estimate, since a handful of seeds cannot support one and the censoring horizon differs by label.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import stdtrit

DEFAULT_CONFIDENCE = 0.95
INTERVAL_METHOD = "t-interval on log N* over the seeds that reached the target"
ONE_SEED = "one seed: uncertainty unknown"


def compute_log_t_interval(values, confidence: float = DEFAULT_CONFIDENCE):
    """The t-interval on log of positive `values` (..., seeds), mapped back to their scale: (low, high) arrays over the
    leading axes (floats for a 1-d input); None with fewer than 2 seeds."""
    logs = np.log(np.asarray(values, dtype=float))  # (..., seeds)
    seeds = logs.shape[-1]
    if seeds < 2:
        return None
    half_width = student_quantile(confidence, seeds - 1) * logs.std(axis=-1, ddof=1) / math.sqrt(seeds)
    centre = logs.mean(axis=-1)
    low, high = np.exp(centre - half_width), np.exp(centre + half_width)
    return (float(low), float(high)) if logs.ndim == 1 else (low, high)


def student_quantile(confidence: float, degrees_of_freedom: float) -> float:
    """Two-sided critical value: the (1 + confidence)/2 quantile of Student's t."""
    return float(stdtrit(degrees_of_freedom, 0.5 + confidence / 2))


def describe_interval(reached_values: list[float], confidence: float = DEFAULT_CONFIDENCE) -> str:
    """How the interval was obtained, or why there is none."""
    if not reached_values:
        return "no seed reached the target: no interval"
    if len(reached_values) == 1:
        return ONE_SEED
    if min(reached_values) <= 0:
        return "N* = 0 in a seed (the target was met at the first eval): no interval on log N*"
    return f"{confidence:.0%} {INTERVAL_METHOD} ({len(reached_values)} seeds, {len(reached_values) - 1} df)"


def summarize_censored(values: list[float | None], confidence: float = DEFAULT_CONFIDENCE) -> dict:
    """{mean, ci_low, ci_high, reached, censored, log_mean, log_sd, interval} over seeds; None entries are censored."""
    reached = [float(v) for v in values if v is not None]
    summary = {"mean": float(np.mean(reached)) if reached else None, "ci_low": None, "ci_high": None,
               "reached": len(reached), "censored": len(values) - len(reached), "log_mean": None, "log_sd": None,
               "interval": describe_interval(reached, confidence)}
    if reached and min(reached) > 0:
        logs = np.log(reached)
        summary["log_mean"] = float(logs.mean())
        summary["log_sd"] = float(logs.std(ddof=1)) if len(reached) > 1 else None
        interval = compute_log_t_interval(reached, confidence)
        if interval is not None:
            summary["ci_low"], summary["ci_high"] = interval
    return summary
