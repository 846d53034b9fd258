"""The racing rule: when a sweep point can no longer win, and how many samples a seed gets, on the time-to-target axis
with the seed as the unit (the model is plan/log_time.py's: y_s = ln N*_s - ln q_s per seed, a between-seed variance
pooled over points, each point's own variance floored at the pooled one, Student's t at the pooled df).

Cannot win. A seed that has not reached the target at N samples has N*_s > N, so y_s > ln N - ln q_s, q_s its own
realized throughput so far (samples_per_step / median time/step after the warm-up step). Over the k seeds of point p
so far (a reached seed's y_s, an unreached one's bound), and with b the leader (the point with the smallest mean ln T
among those whose every seed reached the target):

    low_p  = mean_s y_s - t(df) sqrt(v_p / k)          (a lower bound on p's mean ln T)
    high_b = mean_s y_s + t(df) sqrt(v_b / n_b)        (an upper bound on b's)

t the (1 + confidence)/2 quantile of Student's t at the pooled df (each bound one-sided at 99.5% for the race's
confidence 0.99: a stop only saves compute, and a wrong one loses the answer), v the per-seed variance
max(scaled own, pooled, eval-grid resolution). Both need 2 seeds (the running one counts): with one, a
point's own spread is unknown. The point is stopped, "cannot win", once low_p > high_b. Run-level throughput scatter
(another process on the machine for a whole run) is in y_s, so in the pooled variance: the bounds carry it, which
per-step draws of q did not.

Budget from the reference. Once the reference's N* is known (the geometric mean of its reached seeds, with their q),
a seed of point p may train up to

    max(floor, BUDGET_MARGIN x N*_ref x q_s / q_ref)

samples (checked at each eval from its own q so far; `floor` is the sweep file's run.budget_samples), which is what it
needs to reach the target in BUDGET_MARGIN times the reference's time: a seed the budget censors has T_s above twice
the reference's T, which the plan's test then rules out against any winner (the winner is at least as fast as the
reference) unless the seeds scatter widely; then the plan says the budget cut that point rather than beat it
(plan/resolve.py). Its run's configured budget is the cap max(floor, BUDGET_MARGIN x N*_ref x max(1, B_p / B_ref)):
throughput cannot grow faster than the batch (a step cannot take less time at a larger batch).

Assumptions and error: as plan/log_time.py (a common seed spread; the scaled own variance for points that scatter
more). The rule wrongly stops the true winner w only if w's lower bound lies above its true mean ln T, or the
leader's upper bound below the leader's (which is at least w's): each has probability <= 0.5% at one check. The rule
is checked at every eval of every seed, and the answer is the plan's at the end (a stopped point is ruled out there
only if the best beats its bound); tests/test_race.py measures the error of the final answer (the true winner missing
from it) over whole simulated sweeps, under the conditions README lists.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import cached_property

from batchscale.plan.log_time import (Pool, SeedTime, estimate_point, lower_bound, pool_variance, resolution_variance,
                                      upper_bound)
from batchscale.plan.resolve import MIN_SEEDS
from batchscale.rundir import StoppedRun, primary_eval_score

RACE_CONFIDENCE = 0.99  # each bound one-sided at 99.5%: a stop only saves compute, and a wrong one costs the answer
BUDGET_MARGIN = 2.0


@dataclass(frozen=True)
class SeedResult:
    """What one finished seed tells the race."""

    label: str
    seed: int
    samples_to_target: float | None  # N*_s; None when the target was not reached within `samples`
    samples: float  # samples trained
    log_q: tuple[float, ...]  # ln(samples_per_step / time/step) of each step after the first (warm-up) step
    wall_s: float
    stopped: str | None = None  # "target" | "cannot_win" | "budget" | None (ran to its configured budget)
    stop_message: str | None = None  # the run's own words for it (summary.json stopped.message)
    crossing_gap: float | None = None  # samples between the evals that bracket the crossing (None: unknown)

    @property
    def reached(self) -> bool:
        return self.samples_to_target is not None

    @property
    def log_n(self) -> float | None:
        """ln N*_s, or ln N (a lower bound on it) when not reached; None when N* = 0 (no logarithm)."""
        value = self.samples_to_target if self.reached else self.samples
        return math.log(value) if value > 0 else None

    @cached_property  # the median over steps, computed once per seed (the race asks after every event)
    def seed_time(self) -> SeedTime | None:
        """ln N*_s (or its bound) and ln q_s, this run's own median-step throughput; None without either."""
        if self.log_n is None or not self.log_q:
            return None
        return SeedTime(self.log_n, statistics.median(self.log_q), self.reached,
                        resolution_variance(self.crossing_gap, self.samples_to_target))


def seed_times(seeds: list[SeedResult]) -> list[SeedTime] | None:
    """Every seed's SeedTime, or None when one of them has none."""
    times = [s.seed_time for s in seeds]
    return None if not times or None in times else times


def pooled_spread(results: dict[str, list[SeedResult]]) -> Pool | None:
    """The pooled variance of ln T over the points whose every seed (two or more) reached the target."""
    return pool_variance([times for seeds in results.values() if (times := seed_times(seeds))])


