"""The report's text content, shared by report.html and report.md so the two always say the same thing:
the decision table (formatted cells per label), the learning-side table, and the "how this was measured" notes.

Numbers come from the plan document (`rundir.PlanDocument`) and analysis.json unchanged; only formatting happens here.
"""

from __future__ import annotations

from pathlib import Path

from batchscale.analysis import alignment, intervals
from batchscale.analysis.plots import ordered_labels
from batchscale.analysis.report import format_number, format_samples_to_target, rollout_cell
from batchscale.plan.explain import describe_verdict, format_time_to_target
from batchscale.report.inputs import ReportInputs

DECISION_HEADER = ["label", "P", "G", "B_train", "N* (samples)", "q (samples/s)", "rN", "throughput gain q/q_ref",
                   "T = N*/q", "realized T", "T/T_ref", "feasible"]
LEARNING_HEADER = ["label", "B_train", "lr", "seeds", "rollout (mean staleness)", "N* mean [95% CI] (reached)", "rN",
                   "update ratio", "aligned", "|g| actor"]


def _fixed(value, spec: str) -> str:
    return "-" if value is None else spec.format(value)


def decision_rows(plan: dict) -> list[tuple[dict, list[str]]]:
    """(plan row, formatted cells) per label, small batches first (as the analysis orders its plots)."""
    out = []
    by_batch = sorted(plan["rows"], key=lambda r: (r.get("samples_per_step") or float("inf"), r["label"]))
    for row in by_batch:
        censoring = row.get("censoring")
        n_star = row.get("samples_to_target")
        if row.get("stopped"):
            n_text = f"stopped: {row['stopped']}"
        elif n_star is None:
            n_text = "censored"
        else:
            n_text = f"{n_star:,.0f}" + (" (lower bound: partly censored)" if censoring == "partly censored" else "")
        label = row["label"] + (" (ref)" if row["label"] == plan["reference"] else "")
        out.append((row, [
            label, _fixed(row.get("prompts_per_step"), "{}"), _fixed(row.get("samples_per_prompt"), "{}"),
            _fixed(row.get("samples_per_step"), "{}"), n_text, _fixed(row.get("throughput_samples_per_s"), "{:,.2f}"),
            _fixed(row.get("r_n"), "{:.2f}"), _fixed(row.get("throughput_gain"), "{:.2f}x"),
            format_time_to_target(row.get("time_to_target")), format_time_to_target(row.get("time_to_target_realized")),
            _fixed(row.get("normalized_time_to_target"), "{:.2f}"),
            "yes" if row.get("feasible") else "no",
        ]))
    return out


def learning_rows(analysis: dict) -> list[list[str]]:
    """analysis.json per label, in batch order (the same cells as the analysis's own report.md)."""
    rows = []
    for label in ordered_labels(analysis):
        config = analysis["configs"][label]
        seeds = config.get("seeds")
        rows.append([
            label + (" (ref)" if label == analysis.get("reference") else ""),
            format_number(config.get("samples_per_step")), format_number(config.get("lr")),
            str(len(seeds)) if isinstance(seeds, list) else format_number(seeds), rollout_cell(config),
            format_samples_to_target(config["samples_to_target"], config.get("stopped")),
            format_number(config.get("r_n")),
            format_number(config.get("update_ratio")), format_number(config.get("aligned")),
            format_number(config.get("grad_norm_actor")),
        ])
    return rows


def headline(plan: dict) -> str:
    best = plan.get("best")
    if plan.get("answer") == "near_optimal":
        return f"Best configuration: {best}, the fastest of a near-optimal set: any of {', '.join(plan['near_optimal'])}"
    return f"Best configuration: {best}" if best else "No configuration can be recommended"


def verdict(plan: dict) -> str:
    """Whether the decision is resolved by the test on log T (plan/resolve.py): a winner, a near-optimal set, or why
    neither; the same sentence `batchscale plan` prints."""
    return describe_verdict(plan)


def run_dirs_place(path: Path) -> str:
    """Where the report's runs are, as it is on disk: a sweep's runs/, or the directory itself (one run, or a
    directory of runs)."""
    return f"{path / 'runs'}" if (path / "runs").is_dir() else str(path)


