"""The racing rule: when a sweep point can no longer win, on the time-to-target axis, with its uncertainty.

A point p whose seed has not reached the target at N samples has N*_s > N for that seed, so its time-to-target is
bounded below. With the log scale of the decision rule (ln T = ln N* - ln q; plan/resolve.py), over the k seeds of p so
far (a reached seed gives ln N*_s, an unreached one the lower bound ln N_s):

    low_p  = mean_s ln N_s  - t(df) * sigma / sqrt(k)  -  (mean ln q_p + t(m-1) * sd(ln q_p) / sqrt(m))
    high_b = mean_s ln N*_s + t(df) * sigma / sqrt(n_b) - (mean ln q_b - t(m-1) * sd(ln q_b) / sqrt(m))

where b is the leader (the point with the smallest estimated T among those whose every seed reached the target), sigma
the seed-to-seed sd of ln N* pooled over every point with two or more reached seeds (df = sum of n - 1), and ln q the
per-step log throughputs after each run's warm-up step (m of them). t is the (1 + confidence)/2 quantile of Student's
t, so each bound is one-sided at 97.5% for the default confidence 0.95. The point is stopped, "cannot win", once
low_p > high_b.

Assumptions: seeds scatter ln N* alike at every point (the pooled sigma; a point's own 2-3 seeds cannot estimate it),
ln N* of a seed is normal around the point's mean, and step times are independent draws around the run's q (as in
plan/resolve.py). The rule wrongly stops the true winner w only if w's lower bound lies above its true ln T, or the
leader's upper bound below the leader's true ln T (which is >= w's): each has probability <= 2.5%, so a single
decision errs with probability <= 5%. The rule is checked at every eval of every seed; the simulation in
tests/test_race.py measures the rate over whole sweeps (repeated checks included): at most the stated 5% on the
designs it tries, near ties included.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from batchscale.analysis.intervals import student_quantile
from batchscale.rundir import StoppedRun, primary_eval_score

RACE_CONFIDENCE = 0.95


@dataclass(frozen=True)
class SeedResult:
    """What one finished seed tells the race."""

    label: str
    seed: int
    samples_to_target: float | None  # N*_s; None when the target was not reached within `samples`
    samples: float  # samples trained
    log_q: tuple[float, ...]  # ln(samples_per_step / time/step) of each step after the first (warm-up) step
    wall_s: float
    stopped: str | None = None  # "target" | "cannot_win" | None (ran to its budget)
    stop_message: str | None = None  # the run's own words for it (summary.json stopped.message)

    @property
    def reached(self) -> bool:
        return self.samples_to_target is not None

    @property
    def log_n(self) -> float | None:
        """ln N*_s, or ln N (a lower bound on it) when not reached; None when N* = 0 (no logarithm)."""
        value = self.samples_to_target if self.reached else self.samples
        return math.log(value) if value > 0 else None


@dataclass(frozen=True)
class Spread:
    """The pooled seed-to-seed sd of ln N* and its degrees of freedom."""

    sigma: float
    df: int


def pooled_spread(results: dict[str, list[SeedResult]]) -> Spread | None:
    """sd of ln N* pooled over the points with >= 2 reached seeds (N* > 0); None without a degree of freedom."""
    squares, df = 0.0, 0
    for seeds in results.values():
        logs = [math.log(s.samples_to_target) for s in seeds if s.reached and s.samples_to_target > 0]
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            squares += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
    return Spread(math.sqrt(squares / df), df) if df else None


def _log_q_bound(log_q: list[float], confidence: float, upper: bool) -> float | None:
    """Upper (or lower) one-sided bound on the mean ln q; None without steps."""
    if not log_q:
        return None
    mean = statistics.fmean(log_q)
    if len(log_q) < 2:
        return mean
    margin = student_quantile(confidence, len(log_q) - 1) * statistics.stdev(log_q) / math.sqrt(len(log_q))
    return mean + margin if upper else mean - margin


def log_time_low(log_n: list[float], log_q: list[float], spread: Spread, confidence: float) -> float | None:
    """Lower bound on a point's ln T from its seeds' ln N (reached or lower bounds) and steps' ln q."""
    q_high = _log_q_bound(log_q, confidence, upper=True)
    if not log_n or q_high is None:
        return None
    margin = student_quantile(confidence, spread.df) * spread.sigma / math.sqrt(len(log_n))
    return statistics.fmean(log_n) - margin - q_high


