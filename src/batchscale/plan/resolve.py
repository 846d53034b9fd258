"""Is the answer resolved? A test of what the decision claims, on ln T over seeds (the seed is the unit: the model,
its pooled variance and degrees of freedom are in plan/log_time.py).

The best b (the eligible configuration with the smallest T = exp(mean ln T_s)) is compared with every other feasible
configuration r at the 95% level: b beats r when the upper end of the interval on ln T_b - ln T_r is below 0.
- An eligible r (every seed reached the target) that b does not beat is a rival still in the running.
- A configuration with censored seeds (the budget, or a racing sweep's stop, ended a seed before the target) enters
  with its censored seeds' bounds (ln N_s - ln q_s, N_s the samples trained), so its mean ln T is a lower bound: b
  beats it only when b is faster even than that bound. Censoring rules a point out only then; a censored point b
  does not beat was cut by the budget, not beaten (`budget_cut`), and the answer cannot name a winner without it.
- A configuration that never ran (a racing sweep's time budget ended first, `not_run`) has no bound: no answer
  excludes it.
- Infeasible configurations are ruled out by memory, not by the test.

The answer (`Decision.answer`) is one of four kinds:
- "winner": b beats every other feasible configuration and every configuration ran (`resolved` is True for this
  answer only).
- "near_optimal": the answer is a set S = {b} + {eligible r that b does not beat}, fastest first, given that b beats
  everything outside S (no budget cut, no configuration left unrun, every comparison formed), b is not the
  reference, and every member of S beats the reference at 95%. The set says the fastest configuration is among
  its members. Its members are called equivalent only when each one's T ratio to b, at the set's joint confidence
  (Bonferroni: each of its k - 1 intervals at 1 - 0.05 / (k - 1)), lies inside rows.EQUIVALENCE_MARGIN
  ([0.9, 1.11]); otherwise they are "not separated: more seeds could change which is fastest".
- "unresolved": neither; `why_unresolved` gives the single-winner reasons and, after "no near-optimal set:", the
  first condition of the set rule that failed.
- "none": no eligible row, or nothing to decide on (compute_plan's no_decision): `best` is None.

Error rate: the answer leaves the true fastest configuration out only if b beats it in a test, each one-sided at
2.5%; tests/test_race.py measures the rate of the final answer over whole simulated sweeps (racing, censoring and
time budgets included) and README states it. Nothing is resolved without a pooled spread (no configuration with two
seeds that reached the target: "one seed: uncertainty unknown"), from a table (no per-seed N* and q), or when a
row's N* is 0 (no logarithm); `why_unresolved` says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchscale.analysis.intervals import ONE_SEED
from batchscale.plan.log_time import (CONFIDENCE, Comparison, PointEstimate, Pool, compare, estimate_point,
                                      lower_bound, upper_bound)
from batchscale.plan.rows import EQUIVALENCE_MARGIN, ConfigMeasurement, PlanRow, RatioInterval, ReferenceRatio


MIN_SEEDS = 2  # a configuration is compared (beaten, or named best) only with its own spread in view


@dataclass(frozen=True)
class NoComparison:
    """Why no interval on ln T_a - ln T_b can be formed."""

    why: str


def estimate(m: ConfigMeasurement, pool: Pool | None) -> PointEstimate | NoComparison:
    """The model's view of one configuration, or why there is none."""
    if not m.seed_times:
        if m.samples_to_target == 0:
            return NoComparison(f"{m.label} meets the target at its first eval (N* = 0): no test on log T")
        return NoComparison(f"{m.label} has no per-seed N* and q (a table, or an analysis.json older than this "
                            "test, gives none): uncertainty unknown")
    if pool is None:
        return NoComparison(f"{m.label}: {ONE_SEED} (no configuration has two seeds that reached the target, so "
                            "the seed-to-seed spread is unknown)")
    if len(m.seed_times) < MIN_SEEDS:
        return NoComparison(f"{m.label}: {ONE_SEED} (its own spread is unknown, and the pooled one holds only if "
                            "its seeds scatter like the others')")
    return estimate_point(m.seed_times, pool)


def compare_log_time(a: ConfigMeasurement, b: ConfigMeasurement, pool: Pool | None,
                     confidence: float = CONFIDENCE) -> Comparison | NoComparison:
    """ln T_a - ln T_b with its interval (plan/log_time.py), or why it cannot be formed."""
    first, second = estimate(a, pool), estimate(b, pool)
    for e in (first, second):
        if isinstance(e, NoComparison):
            return e
    return compare(first, second, pool, confidence)


@dataclass(frozen=True)
class Resolution:
    """What the test on ln T makes of the plan's best: the Decision fields runner_up .. not_run, and who a racing
    sweep should give another seed (`contenders`: the best and every configuration it does not beat)."""

    runner_up: str | None
    why_unresolved: str | None
    answer: str  # "winner" | "near_optimal" | "unresolved" | "none" (rows.ANSWERS)
    near_optimal: tuple[str, ...] = ()
    near_optimal_ratios: tuple[RatioInterval, ...] = ()
    joint_confidence: float | None = None
    equivalent: bool | None = None
    budget_cut: tuple[str, ...] = ()
    not_run: tuple[str, ...] = ()
    contenders: tuple[str, ...] = ()


