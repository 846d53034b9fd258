"""B_noise fitted to a sweep's measured rN, with an interval from the seeds' own scatter.

The value the one-run estimate (telemetry.gradnoise) is checked against. For each label i of the reference's lr rule
that reached the target, y_i = ln rN_i: the difference of mean ln N* over its n_i reached seeds and the reference's
n_ref (the plain ln rN where a label carries no per-seed summary). The model is

    y_i = f_i(B_noise) + e_i,   f_i = ln[(1 + B_i/B_noise) / (1 + B_ref/B_noise)]     (McCandlish et al. 2018, eq. 2.11)

with a seed's luck acting as a factor on N* of common log-sd sigma: Var e_i = sigma^2 (1/n_i + 1/n_ref), and every pair
of labels shares the reference's mean, Cov(e_i, e_j) = sigma^2 / n_ref. The fit is generalised least squares on a log
B_noise grid, Q(B) = r' S^-1 r with S that covariance over sigma^2. sigma^2 is pooled over every label with 2+ reached
seeds (sum of (n-1) s^2 over sum of (n-1), which are also the degrees of freedom), and the interval is the profile set

    { B_noise : (Q(B) - Q_min) / sigma^2 <= t^2 },   t the (1 + confidence)/2 quantile of Student's t

(with one label it is exactly the t-interval on ln rN carried through the formula). An end at the search range's edge
is open: null (the measured rN cannot rule out a B_noise that large, or that small). Seeds that never reached the target
do not enter (as in rN itself), which biases rN low, and so the fitted B_noise high, when a label's slow seeds were cut.
Coverage checked on a known truth in tests/test_noise_fit.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchscale.analysis.intervals import student_quantile
from batchscale.telemetry.gradnoise import predict_samples_penalty

FIT_RANGE = (1.0, 1e8)  # samples: the B_noise values the fit searches
GRID_POINTS = 2001  # log-spaced over FIT_RANGE: steps of 0.8% in B_noise, refined around the minimum
EDGE = 0.01  # a minimum within 1% (in log) of the range's end is not an estimate


@dataclass(frozen=True)
class FittedNoiseScale:
    value: float | None  # None: the best fit lies at the search range's end
    low: float | None  # None: open (no lower end within FIT_RANGE, or no interval)
    high: float | None  # None: open
    labels: int  # measured rN the fit used
    degrees_of_freedom: int  # of the pooled seed variance; 0: no interval

    def to_json(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "labels": self.labels,
                "degrees_of_freedom": self.degrees_of_freedom}


def fit_points(configs: dict, reference: str) -> list[tuple[float, float, int]]:
    """(B, y = ln rN, reached seeds) for every other label of the reference's lr rule with a measured rN."""
    rule = configs[reference].get("lr_rule")
    ref_log_mean = _summary(configs[reference]).get("log_mean")
    points = []
    for label, config in configs.items():
        r_n = config.get("r_n")
        if label == reference or config.get("lr_rule") != rule or not isinstance(r_n, (int, float)) or r_n <= 0:
            continue
        log_mean = _summary(config).get("log_mean")
        y = log_mean - ref_log_mean if log_mean is not None and ref_log_mean is not None else math.log(r_n)
        points.append((float(config["samples_per_update"]), y, _reached(config)))
    return points


def pooled_log_variance(configs: dict) -> tuple[float, int]:
    """(sigma^2, degrees of freedom) of ln N* pooled over every label with 2+ reached seeds; (nan, 0) when none."""
    sums = [((_reached(c) - 1) * _summary(c)["log_sd"] ** 2, _reached(c) - 1) for c in configs.values()
            if _summary(c).get("log_sd") is not None and _reached(c) >= 2]
    dof = sum(d for _, d in sums)
    return (sum(s for s, _ in sums) / dof, dof) if dof else (math.nan, 0)


def fit_noise_scale_interval(configs: dict, reference: str, confidence: float = 0.8) -> FittedNoiseScale | None:
    """The GLS fit and its profile interval (module docstring); None without a measured rN to fit."""
    points = fit_points(configs, reference)
    if not points:
        return None
    b_ref, n_ref = float(configs[reference]["samples_per_update"]), _reached(configs[reference])
    batches = np.array([b for b, _, _ in points])
    y = np.array([v for _, v, _ in points])
    counts = np.array([n for _, _, n in points], dtype=float)
    covariance = np.full((len(points), len(points)), 1.0 / n_ref) + np.diag(1.0 / counts)
    precision = np.linalg.inv(covariance)

    grid = np.exp(np.linspace(*np.log(FIT_RANGE), GRID_POINTS))
    residual = y[None, :] - np.log(predict_samples_penalty(batches[None, :], b_ref, grid[:, None]))
    q = np.einsum("gi,ij,gj->g", residual, precision, residual)
    best = int(np.argmin(q))
    log_best = _refine(y, batches, b_ref, precision, grid, best)
    at_edge = min(log_best - math.log(FIT_RANGE[0]), math.log(FIT_RANGE[1]) - log_best) < EDGE
    value = None if at_edge else math.exp(log_best)

    variance, dof = pooled_log_variance(configs)
    low = high = None
    if dof:
        inside = (q - q.min()) / variance <= student_quantile(confidence, dof) ** 2
        first, last = int(np.argmax(inside)), len(inside) - 1 - int(np.argmax(inside[::-1]))
        low = None if first == 0 else float(grid[first])
        high = None if last == len(grid) - 1 else float(grid[last])
    return FittedNoiseScale(value=value, low=low, high=high, labels=len(points), degrees_of_freedom=dof)


def _refine(y, batches, b_ref, precision, grid, best: int) -> float:
    """ln B_noise of the minimum, refined by a bounded scalar search between the grid's neighbours of `best`."""
    from scipy.optimize import minimize_scalar

    def q(log_b: float) -> float:
        r = y - np.log(predict_samples_penalty(batches, b_ref, math.exp(log_b)))
        return float(r @ precision @ r)

    low, high = math.log(grid[max(best - 1, 0)]), math.log(grid[min(best + 1, len(grid) - 1)])
    return float(minimize_scalar(q, bounds=(low, high), method="bounded", options={"xatol": 1e-6}).x)


def _summary(config: dict) -> dict:
    summary = config.get("samples_to_target")
    return summary if isinstance(summary, dict) else {}


def _reached(config: dict) -> int:
    """Seeds that reached the target (1 where a label carries no per-seed summary)."""
    return max(int(_summary(config).get("reached") or 1), 1)
