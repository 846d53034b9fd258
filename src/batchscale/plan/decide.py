"""The decision rule: time-to-target per configuration and the feasible configuration that reaches the target soonest.

Follows the paper's rule (arXiv 2608.29296, "Decision rule and regimes"): time-to-target T = N*/q, with N* the
samples-to-target and q the realized end-to-end throughput in samples/s. Relative to a reference configuration,

    r_n = N* / N*_ref          (samples-to-target penalty)
    throughput_gain = q / q_ref
    T / T_ref = r_n / throughput_gain

and the best configuration is the feasible one maximizing q / r_n, which is the one minimizing T. The argmax does not depend
on the reference; the reference only normalizes what is shown.

Departures and choices the paper leaves open:
- N* and q of a configuration measured over seeds are geometric means (exp of the mean ln N*_s, ln q_s over seeds), so
  that T = N*/q = exp(mean ln T_s), the centre of the test on ln T (plan/log_time.py); a table's are as given.
- A configuration is *censored* when no seed reached the target (N* unknown) and *partly censored* when some seeds did not
  (N* is then the mean over the seeds that did, a lower bound). Neither can be named best: a lower bound on N* flatters
  exactly the large batches whose curves stop aligning. Neither is disqualified either: its censored seeds bound its T
  from below, and resolve.py rules it out only when the best beats even that bound. A point a racing sweep stopped
  because it could no longer win (`extra["stopped"]`, from analysis.json) is read by its seeds: censored where the
  stop cut them short, and compared like any other where they all reached the target before it (the stop then only
  denied it more seeds).
- Ties in T (relative difference below 1e-9) go to the smaller r_n (fewer samples, less compute), then the smaller
  samples_per_step (less memory, nearer the aligned range), then the earlier row.
- The reference must be feasible and have a known N*; otherwise the table cannot be normalized and a `UserError` says so.
- N* = 0 (the target met at the first eval) is allowed: such a row has rN = 0 and T = 0 (no score: q/rN is infinite);
  a reference with N* = 0 normalizes nothing, so no row gets a ratio and no winner is named (`why_unresolved` says why).
- No learning signal (analysis.json `learning_signal` false): the rows are shown, no winner is named.
- Whether the winner is resolved, i.e. beats every other configuration on ln T at the 95% level, or the answer is a
  near-optimal set of points that each beat the reference and cannot be told apart: resolve.py. Configurations that
  never ran (`not_run`: a racing sweep's time budget ended first) keep any answer from excluding them.
"""

from __future__ import annotations

import math
from dataclasses import replace

from batchscale.errors import UserError
from batchscale.plan.log_time import pool_variance
from batchscale.plan.resolve import ratios_to_reference, resolve_plan
from batchscale.plan.rows import ConfigMeasurement, Decision, PlanRow

TIE_RELATIVE_TOLERANCE = 1e-9


