"""Gradient-noise view of the critical training batch (paper: the actor gradient-norm proxy falls like B^-1/2 over the
aligned range and flattens beyond; McCandlish et al. 2018, "An Empirical Model of Large-Batch Training").

Proxy: for each run the mean of `grad_norm/actor` (and `grad_norm/critic` when logged) over its step records whose
cumulative samples lie within `max_samples` (the smallest final sample count over the labels compared, so every label is
averaged over the same stretch of learning: the norm shrinks as training converges); a label's proxy is the mean over seeds.

Two summaries against B = samples_per_update (run.json: the samples one optimizer update's gradient averages; = P*G in
the paper's single pass, P*G / mini-batches under PPO). `grad_norm/actor` should be each step's first update's norm: the
later updates of a step reuse its samples on a moved policy.
- log-log slope of the proxy over a chosen range (default: the aligned family): -1/2 is the pure-noise regime, where the
  norm of a mean of B independent gradients falls like B^-1/2; a flatter slope means the true gradient dominates.
- the noise-scale fit |g_B|^2 = a + b/B, where a = |G|^2 (true gradient) and b = tr(Sigma) (per-sample covariance), so
  B_simple = b/a = tr(Sigma)/|G|^2 (McCandlish eq. 2.8 onwards). Fitted to the per-label mean of squared norms by least
  squares on *relative* residuals ((y - a - b/B)/y), because noise in a norm scales with its size and plain least squares
  would let the smallest batch decide the fit. Departure: McCandlish estimate |G|^2 and tr(Sigma) from two batch sizes
  within one run; we fit across runs, which mixes trajectories but needs nothing beyond the run logs.
  a <= 0: no noise floor resolved (|g|^2 still ~ 1/B everywhere), B_simple lies beyond the largest batch: reported None.
  b <= 0: no 1/B term, noise negligible at every batch measured: reported None.
"""

from __future__ import annotations

import math

import numpy as np

from batchscale.analysis.runs import LoadedRun

GRAD_NORM_KEYS = {"actor": "grad_norm/actor", "critic": "grad_norm/critic"}


def measure_grad_norm(runs: list[LoadedRun], key: str, max_samples: float | None = None) -> dict | None:
    """{norm, squared_norm}: seed means of the per-run mean |g| and mean |g|^2 over step records; None if never logged."""
    norms, squared_norms = [], []
    for run in runs:
        values = [
            float(r[key])
            for r in run.steps
            if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
            and (max_samples is None or r["samples"] <= max_samples)
        ]
        if not values and run.steps:  # a batch larger than the window: its first update still says something
            values = [float(r[key]) for r in run.steps[:1] if isinstance(r.get(key), (int, float))]
        if values:
            norms.append(float(np.mean(values)))
            squared_norms.append(float(np.mean(np.square(values))))
    if not norms:
        return None
    return {"norm": float(np.mean(norms)), "squared_norm": float(np.mean(squared_norms))}


def average_by_batch(samples_per_step: list[int], values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct batch sizes (sorted) and the mean value at each (matched P x G pairs share a batch size)."""
    batches = np.array(sorted(set(samples_per_step)), dtype=float)
    means = np.array([np.mean([v for b, v in zip(samples_per_step, values) if b == batch]) for batch in batches])
    return batches, means


def fit_log_log_slope(samples_per_step: np.ndarray, grad_norms: np.ndarray) -> float | None:
    """Least-squares slope of log |g| against log B; None with fewer than 2 distinct batch sizes."""
    if len(np.unique(samples_per_step)) < 2:
        return None
    slope, _ = np.polyfit(np.log(samples_per_step), np.log(grad_norms), 1)
    return float(slope)


def fit_noise_scale(samples_per_step: np.ndarray, squared_norms: np.ndarray) -> dict:
    """Fit |g|^2 = a + b/B (relative least squares). {a, b, b_simple, note}; b_simple None when a <= 0 or b <= 0."""
    result = {"a": None, "b": None, "b_simple": None, "note": ""}
    if len(np.unique(samples_per_step)) < 2:
        result["note"] = "fewer than 2 batch sizes: no fit"
        return result
    y = np.asarray(squared_norms, dtype=float)
    design = np.column_stack([np.ones_like(y), 1.0 / np.asarray(samples_per_step, dtype=float)]) / y[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    result.update(a=float(a), b=float(b))
    if a <= 0:
        result["note"] = (
            f"a <= 0: no noise floor resolved, |g|^2 still falls like 1/B over the range; "
            f"B_simple lies beyond the largest batch measured ({int(max(samples_per_step))})"
        )
    elif b <= 0:
        result["note"] = "b <= 0: no 1/B noise term; gradient noise is negligible at every batch measured"
    else:
        result["b_simple"] = float(b / a)
    return result


def select_slope_range(
    samples_per_step: np.ndarray, aligned_samples_per_step: list[int], slope_range: tuple[float, float] | None = None
) -> tuple[float, float]:
    """Range for the slope: given, else the aligned family's batch range if it spans 2 sizes, else all batch sizes."""
    if slope_range is not None:
        return float(slope_range[0]), float(slope_range[1])
    if len(set(aligned_samples_per_step)) >= 2:
        return float(min(aligned_samples_per_step)), float(max(aligned_samples_per_step))
    return float(np.min(samples_per_step)), float(np.max(samples_per_step))


def analyze_grad_noise(
    samples_per_update: list[int], proxies: list[dict], slope_range: tuple[float, float]
) -> dict:
    """Slope over `slope_range` and the a + b/B fit over all batch sizes, for one network (actor or critic)."""
    batches, norms = average_by_batch(samples_per_update, [p["norm"] for p in proxies])
    _, squared_norms = average_by_batch(samples_per_update, [p["squared_norm"] for p in proxies])
    in_range = (batches >= slope_range[0]) & (batches <= slope_range[1])
    return {
        "samples_per_update": batches.tolist(),
        "grad_norm": norms.tolist(),
        "slope": fit_log_log_slope(batches[in_range], norms[in_range]),
        "slope_range": list(slope_range),
        **fit_noise_scale(batches, squared_norms),
    }
