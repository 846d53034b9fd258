"""The plan as a library: from a sweep directory or a table to the decision, its explanation, the regime and the plan
document (`rundir.PlanDocument`). `batchscale plan`, the report and the demo all call `make_plan`, so they cannot
disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from batchscale.errors import UserError
from batchscale.plan.decide import compute_plan
from batchscale.plan.explain import Regime, classify_regime, explain_decision
from batchscale.plan.load_table import load_table
from batchscale.plan.memory import MemoryLimit, apply_memory_limit, check_parallelism
from batchscale.plan.phase_times import carry_server_generation
from batchscale.plan.rows import Decision, PlanRow, ReferenceRatio
from batchscale.plan.sweep_inputs import THROUGHPUT_METHOD, load_sweep_inputs
from batchscale.rundir import PlanDocument


@dataclass(frozen=True)
class Plan:
    """What `make_plan` decided: the decision, its explanation, the regime and where the numbers came from (the
    plan document's `source`, `sweep`, `analysis`, ... keys)."""

    decision: Decision
    explanation: str
    regime: Regime
    source: dict


def make_plan(
    path: Path | None = None,
    table: Path | None = None,
    reference: str | None = None,
    generation_profile: Path | None = None,
    critical_generation_batch: float | None = None,
    critical_training_batch: float | None = None,
    memory: MemoryLimit | None = None,
    max_concurrency: int | None = None,
) -> Plan:
    """The plan (for `plan_document`); the `plan` command and the report both call this, so they cannot disagree.
    `max_concurrency` (sequences decoding at once) replaces what run.json or the table says."""
    if (path is None) == (table is None):
        raise UserError("plan input", "needs exactly one of a sweep directory or --table", "give one of them")
    if table is not None:
        measurements = load_table(table)
        reference = reference if reference is not None else measurements[0].label
        source = {"source": "table", "table": str(table), "throughput_method": "as given in the table"}
        gen_knee, b_simple, profile, no_signal, score, not_run = None, None, None, None, "eval", ()
    else:
        sweep = load_sweep_inputs(path, reference, generation_profile)
        measurements, reference = sweep.measurements, sweep.reference
        source = {
            "source": "sweep", "sweep": str(path), "analysis": str(sweep.analysis_path), "target": sweep.target,
            "throughput_method": THROUGHPUT_METHOD, "generation_profile": str(sweep.profile_path or "") or None,
        }
        gen_knee, b_simple = sweep.critical_generation_batch_samples, sweep.critical_training_batch_samples
        profile, no_signal, score, not_run = sweep.profile, sweep.no_signal, sweep.score, sweep.not_run
        if profile is not None:
            source.update(generation_source=profile.measured_on, generation_backend=profile.backend)
    for name, value in (("--critical-generation-batch", critical_generation_batch),
                        ("--critical-training-batch", critical_training_batch)):  # fmt: skip
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise UserError(name, f"must be a positive finite number of samples, got {value}", "pass a positive number")
    if max_concurrency is not None:
        check_parallelism(1, 1, max_concurrency)
        measurements = [replace(m, max_concurrency=max_concurrency) for m in measurements]
    if profile is not None and profile.server is not None:  # the deployed generator, not the runs' own
        measurements, how = carry_server_generation(measurements, reference, profile)
        source["throughput_method"] += f"; {how}"
    if memory is not None:
        measurements = apply_memory_limit(measurements, memory)
        source["memory"] = memory.to_json()
    decision = compute_plan(measurements, reference, no_signal, not_run)
    knee, knee_note = (critical_generation_batch, None) if critical_generation_batch is not None else \
        reachable_knee(gen_knee, profile, memory)
    regime = classify_regime(knee, critical_training_batch if critical_training_batch is not None else b_simple,
                             knee_note)
    if critical_generation_batch is None and profile is not None and regime.critical_generation_batch_samples:
        regime = replace(regime, sentence=f"{regime.sentence} Generation knee from {profile.measured_on}.")
    explanation = explain_decision(decision)
    if score == "train-reward":
        explanation += f" {TRAIN_REWARD_CAVEAT}"
    return Plan(decision, explanation, regime, source)


TRAIN_REWARD_CAVEAT = ("N* and rN come from the training reward (analyze --score train-reward), measured on the "
                       "training prompts, not a held-out eval.")


def reachable_knee(knee: float | None, profile, memory: MemoryLimit | None) -> tuple[float | None, str | None]:
    """min(B_90, largest measured concurrency, KV capacity over the replicas), and why it is tentative (the fit's
    knee lies beyond the measured range or beyond the KV capacity) or None."""
    if knee is None or profile is None:
        return knee, None
    largest = max(row.concurrency for row in profile.rows)
    capacity = memory.kv_max_batch * memory.replicas if memory is not None else None
    reachable = min(v for v in (knee, largest, capacity) if v is not None)
    reasons = []
    if profile.knee is not None and profile.knee.extrapolated or knee > largest:
        reasons.append(f"the fitted knee {knee:.0f} lies beyond the largest concurrency measured, {largest}")
    if capacity is not None and knee > capacity:
        reasons.append(f"the fitted knee {knee:.0f} lies beyond the KV capacity, {capacity} sequences")
    return reachable, "; ".join(reasons) or None


def plan_document(plan: Plan) -> PlanDocument:
    """The machine-readable plan; times in seconds, throughput in samples/s."""
    decision, regime = plan.decision, plan.regime
    ratios = {r.label: r for r in decision.reference_ratios}
    reference_n = decision.row(decision.reference).measurement.samples_to_target
    return PlanDocument.model_validate({
        "reference": decision.reference,
        "best": decision.best,
        "runner_up": decision.runner_up,
        "resolved": decision.resolved,
        "answer": decision.answer,
        "near_optimal": list(decision.near_optimal),
        "near_optimal_ratios": [vars(r) for r in decision.near_optimal_ratios],
        "joint_confidence": decision.joint_confidence,
        "equivalent": decision.equivalent,
        "budget_cut": list(decision.budget_cut),
        "not_run": list(decision.not_run),
        "pooled_sd": decision.pool.sd if decision.pool is not None else None,
        "pooled_df": decision.pool.df if decision.pool is not None else None,
        "why_unresolved": decision.why_unresolved,
        "explanation": plan.explanation,
        "regime": {
            "name": regime.name,
            "sentence": regime.sentence,
            "critical_generation_batch": regime.critical_generation_batch_samples,
            "critical_training_batch": regime.critical_training_batch_samples,
            "tentative": regime.tentative,
        },
        **plan.source,
        "rows": [_row_to_json(r, reference_n, r.label in decision.budget_cut, ratios.get(r.label))
                 for r in decision.rows],
    })


def plan_sweep(path: Path, generation_profile: Path | None = None) -> PlanDocument:
    """The plan document of a sweep directory (its analysis.json and runs), as `batchscale plan DIR --json` prints."""
    return plan_document(make_plan(path=path, generation_profile=generation_profile))


def _row_to_json(r: PlanRow, reference_n: float | None, cut: bool, ratio: ReferenceRatio | None) -> dict:
    m = r.measurement
    budget = m.budget_samples
    interval = {"normalized_time_to_target_low": ratio.low if ratio else None,
                "normalized_time_to_target_high": ratio.high if ratio else None,
                "normalized_time_to_target_at_least": ratio.ratio if ratio and ratio.bounded else None}
    return {
        "label": m.label,
        "prompts_per_step": m.prompts_per_step,
        "samples_per_prompt": m.samples_per_prompt,
        "samples_per_step": m.samples_per_step,
        "samples_to_target": m.samples_to_target,
        "throughput_samples_per_s": m.throughput_samples_per_s,
        "r_n": r.r_n,
        "throughput_gain": r.throughput_gain,
        "time_to_target": r.time_to_target_s,
        "normalized_time_to_target": r.normalized_time_to_target,
        "score": r.score,
        "feasible": m.feasible,
        "censoring": m.censoring,
        "eligible": r.eligible,
        "seeds": len(m.seed_times) or None,
        "budget_samples": budget,
        "budget_over_reference_n_star": budget / reference_n if budget and reference_n else None,
        "budget_cut": cut,
        **interval,
        **m.extra,
    }
