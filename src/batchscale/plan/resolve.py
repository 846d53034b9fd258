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
"""

from __future__ import annotations

import math

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


def resolve_plan(rows: list[PlanRow], best: str | None, reference: str) -> tuple[str | None, bool, str | None]:
    """(runner_up, resolved, why_unresolved) for the plan's winner."""
    if best is None:
        return None, False, "no configuration is eligible to win (infeasible, or censored in a seed)"
    ranked = sorted((r for r in rows if r.eligible and r.label != best), key=lambda r: r.time_to_target_s)
    runner_up = ranked[0] if ranked else None
    winner = next(r for r in rows if r.label == best)
    rivals = [r for r in (runner_up, next(r for r in rows if r.label == reference)) if r is not None and r is not winner]
    rivals = list({r.label: r for r in rivals}.values())
    if winner.measurement.seeds_reached == 1:
        return _label(runner_up), False, f"{best}: {ONE_SEED}"
    reasons = []
    for rival in rivals:
        compared = compare_log_time(winner.measurement, rival.measurement)
        if isinstance(compared, str):
            reasons.append(compared)
        elif compared[2] >= 0:
            d, low, high = compared
            role = "the runner-up" if rival is runner_up else "the reference"
            reasons.append(f"{best} does not beat {role} {rival.label} at the {CONFIDENCE:.0%} level: T ratio "
                           f"{math.exp(d):.2f}, {CONFIDENCE:.0%} interval [{math.exp(low):.2f}, {math.exp(high):.2f}] "
                           "includes 1")
    return _label(runner_up), not reasons, "; ".join(reasons) or None


def _label(row: PlanRow | None) -> str | None:
    return None if row is None else row.label
