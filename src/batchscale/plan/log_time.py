"""Time-to-target over seeds, with the seed as the unit: the statistics every comparison of T uses (the plan's winner,
its near-optimal set, censored points, and a racing sweep's bounds; issue 38).

Model. For configuration p and seed s (one run), with N*_ps the seed's samples-to-target and q_ps the seed's own
realized throughput (plan/sweep_inputs.py: samples_per_step / median time/step after the warm-up step, the one
estimator of a run's q, for the point estimate and the test alike):

    y_ps = ln T_ps = ln N*_ps - ln q_ps = mu_p + e_ps,    e_ps ~ Normal(0, sigma^2), independent over seeds

Each seed is a run: its learning luck and the machine's run-to-run throughput (another process on the cores, the
frequency it ran at) both act on the whole run, so seeds, not steps, are the independent draws. Estimates:

    ybar_p = mean_s y_ps                      (T_p = exp(ybar_p) = geometric mean N* / geometric mean q)
    s^2    = sum_p sum_s (y_ps - ybar_p)^2 / df,   df = sum_p (n_p - 1)

the pooled variance over the configurations whose every seed reached the target (a censored seed's y is only a lower
bound, and a point's reached seeds alone are its faster ones), with df degrees of freedom. Each configuration's
per-seed variance is

    v_p = max(k_n s_p^2, s^2, r_p),   k_n = (n_p - 1) / chi^2_{n_p - 1}(0.40),   r_p = mean_s (gap_s / N*_s)^2 / 12

its own sample variance s_p^2 (with 2 seeds or more) scaled to a 60% upper confidence bound (k_n = 3.64 at 2 seeds,
1.96 at 3, 1.60 at 4: a variance from one degree of freedom falls below the truth in 68% of draws, and half the time
below 0.45 of it), floored at the pooled value and at the eval grid's resolution r_p (a crossing read between evals gap_s samples
apart is known to about that interval: uniform within it; N* read exactly on an eval point has no spread but is not
known better than the grid). So a configuration whose seeds scatter more than the others' is judged by its own
spread, and a zero spread never shrinks a variance.

Comparison of a with b: d = ybar_a - ybar_b, se^2 = v_a / n_a + v_b / n_b, interval d -/+ t se with t the
(1 + confidence)/2 quantile of Student's t at the pooled df; a beats b at that level when d + t se < 0. One-sided
bounds on mu_p are ybar_p -/+ t sqrt(v_p / n_p), each holding with probability (1 + confidence)/2. A configuration is
compared only from 2 seeds on (plan/resolve.py MIN_SEEDS): with one, its own spread is unknown.

Monotone in dispersion: every v_p and s^2 only grow when any configuration's seeds spread apart (about the same
mean), and the degrees of freedom depend on seed counts alone, so more dispersion never narrows any interval and
never makes an answer more confident (tests/test_plan_resolve.py: random sweeps, and the audit's P16 at 290/290
against 230/350 samples/s). A Welch test (the own variance at its own n_p - 1 df) would guard a configuration that
scatters more a little better, but it is not monotone (raising one term's variance can raise the Welch df and
shorten the interval), and with 2 seeds it answers far less often; the scaled own variance is the compromise,
measured below (scaled to its median only, a configuration whose seeds scatter 4x the others' was missed in 5.0% of
simulated sweeps; to its 60% bound, 2.5%; to its 70% bound, no better and a tenth fewer answers: docs/LOG.md).

A point with censored seeds (the target not reached within the samples it trained, N_s) enters with y_s = ln N_s -
ln q_s, a lower bound on its y: its mean is a lower bound on mu_p, so "a beats it" still holds when the test says so,
and nothing else can be read from it (plan/resolve.py).

Departures and what they cost: pooling assumes the seeds of every configuration scatter alike; the scaled own
variance guards those that scatter more, at the pooled df. tests/test_race.py measures the error rate of the final
answer with one configuration's seed spread 4x the others', with run-level throughput scatter and with heavy-tailed
seeds (docs/LOG.md, README): within the stated 5% in every condition tried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

from scipy.special import chdtri

from batchscale.analysis.intervals import student_quantile

CONFIDENCE = 0.95


@dataclass(frozen=True)
class SeedTime:
    """One seed's ln T: ln N*_s (or ln N_s, the samples it trained, when it did not reach the target) less ln q_s."""

    log_samples: float
    log_throughput: float  # ln q_s, the seed's own realized throughput (samples/s)
    reached: bool = True
    resolution_var: float = 0.0  # (gap / N*)^2 / 12: N* read between evals `gap` samples apart (0: unknown)

    @property
    def log_time(self) -> float:
        return self.log_samples - self.log_throughput