def resolve_plan(rows: list[PlanRow], best: str | None, reference: str, pool: Pool | None,
                 not_run: tuple[str, ...] = ()) -> Resolution:
    """A single winner, else a near-optimal set, else unresolved (module docstring)."""
    if best is None:
        return Resolution(None, "no configuration is eligible to win (infeasible, or censored in a seed)", "none",
                          not_run=not_run)
    winner = _row(rows, best)
    ranked = sorted((r for r in rows if r.eligible and r is not winner), key=lambda r: r.time_to_target_s)
    runner_up = ranked[0].label if ranked else None
    w = estimate(winner.measurement, pool)
    if isinstance(w, NoComparison):
        return Resolution(runner_up, w.why, "unresolved", not_run=not_run,
                          contenders=tuple(r.label for r in rows if r.measurement.feasible))
    reasons, unbeaten, cut = [], [], []
    for r in rows:
        if r is winner or not r.measurement.feasible:
            continue
        e = estimate(r.measurement, pool)
        if isinstance(e, NoComparison):
            reasons.append(e.why)
            continue
        compared = compare(w, e, pool)
        if compared.beats:
            continue
        if r.eligible:
            unbeaten.append((r, compared))
            role = "the runner-up " if r.label == runner_up else "the reference " if r.label == reference else ""
            reasons.append(f"{best} does not beat {role}{r.label} {_within(compared)}")
        else:
            cut.append(r)
            reasons.append(_cut_sentence(r, e, w, pool, best))
    reasons += [f"{label} did not run (the time budget ended first), so its T is unknown" for label in not_run]
    contenders = (best, *(r.label for r, _ in unbeaten), *(r.label for r in cut),
                  *(r.label for r in rows if r.measurement.feasible and isinstance(estimate(r.measurement, pool),
                                                                                    NoComparison)))
    common = dict(runner_up=runner_up, budget_cut=tuple(r.label for r in cut), not_run=not_run,
                  contenders=tuple(dict.fromkeys(contenders)))
    if not reasons:
        return Resolution(why_unresolved=None, answer="winner", **common)
    why_not = _why_no_set(rows, winner, reference, pool, unbeaten, len(reasons) > len(unbeaten))
    if why_not is not None:
        return Resolution(why_unresolved="; ".join(reasons) + f"; no near-optimal set: {why_not}", answer="unresolved",
                          **common)
    members = [winner] + sorted((r for r, _ in unbeaten), key=lambda r: r.time_to_target_s)
    joint = 1 - (1 - CONFIDENCE) / (len(members) - 1)
    ratios = tuple(_ratio(member, w, pool, joint) for member in members[1:])
    equivalent = all(EQUIVALENCE_MARGIN[0] <= r.low and r.high <= EQUIVALENCE_MARGIN[1] for r in ratios)
    ties = "; ".join(f"against {r.label}: {_within(c)}" for r, c in unbeaten)
    why = (f"no single winner: {best} cannot be told apart from {', '.join(m.label for m in members[1:])} at the "
           f"{CONFIDENCE:.0%} level ({ties}), but each of them beats the reference")
    return Resolution(why_unresolved=why, answer="near_optimal", near_optimal=tuple(m.label for m in members),
                      near_optimal_ratios=ratios, joint_confidence=joint, equivalent=equivalent, **common)


def _why_no_set(rows: list[PlanRow], winner: PlanRow, reference: str, pool: Pool, unbeaten: list,
                other_reasons: bool) -> str | None:
    """The first condition of the near-optimal set rule that fails (module docstring); None when the set holds."""
    if other_reasons:  # a budget cut, a configuration that did not run, or a comparison that cannot be formed
        return f"{winner.label} does not beat every configuration outside the set (above)"
    if winner.label == reference:
        return f"the fastest, {winner.label}, is the reference itself"
    if any(r.label == reference for r, _ in unbeaten):
        return f"{winner.label} does not beat the reference {reference} (above)"
    ref = _row(rows, reference)
    for member, _ in unbeaten:
        compared = compare_log_time(member.measurement, ref.measurement, pool)
        if isinstance(compared, NoComparison):
            return compared.why
        if not compared.beats:
            return (f"{member.label}, which {winner.label} does not beat, does not beat the reference {reference} "
                    f"{_within(compared)}")
    return None


def ratios_to_reference(rows: list[PlanRow], reference: str, pool: Pool | None) -> tuple[ReferenceRatio, ...]:
    """T_label / T_ref and its 95% interval for every other configuration the test can compare with the reference
    (rows.ReferenceRatio; a point with censored seeds gets a lower bound). The reference itself, and a point with one
    seed or no pooled spread, get none: their figure shows the point estimate alone."""
    ref = _row(rows, reference).measurement
    ratios = []
    for r in rows:
        if r.label == reference:
            continue
        compared = compare_log_time(r.measurement, ref, pool)
        if isinstance(compared, NoComparison):
            continue
        bounded = not all(s.reached for s in r.measurement.seed_times)
        ratios.append(ReferenceRatio(r.label, math.exp(compared.difference), math.exp(compared.low),
                                     None if bounded else math.exp(compared.high), bounded))
    return tuple(ratios)


def _cut_sentence(row: PlanRow, bounded: PointEstimate, winner: PointEstimate, pool: Pool, best: str) -> str:
    cause = "the racing sweep stopped" if row.measurement.extra.get("stopped") else "the budget cut"
    return (f"{cause} {row.label} rather than beat it: counting its censored seeds where they stopped, its T is at "
            f"least {math.exp(lower_bound(bounded, pool)):.3g} s (97.5% bound), not above {best}'s "
            f"{math.exp(upper_bound(winner, pool)):.3g} s")


def _ratio(member: PlanRow, best: PointEstimate, pool: Pool, confidence: float) -> RatioInterval:
    compared = compare(estimate_point(member.measurement.seed_times, pool), best, pool, confidence)
    return RatioInterval(member.label, math.exp(compared.difference), math.exp(compared.low), math.exp(compared.high))


def _within(compared: Comparison) -> str:
    return f"at the {compared.confidence:.0%} level: {compared.ratio_text()} includes 1"


def _row(rows: list[PlanRow], label: str) -> PlanRow:
    return next(r for r in rows if r.label == label)
