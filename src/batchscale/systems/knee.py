"""Knee fitting for the systems profiles: the critical generation batch and the linear training-cost law.

Generation (paper, "generation-training asymmetry"): decode throughput rises with active concurrency B until compute,
KV traffic or capacity saturates it. We fit the saturating curve

    q(B) = q_max * B / (B + B_half)

by nonlinear least squares (scipy.optimize.curve_fit, bounded to q_max > 0, B_half > 0). The initial guess comes from
the linearized form 1/q = 1/q_max + (B_half / q_max) * (1/B) (ordinary least squares on the reciprocals), which also
serves as the answer if the nonlinear fit fails. Two documented knee rules:
- B_90 = 9 * B_half: where the fitted curve reaches 90% of q_max (solve B / (B + B_half) = 0.9);
- doubling rule: the smallest measured B whose doubling gains less than `threshold` (default 10%) throughput. When 2B was
  not measured, the gain to the next measured B' is converted to a per-doubling gain, (q(B') / q(B))^(1 / log2(B' / B)) - 1.
R^2 = 1 - SS_res / SS_tot on the measured throughputs.

Training: update time grows with processed tokens; we fit seconds = seconds_fixed + seconds_per_token * tokens by ordinary
least squares (1 / seconds_per_token is the asymptotic tokens/s).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from batchscale.errors import UserError


@dataclass(frozen=True)
class SaturatingFit:
    q_max: float  # asymptotic throughput, same units as the input throughput
    b_half: float  # concurrency at which q = q_max / 2
    b_90: float  # concurrency at which q = 0.9 * q_max (= 9 * b_half)
    doubling_knee: int | float | None  # smallest measured B whose doubling gains < threshold; None if none does
    doubling_threshold: float
    r2: float
    extrapolated: bool  # B_90 lies beyond the largest measured concurrency: the knee is a forecast
    method: str  # "curve_fit" or "linearized" (fallback)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LinearCostFit:
    seconds_fixed: float  # fixed seconds per update
    seconds_per_token: float  # marginal seconds per processed token
    r2: float

    @property
    def tokens_per_s(self) -> float:
        """Asymptotic throughput of the linear law (1 / b); inf when b <= 0."""
        return 1.0 / self.seconds_per_token if self.seconds_per_token > 0 else math.inf

    def to_dict(self) -> dict:
        return {**asdict(self), "tokens_per_s": self.tokens_per_s}


def saturating_throughput(b, q_max, b_half):
    """q(B) = q_max * B / (B + B_half)."""
    return q_max * b / (b + b_half)


def compute_r2(observed: np.ndarray, predicted: np.ndarray) -> float:
    ss_res = float(np.sum((observed - predicted) ** 2))
    ss_tot = float(np.sum((observed - observed.mean()) ** 2))
    if ss_tot == 0:
        return 1.0 if ss_res == 0 else 0.0
    return 1.0 - ss_res / ss_tot


def _as_points(x, y, x_name: str, y_name: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise UserError(x_name, f"{x_name} and {y_name} must be equal-length lists", "pass one value per point")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise UserError(x_name, "all points must be finite numbers", "drop NaN or infinite measurements")
    order = np.argsort(x, kind="stable")
    return x[order], y[order]


def find_doubling_knee(concurrency, throughput, threshold: float = 0.10):
    """Smallest measured B whose doubling gains less than `threshold` (per-doubling gain to the next measured B)."""
    b, q = _as_points(concurrency, throughput, "concurrency", "throughput")
    for i in range(len(b) - 1):
        if b[i + 1] <= b[i] or q[i] <= 0:
            continue  # repeated B, or a non-positive rate: no gain is defined
        gain_per_doubling = (max(q[i + 1], 0.0) / q[i]) ** (1.0 / math.log2(b[i + 1] / b[i])) - 1.0
        if gain_per_doubling < threshold:
            return int(b[i]) if float(b[i]).is_integer() else float(b[i])
    return None


def _guess_linearized(b: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """(q_max, B_half) from OLS on 1/q = 1/q_max + (B_half/q_max) / B; a crude guess when that is not positive."""
    if len(np.unique(b)) >= 2:
        slope, intercept = np.polyfit(1.0 / b, 1.0 / q, 1)
        if intercept > 0 and slope > 0:
            return 1.0 / intercept, slope / intercept
    return 2.0 * float(q.max()), float(np.median(b))


def fit_saturating_throughput(concurrency, throughput, threshold: float = 0.10) -> SaturatingFit:
    """Fit q(B) = q_max * B / (B + B_half) to measured (concurrency, throughput) points and report the knees."""
    b, q = _as_points(concurrency, throughput, "concurrency", "throughput")
    if len(b) < 2 or len(np.unique(b)) < 2:
        raise UserError("concurrency", "need at least 2 distinct concurrency levels to fit", "profile more levels")
    if np.any(b <= 0) or np.any(q <= 0):
        raise UserError("throughput", "concurrency and throughput must be > 0", "drop failed or empty measurements")
    q_max0, b_half0 = _guess_linearized(b, q)
    # Bounds keep both parameters positive and finite, so a still-linear curve (no saturation yet) yields a large,
    # finite B_half (flagged as extrapolated) rather than an overflow.
    lower, upper = (1e-12, b.min() * 1e-6), (q.max() * 1e6, b.max() * 1e6)
    p0 = (min(max(q_max0, lower[0] * 10), upper[0] / 10), min(max(b_half0, lower[1] * 10), upper[1] / 10))
    method = "curve_fit"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)  # covariance undefined with 2 points: fine, unused
            (q_max, b_half), _ = curve_fit(
                saturating_throughput, b, q, p0=p0, bounds=(lower, upper), x_scale="jac", max_nfev=10_000
            )
    except (RuntimeError, ValueError):
        q_max, b_half, method = p0[0], p0[1], "linearized"
    predicted = saturating_throughput(b, q_max, b_half)
    b_90 = 9.0 * b_half
    return SaturatingFit(
        q_max=float(q_max),
        b_half=float(b_half),
        b_90=float(b_90),
        doubling_knee=find_doubling_knee(b, q, threshold),
        doubling_threshold=threshold,
        r2=compute_r2(q, predicted),
        extrapolated=bool(b_90 > b.max()),
        method=method,
    )


def fit_training_cost(tokens, time_s) -> LinearCostFit:
    """Fit seconds = seconds_fixed + seconds_per_token * tokens by ordinary least squares."""
    x, y = _as_points(tokens, time_s, "tokens", "time_s")
    if len(np.unique(x)) < 2:
        raise UserError("tokens", "need at least 2 distinct token counts to fit a line", "profile more batch sizes")
    b, a = np.polyfit(x, y, 1)
    return LinearCostFit(seconds_fixed=float(a), seconds_per_token=float(b), r2=compute_r2(y, a + b * x))