@dataclass(frozen=True)
class Pool:
    """The between-seed variance of ln T pooled over configurations, and its degrees of freedom."""

    variance: float
    df: int

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)


OWN_VARIANCE_BOUND = 0.6  # the own variance is scaled to this one-sided upper confidence bound


@lru_cache(maxsize=None)
def own_variance_factor(df: int) -> float:
    """k = df / (the 40% quantile of chi^2 with df degrees of freedom): k s^2 is a 60% upper confidence bound on the
    variance a sample variance s^2 with df degrees of freedom estimates (3.64 at 1 df, 1.96 at 2, 1.60 at 3)."""
    return df / float(chdtri(df, OWN_VARIANCE_BOUND))


def sample_variance(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def pool_variance(points: Iterable[Sequence[SeedTime]]) -> Pool | None:
    """s^2 over the configurations with >= 2 seeds, every one of which reached the target; None without a degree of
    freedom."""
    squares, df = 0.0, 0
    for seeds in points:
        if len(seeds) >= 2 and all(s.reached for s in seeds):
            squares += sample_variance([s.log_time for s in seeds]) * (len(seeds) - 1)
            df += len(seeds) - 1
    return Pool(squares / df, df) if df else None


@dataclass(frozen=True)
class PointEstimate:
    """What the model makes of one configuration's seeds: mean ln T (a lower bound unless `exact`), the per-seed
    variance v_p used, and the seed count."""

    mean: float
    variance: float
    seeds: int
    exact: bool  # every seed reached the target

    def standard_error(self) -> float:
        return math.sqrt(self.variance / self.seeds)


def estimate_point(seeds: Sequence[SeedTime], pool: Pool) -> PointEstimate:
    """ybar_p and v_p = max(own, pooled, grid resolution) over `seeds` (at least one)."""
    times = [s.log_time for s in seeds]
    own = sample_variance(times) * own_variance_factor(len(times) - 1) if len(times) >= 2 else 0.0
    resolution = sum(s.resolution_var for s in seeds) / len(seeds)
    return PointEstimate(sum(times) / len(times), max(own, pool.variance, resolution), len(times),
                         all(s.reached for s in seeds))


@dataclass(frozen=True)
class Comparison:
    """ln T_a - ln T_b and its interval at `confidence` (a's mean is a lower bound when a has censored seeds, and so
    is the difference then)."""

    difference: float
    low: float
    high: float
    confidence: float

    @property
    def beats(self) -> bool:
        """a reaches the target sooner than b at this level."""
        return self.high < 0

    def ratio_text(self) -> str:
        """"T ratio 0.97, 95% interval [0.85, 1.11]"."""
        return (f"T ratio {math.exp(self.difference):.2f}, {self.confidence:.0%} interval "
                f"[{math.exp(self.low):.2f}, {math.exp(self.high):.2f}]")


def compare(a: PointEstimate, b: PointEstimate, pool: Pool, confidence: float = CONFIDENCE) -> Comparison:
    """The interval on ybar_a - ybar_b: se^2 = v_a/n_a + v_b/n_b, Student's t at the pooled df."""
    difference = a.mean - b.mean
    half_width = student_quantile(confidence, pool.df) * math.sqrt(a.variance / a.seeds + b.variance / b.seeds)
    return Comparison(difference, difference - half_width, difference + half_width, confidence)


def lower_bound(point: PointEstimate, pool: Pool, confidence: float = CONFIDENCE) -> float:
    """One-sided bound on mu_p at (1 + confidence)/2 from below (a bound on the bound when seeds are censored)."""
    return point.mean - student_quantile(confidence, pool.df) * point.standard_error()


def upper_bound(point: PointEstimate, pool: Pool, confidence: float = CONFIDENCE) -> float:
    """One-sided bound on mu_p at (1 + confidence)/2 from above; only meaningful when every seed reached."""
    return point.mean + student_quantile(confidence, pool.df) * point.standard_error()


def resolution_variance(gap_samples: float | None, samples_to_target: float | None) -> float:
    """(gap / N*)^2 / 12, the variance of ln N* a crossing read between evals `gap` apart carries; 0 when unknown."""
    if not gap_samples or not samples_to_target or samples_to_target <= 0:
        return 0.0
    return (gap_samples / samples_to_target) ** 2 / 12.0
