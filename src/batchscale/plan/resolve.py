"""Is the winner resolved? A test of what the decision claims: the winner reaches the target sooner than the runner-up
and than the reference, at the 95% level, on log T.

ln T = ln N* - ln q. For the winner w and a rival r, with ln N* averaged over each one's reached seeds (n of them, sd
s_N) and ln q over the steps its throughput came from (m of them, sd s_q; plan/sweep_inputs.py):

    d = (mean ln N*_w - mean ln q_w) - (mean ln N*_r - mean ln q_r)
    se^2 = s_N,w^2 / n_w + s_q,w^2 / m_w + s_N,r^2 / n_r + s_q,r^2 / m_r

and w beats r when the upper end of the 95% interval d + t * se is below 0, with t from Student's t at the
Welch-Satterthwaite degrees of freedom (dominated by the few seeds: the steps are many). Resolved only when w beats the
runner-up (the eligible row with the next smallest T) and the reference (when it is neither). The seed-to-seed
variance of ln N* is the one that matters with 2-5 seeds; q's step noise is small but included. Departure: steps within
a run are treated as independent draws of ln q, which understates q's variance when step times drift.

Nothing is resolved from one seed ("one seed: uncertainty unknown"), from a table without per-seed spread, or when a
row's N* is 0 (no logarithm); `why_unresolved` says which.

The answer (`Decision.answer`) is one of four kinds:
- "winner": resolved as above (`resolved` is True for this answer only).
- "near_optimal": the answer is a set. With b the best (the winner above), S = {b} + {eligible r other than the
  reference: b does not beat r at 95%, i.e. the high end of compare_log_time(b, r) is >= 0}. A set answer requires
  |S| >= 2; every member of S beats the reference at 95% (the reference is never in S, so b is not the reference);
  every comparison could be formed (no one-seed or unknown-spread reason anywhere); and b beats every eligible row
  outside S at 95% (so the reference, when eligible, is beaten by b). Rows that are not eligible (infeasible,
  censored or partly censored, stopped by a racing sweep) cannot win and are left out, as for a single winner.
  `near_optimal` lists S fastest first; `why_unresolved` then says why there is no single winner (b cannot be told
  apart from the others; each beats the reference), which the set does not contradict. In words: "any of P8, P16
  (T/T_ref 0.64-0.68; each beats the reference; the difference between them is within the noise)".
- "unresolved": neither; `why_unresolved` gives the single-winner reasons and, after "no near-optimal set:", the
  first condition of the set rule that failed.
- "none": no eligible row, or nothing to decide on (compute_plan's no_decision): `best` is None.
The single-winner test comes first: a best that beats the runner-up and the reference is a winner even when some
slower row has too wide an interval to be beaten.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchscale.analysis.intervals import ONE_SEED, student_quantile
from batchscale.plan.rows import ConfigMeasurement, PlanRow

CONFIDENCE = 0.95


def compare_log_time(winner: ConfigMeasurement, rival: ConfigMeasurement,
                     confidence: float = CONFIDENCE) -> tuple[float, float, float] | str:
    """(d, low, high): ln T_winner - ln T_rival and its interval; or the reason no interval can be formed."""
    parts = []
    for m in (winner, rival):
        if m.log_samples_to_target_mean is None:
            if m.samples_to_target == 0:
                return f"{m.label} meets the target at its first eval (N* = 0): no test on log T"
            return (f"{m.label} has no spread of N* over seeds (a table, or an analysis.json older than this "
                    "test, gives none): uncertainty unknown")
        if m.log_samples_to_target_sd is None or not m.seeds_reached or m.seeds_reached < 2:
            return f"{m.label}: {ONE_SEED}"
        variances = [(m.log_samples_to_target_sd ** 2 / m.seeds_reached, m.seeds_reached - 1)]
        if m.log_throughput_sd is not None and m.throughput_steps and m.throughput_steps > 1:
            variances.append((m.log_throughput_sd ** 2 / m.throughput_steps, m.throughput_steps - 1))
        parts.append((m.log_samples_to_target_mean - math.log(m.throughput_samples_per_s), variances))
    difference = parts[0][0] - parts[1][0]
    variances = parts[0][1] + parts[1][1]
    total = sum(v for v, _ in variances)
    if total == 0:
        return difference, difference, difference
    degrees_of_freedom = total ** 2 / sum(v ** 2 / df for v, df in variances)
    half_width = student_quantile(confidence, degrees_of_freedom) * math.sqrt(total)
    return difference, difference - half_width, difference + half_width


@dataclass(frozen=True)
class Resolution:
    """What the test on log T makes of the plan's winner: the Decision fields runner_up .. near_optimal."""

    runner_up: str | None
    resolved: bool
    why_unresolved: str | None
    answer: str  # "winner" | "near_optimal" | "unresolved" | "none" (rows.ANSWERS)
    near_optimal: tuple[str, ...] = ()