def compute_plan(measurements: list[ConfigMeasurement], reference: str, no_signal: str | None = None,
                 not_run: tuple[str, ...] = ()) -> Decision:
    """Compute r_n, throughput gain, T and T/T_ref for every configuration and pick the feasible fastest to target;
    `no_signal` (why there is no learning signal) shows the rows and names no winner; `not_run` names configurations
    that have no measurement because none of their seeds ran."""
    if not measurements:
        raise UserError("table", "has no configurations", "give at least the reference configuration")
    by_label: dict[str, ConfigMeasurement] = {}
    for m in measurements:
        if m.label in by_label:
            raise UserError(f"label {m.label!r}", "appears more than once", "give each configuration one row")
        by_label[m.label] = m
        _check_positive(m)
    if reference not in by_label:
        raise UserError(
            "reference", f"{reference!r} is not one of the labels {sorted(by_label)}", "pass --reference with one of them"
        )
    ref = by_label[reference]
    if not ref.feasible:
        why = ref.extra.get("infeasible_because")
        raise UserError(
            f"reference {reference!r}", f"is infeasible ({why})" if why else "is marked infeasible",
            "choose a reference that fits (--reference), or a shorter --context / larger hardware",
        )
    if no_signal is not None:
        rows = [_compute_row(m, replace(ref, samples_to_target=None)) for m in measurements]
        return Decision(reference=reference, rows=rows, best=None, why_unresolved=no_signal, no_decision=no_signal)
    if ref.censoring == "censored":
        raise UserError(
            f"reference {reference!r}",
            "never reached the target, so samples-to-target ratios are undefined",
            "lower the target or choose a reference that reaches it",
        )
    rows = [_compute_row(m, ref) for m in measurements]
    if ref.samples_to_target == 0:
        why = (f"the reference {reference} meets the target at its first eval (N* = 0), so no rN is defined: "
               "choose a higher --target")
        return Decision(reference=reference, rows=rows, best=None, why_unresolved=why, no_decision=why)
    best = _pick_best(rows)
    pool = pool_variance([m.seed_times for m in measurements])  # every configuration measured here: its seeds' spread
    r = resolve_plan(rows, best, reference, pool, tuple(label for label in not_run if label not in by_label))
    return Decision(reference, rows, best, runner_up=r.runner_up, why_unresolved=r.why_unresolved, answer=r.answer,
                    near_optimal=r.near_optimal, near_optimal_ratios=r.near_optimal_ratios,
                    joint_confidence=r.joint_confidence, equivalent=r.equivalent, budget_cut=r.budget_cut,
                    not_run=r.not_run, pool=pool, contenders=r.contenders,
                    reference_ratios=ratios_to_reference(rows, reference, pool))


def _check_positive(m: ConfigMeasurement) -> None:
    """Throughput and N* enter as divisors and ratios: both must be finite and > 0."""
    q = m.throughput_samples_per_s
    if not (math.isfinite(q) and q > 0):
        raise UserError(f"label {m.label!r} throughput", f"must be a positive number of samples/s, got {q}", "fix it")
    n = m.samples_to_target
    if n is not None and not (math.isfinite(n) and n >= 0):
        raise UserError(
            f"label {m.label!r} samples_to_target",
            f"must be a number of samples >= 0, got {n}",
            "fix the value, or mark the configuration censored if it never reached the target",
        )


def _compute_row(m: ConfigMeasurement, ref: ConfigMeasurement) -> PlanRow:
    gain = m.throughput_samples_per_s / ref.throughput_samples_per_s
    if m.samples_to_target is None:
        return PlanRow(m, None, gain, None, None, None, eligible=False)
    time_s = m.samples_to_target / m.throughput_samples_per_s
    if not ref.samples_to_target:  # N* = 0 at the reference (or unknown): nothing to normalize by
        return PlanRow(m, None, gain, time_s, None, None, eligible=False)
    r_n = m.samples_to_target / ref.samples_to_target
    return PlanRow(
        measurement=m,
        r_n=r_n,
        throughput_gain=gain,
        time_to_target_s=time_s,
        normalized_time_to_target=r_n / gain,
        score=gain / r_n if r_n > 0 else None,
        eligible=m.feasible and m.censoring == "reached",  # a stopped point whose every seed reached is measured
    )


def _pick_best(rows: list[PlanRow]) -> str | None:
    """Label of the eligible row with the smallest T; ties (see module docstring) to smaller r_n, then smaller batch."""
    eligible = [(i, r) for i, r in enumerate(rows) if r.eligible]
    if not eligible:
        return None
    fastest_s = min(r.time_to_target_s for _, r in eligible)
    tied = [(i, r) for i, r in eligible if r.time_to_target_s <= fastest_s * (1 + TIE_RELATIVE_TOLERANCE)]

    def tie_key(index_row: tuple[int, PlanRow]) -> tuple[float, float, int]:
        index, row = index_row
        batch = row.measurement.samples_per_step
        return (row.r_n, batch if batch is not None else float("inf"), index)

    return min(tied, key=tie_key)[1].label


def rank_rows(plan: Decision) -> list[PlanRow]:
    """Rows with a known T, fastest first (eligible or not); censored rows are left out."""
    return sorted((r for r in plan.rows if r.time_to_target_s is not None), key=lambda r: r.time_to_target_s)