def log_time_low(times: list[SeedTime], pool: Pool, confidence: float) -> float | None:
    """Lower bound on a point's mean ln T from its seeds (reached, or bounds when not)."""
    return lower_bound(estimate_point(times, pool), pool, confidence) if times else None


def log_time_high(seeds: list[SeedResult], pool: Pool, confidence: float) -> float | None:
    """Upper bound on a point's mean ln T; None unless every seed reached the target (N* > 0) and was timed."""
    times = seed_times(seeds)
    if times is None or not all(t.reached for t in times):
        return None
    return upper_bound(estimate_point(times, pool), pool, confidence)


def estimated_log_time(seeds: list[SeedResult]) -> float | None:
    """The point estimate of mean ln T when every seed reached the target; else None."""
    times = seed_times(seeds)
    if times is None or not all(t.reached for t in times):
        return None
    return statistics.fmean(t.log_time for t in times)


@dataclass(frozen=True)
class Leader:
    label: str
    log_time_high: float  # its upper bound on ln T


def find_leader(results: dict[str, list[SeedResult]], pool: Pool | None,
                confidence: float = RACE_CONFIDENCE) -> Leader | None:
    """The point with the smallest estimated T among those whose every seed reached the target, with its bound."""
    if pool is None:
        return None
    estimates = {label: t for label, seeds in results.items()
                 if len(seeds) >= MIN_SEEDS and (t := estimated_log_time(seeds)) is not None}
    if not estimates:
        return None
    label = min(estimates, key=lambda k: (estimates[k], k))
    high = log_time_high(results[label], pool, confidence)
    return Leader(label, high) if high is not None else None


def cannot_win_message(log_low: float, samples: float, leader: Leader) -> str:
    return (f"cannot win (T > {math.exp(log_low):.0f} s at N = {samples:,.0f}; the leader {leader.label} reaches the "
            f"target within {math.exp(leader.log_time_high):.0f} s)")


@dataclass(frozen=True)
class Budget:
    """How many samples a seed may train, sized from the reference (module docstring)."""

    floor_samples: float  # the sweep file's run.budget_samples
    reference_log_n: float  # ln of the reference's N* (geometric mean over its reached seeds)
    reference_log_q: float  # ln of its q (geometric mean over those seeds)
    margin: float = BUDGET_MARGIN

    def samples_for(self, log_q: float) -> float:
        """max(floor, margin x N*_ref x q / q_ref) for a seed or point of throughput exp(log_q)."""
        return max(self.floor_samples, self.margin * math.exp(self.reference_log_n + log_q - self.reference_log_q))

    def cap(self, batch_ratio: float) -> float:
        """The run's configured budget: throughput grows at most as fast as the batch (B_p / B_ref)."""
        return max(self.floor_samples, self.margin * math.exp(self.reference_log_n) * max(1.0, batch_ratio))

    def over_reference(self, samples: float) -> float:
        return samples / math.exp(self.reference_log_n)


@dataclass(frozen=True)
class StopRule:
    """What a running seed of a racing sweep checks after each of its evals (in the worker, from its own records):
    stop at the target, when its point cannot win against the leader known when it started, or at the budget sized
    from the reference."""

    target: float
    samples_per_step: int
    prior: tuple[SeedTime, ...] = ()  # the point's finished seeds
    pool: Pool | None = None
    leader: Leader | None = None
    confidence: float = RACE_CONFIDENCE
    budget: Budget | None = None

    def decide(self, samples: float, score: float, log_q: list[float]) -> StoppedRun | None:
        if score >= self.target:
            return StoppedRun(reason="target", samples=int(samples),
                              message=f"reached the target {self.target:.4g} at N = {samples:,.0f}")
        if samples <= 0 or not log_q:
            return None
        own_log_q = statistics.median(log_q)
        if self.leader is not None and self.pool is not None and len(self.prior) + 1 >= MIN_SEEDS:
            low = log_time_low([*self.prior, SeedTime(math.log(samples), own_log_q, reached=False)], self.pool,
                               self.confidence)
            if low is not None and low > self.leader.log_time_high:
                return StoppedRun(reason="cannot_win", samples=int(samples),
                                  message=cannot_win_message(low, samples, self.leader))
        if self.budget is not None and samples >= (allowed := self.budget.samples_for(own_log_q)):
            gain = math.exp(own_log_q - self.budget.reference_log_q)
            return StoppedRun(reason="budget", samples=int(samples), message=(
                f"budget: N = {samples:,.0f} >= {allowed:,.0f} = max(the sweep's {self.budget.floor_samples:,.0f}, "
                f"{self.budget.margin:g} x N*_ref x its throughput gain {gain:.2f})"))
        return None

    def __call__(self, records: list[dict]) -> StoppedRun | None:
        """After an eval record: the run's records so far (the last one is the eval)."""
        score = primary_eval_score(records[-1])
        if score is None:
            return None
        steps = [r for r in records if r["kind"] == "step"][1:]  # the first step carries warm-up
        log_q = [math.log(self.samples_per_step / r["time/step"]) for r in steps if r.get("time/step")]
        return self.decide(records[-1]["samples"], score, log_q)