def resolve_plan(rows: list[PlanRow], best: str | None, reference: str) -> Resolution:
    """A single winner, else a near-optimal set, else unresolved (module docstring)."""
    if best is None:
        return Resolution(None, False, "no configuration is eligible to win (infeasible, or censored in a seed)", "none")
    ranked = sorted((r for r in rows if r.eligible and r.label != best), key=lambda r: r.time_to_target_s)
    runner_up = ranked[0] if ranked else None
    winner = _row(rows, best)
    rivals = [r for r in (runner_up, _row(rows, reference)) if r is not None and r is not winner]
    rivals = list({r.label: r for r in rivals}.values())
    if winner.measurement.seeds_reached == 1:
        return Resolution(_label(runner_up), False, f"{best}: {ONE_SEED}", "unresolved")
    reasons = []
    for rival in rivals:
        compared = compare_log_time(winner.measurement, rival.measurement)
        if isinstance(compared, str):
            reasons.append(compared)
        elif compared[2] >= 0:
            role = "the runner-up" if rival is runner_up else "the reference"
            reasons.append(f"{best} does not beat {role} {rival.label} {_within(compared)}")
    if not reasons:
        return Resolution(_label(runner_up), True, None, "winner")
    members, ties, why_not = near_optimal_set(rows, winner, reference)
    if members:
        why = (f"no single winner: {best} cannot be told apart from {', '.join(members[1:])} at the "
               f"{CONFIDENCE:.0%} level ({'; '.join(ties)}), but each of them beats the reference")
        return Resolution(_label(runner_up), False, why, "near_optimal", members)
    return Resolution(_label(runner_up), False, "; ".join(reasons) + f"; no near-optimal set: {why_not}", "unresolved")


def near_optimal_set(rows: list[PlanRow], winner: PlanRow, reference: str) -> tuple[tuple[str, ...], list[str], str]:
    """(S fastest first, the tie sentences, "") when the rule of the module docstring gives a set; else ((), [], why)."""
    if winner.label == reference:
        return (), [], f"the fastest, {winner.label}, is the reference itself"
    ref = _row(rows, reference)
    members, ties = [winner], []
    others = sorted((r for r in rows if r.eligible and r is not winner), key=lambda r: r.time_to_target_s)
    for rival in others + ([] if ref.eligible else [ref]):
        compared = compare_log_time(winner.measurement, rival.measurement)
        if isinstance(compared, str):
            return (), [], compared
        if compared[2] < 0:
            continue
        if rival is ref:  # its numbers are in the single-winner reasons already: the reference is always a rival
            return (), [], f"{winner.label} does not beat the reference {reference} (above)"
        members.append(rival)
        ties.append(f"against {rival.label}: {_ratio(compared)}")
    if len(members) < 2:
        return (), [], f"{winner.label} beats every other eligible row"
    for member in members[1:]:
        compared = compare_log_time(member.measurement, ref.measurement)
        if isinstance(compared, str):
            return (), [], compared
        if compared[2] >= 0:
            return (), [], (f"{member.label}, which {winner.label} does not beat, does not beat the reference "
                            f"{reference} {_within(compared)}")
    return tuple(m.label for m in members), ties, ""


def _ratio(compared: tuple[float, float, float]) -> str:
    d, low, high = compared
    return f"T ratio {math.exp(d):.2f}, {CONFIDENCE:.0%} interval [{math.exp(low):.2f}, {math.exp(high):.2f}]"


def _within(compared: tuple[float, float, float]) -> str:
    return f"at the {CONFIDENCE:.0%} level: {_ratio(compared)} includes 1"


def _row(rows: list[PlanRow], label: str) -> PlanRow:
    return next(r for r in rows if r.label == label)


def _label(row: PlanRow | None) -> str | None:
    return None if row is None else row.label