def measurement_notes(inputs: ReportInputs) -> list[str]:
    """One plain-text line per measurement: what it is and how it was measured."""
    plan, analysis = inputs.plan, inputs.analysis
    seeds = sorted({s for c in analysis["configs"].values() if isinstance(c.get("seeds"), list) for s in c["seeds"]})
    notes = [
        f"Reference configuration: {plan['reference']}. Target score: {format_number(analysis.get('target'), 4)} "
        f"(eval/accuracy, or the task's eval/score), from analysis.json ({inputs.analysis_path}); where it came "
        f"from: {analysis.get('target_rule') or 'not recorded'}.",
        f"Seeds: {', '.join(map(str, seeds)) or '-'}; {inputs.runs_total} run director"
        f"{'y' if inputs.runs_total == 1 else 'ies'} in {run_dirs_place(inputs.sweep_dir)}. "
        "Learning curves show the seed mean and a +-1 seed-sd band.",
        "N*: first crossing of the target per seed, linearly interpolated between eval points; a seed that never reaches "
        f"it is censored. Mean and {intervals.DEFAULT_CONFIDENCE:.0%} {intervals.INTERVAL_METHOD} (Student's t) over "
        f"the seeds that reached it (with one seed: \"{intervals.ONE_SEED}\"); rN = mean N*(B) / mean N*(B_ref). "
        "A configuration with any censored seed cannot win (its N* is only a lower bound). Realized T: time/step summed "
        "up to each seed's crossing (warm-up step included), mean over reached seeds.",
        "Resolved: the winner beats the runner-up and the reference at the 95% level on log T = ln N* - ln q, with the "
        "variance of ln N* across seeds and of ln q across steps (Welch t). Resolved as a near-optimal set: the best "
        "cannot be told apart from some eligible points, each of which beats the reference, and it beats every other "
        "eligible point (plan/resolve.py); otherwise the report says why neither.",
        f"Alignment: D = mean |J - J_ref| / pooled seed sd over the common sample range; aligned when "
        f"D <= {alignment.ALIGNMENT_THRESHOLD}.",
        f"Throughput q (samples/s): {plan.get('throughput_method')}. T = N*/q; T/T_ref = rN / (q/q_ref); the winner is "
        "the feasible, uncensored configuration with the smallest T (the largest q/rN).",
        "Gradient noise: log-log slope of the mean actor gradient norm vs B = "
        f"{format_number(analysis.get('grad_norm_slope'))} (pure noise: -0.5); B_simple = b/a from |g|^2 = a + b/B = "
        f"{format_number(analysis.get('b_simple'))} samples/update (B = samples_per_update).",
    ]
    notes += profile_notes(inputs)
    notes.append(machine_note(inputs))
    return notes


def profile_notes(inputs: ReportInputs) -> list[str]:
    notes = []
    gen = inputs.generation_profile
    if gen is None:
        notes.append("Generation profile: none given, so the critical generation batch and the regime may be unknown "
                     "(run `batchscale profile generation --json` and pass --generation-profile).")
    else:
        details = ", ".join(f"{k} {getattr(gen, k)}" for k in ("model", "dtype", "backend", "device", "threads",
                                                                "repeats"))
        notes.append(f"Generation profile ({inputs.generation_profile_path}): {len(gen.rows)} concurrency levels; "
                     f"{details}. Each level: a warm-up call, then the median of timed repeats (device synchronized).")
    train = inputs.training_profile
    if train is not None:
        keys = ("model", "dtype", "device", "threads", "micro_batch_size", "repeats")
        details = ", ".join(f"{k} {getattr(train, k)}" for k in keys if getattr(train, k) is not None)
        notes.append(f"Training profile ({inputs.training_profile_path}): {len(train.rows)} batch sizes"
                     + (f"; {details}" if details else "") + ".")
    return notes


def machine_note(inputs: ReportInputs) -> str:
    if not inputs.machine:
        return (f"Machine: unknown (none of the {inputs.runs_total} runs records one; imported and unfinished runs "
                "carry none).")
    parts = ", ".join(f"{key} {' / '.join(map(str, values))}" for key, values in inputs.machine.items())
    return f"Machine (from the summaries of {inputs.runs_with_summary} of {inputs.runs_total} runs): {parts}."