def log_time_high(seeds: list[SeedResult], spread: Spread, confidence: float) -> float | None:
    """Upper bound on a point's ln T; None unless every seed reached the target (N* > 0) and steps were timed."""
    if not seeds or not all(s.reached and s.samples_to_target > 0 for s in seeds):
        return None
    q_low = _log_q_bound([v for s in seeds for v in s.log_q], confidence, upper=False)
    if q_low is None:
        return None
    margin = student_quantile(confidence, spread.df) * spread.sigma / math.sqrt(len(seeds))
    return statistics.fmean(s.log_n for s in seeds) + margin - q_low


def estimated_log_time(seeds: list[SeedResult]) -> float | None:
    """The point estimate of ln T (mean ln N* - mean ln q) when every seed reached the target; else None."""
    if not seeds or not all(s.reached and s.samples_to_target > 0 for s in seeds):
        return None
    log_q = [v for s in seeds for v in s.log_q]
    return statistics.fmean(s.log_n for s in seeds) - statistics.fmean(log_q) if log_q else None


@dataclass(frozen=True)
class Leader:
    label: str
    log_time_high: float  # its upper bound on ln T


def find_leader(results: dict[str, list[SeedResult]], spread: Spread | None,
                confidence: float = RACE_CONFIDENCE) -> Leader | None:
    """The point with the smallest estimated T among those whose every seed reached the target, with its bound."""
    if spread is None:
        return None
    estimates = {label: t for label, seeds in results.items() if (t := estimated_log_time(seeds)) is not None}
    if not estimates:
        return None
    label = min(estimates, key=lambda k: (estimates[k], k))
    high = log_time_high(results[label], spread, confidence)
    return Leader(label, high) if high is not None else None


def cannot_win_message(log_low: float, samples: float, leader: Leader) -> str:
    return (f"cannot win (T > {math.exp(log_low):.0f} s at N = {samples:,.0f}; the leader {leader.label} reaches the "
            f"target within {math.exp(leader.log_time_high):.0f} s)")


@dataclass(frozen=True)
class StopRule:
    """What a running seed of a racing sweep checks after each of its evals (in the worker, from its own records):
    stop at the target, or stop when its point cannot win against the leader known when it started."""

    target: float
    samples_per_step: int
    prior_log_n: tuple[float, ...] = ()  # the point's finished seeds: ln N*_s, or ln N when not reached
    prior_log_q: tuple[float, ...] = ()
    spread: Spread | None = None
    leader: Leader | None = None
    confidence: float = RACE_CONFIDENCE

    def decide(self, samples: float, score: float, log_q: list[float]) -> StoppedRun | None:
        if score >= self.target:
            return StoppedRun(reason="target", samples=int(samples),
                              message=f"reached the target {self.target:.4g} at N = {samples:,.0f}")
        if self.leader is None or self.spread is None or samples <= 0:
            return None
        low = log_time_low([*self.prior_log_n, math.log(samples)], [*self.prior_log_q, *log_q], self.spread,
                           self.confidence)
        if low is not None and low > self.leader.log_time_high:
            return StoppedRun(reason="cannot_win", samples=int(samples),
                              message=cannot_win_message(low, samples, self.leader))
        return None

    def __call__(self, records: list[dict]) -> StoppedRun | None:
        """After an eval record: the run's records so far (the last one is the eval)."""
        score = primary_eval_score(records[-1])
        if score is None:
            return None
        steps = [r for r in records if r["kind"] == "step"][1:]  # the first step carries warm-up
        log_q = [math.log(self.samples_per_step / r["time/step"]) for r in steps if r.get("time/step")]
        return self.decide(records[-1]["samples"], score, log_q)
