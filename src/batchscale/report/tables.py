"""The report's text content, shared by report.html and report.md so the two always say the same thing:
the decision table (formatted cells per label), the learning-side table, what the doubts section checked, and the
"how this was measured" notes.

Numbers come from the plan document (`rundir.PlanDocument`) and analysis.json unchanged; only formatting happens here.
"""

from __future__ import annotations

from pathlib import Path

from batchscale.analysis import alignment, intervals
from batchscale.analysis.plots import ordered_labels
from batchscale.analysis.report import format_number, format_samples_to_target, rollout_cell
from batchscale.plan.doubts import R2_FLOOR, SCATTER_LIMIT
from batchscale.plan.explain import describe_verdict, format_time_to_target
from batchscale.report.inputs import ReportInputs

DECISION_HEADER = ["label", "P", "G", "B_train", "N* (samples)", "q (samples/s)", "rN", "throughput gain q/q_ref",
                   "T = N*/q", "realized T", "T/T_ref", "budget / N*_ref", "feasible"]
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
            _fixed(row.get("budget_over_reference_n_star"), "{:.2f}") + (" (cut)" if row.get("budget_cut") else ""),
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


def verdict(plan: dict) -> str:
    """Whether the decision is resolved by the test on log T (plan/resolve.py): a winner, a near-optimal set, or why
    neither; the same sentence `batchscale plan` prints."""
    return describe_verdict(plan)


DOUBTS_CHECKED = ("Checked: the throughput q of the seeds of each configuration, and of labels that run the same "
                  "batch the same way, agree within {limit:.2f}x; each profile's fit explains R^2 >= {floor} of its "
                  "points (the training law with a fixed cost >= 0 and a positive slope); the training profile "
                  "measured the runs' arithmetic and thread count.")


def doubts_checked() -> str:
    """What the doubts section checked (plan/doubts.py's thresholds), said whether or not anything was found."""
    return DOUBTS_CHECKED.format(limit=SCATTER_LIMIT, floor=R2_FLOOR)


def run_dirs_place(path: Path) -> str:
    """Where the report's runs are, relative to the report's directory: a sweep's runs/, or the directory itself (one
    run, or a directory of runs)."""
    return "runs/" if (path / "runs").is_dir() else f"{path.name}/"


def shown_path(path: Path | None, sweep_dir: Path) -> str:
    """A file as the report names it: relative to the sweep directory when inside it, else its name alone; never an
    absolute path of the machine that wrote the report (a report is shared)."""
    if path is None:
        return "-"
    try:
        return Path(path).resolve().relative_to(Path(sweep_dir).resolve()).as_posix()
    except ValueError:
        return Path(path).name


def measurement_notes(inputs: ReportInputs) -> list[str]:
    """One plain-text line per measurement: what it is and how it was measured."""
    plan, analysis = inputs.plan, inputs.analysis
    seeds = sorted({s for c in analysis["configs"].values() if isinstance(c.get("seeds"), list) for s in c["seeds"]})
    notes = [
        f"Reference configuration: {plan['reference']}. Target score: {format_number(analysis.get('target'), 4)} "
        f"(eval/accuracy, or the task's eval/score), from {shown_path(inputs.analysis_path, inputs.sweep_dir)}; where "
        f"it came from: {analysis.get('target_rule') or 'not recorded'}.",
        f"Seeds: {', '.join(map(str, seeds)) or '-'}; {inputs.runs_total} run director"
        f"{'y' if inputs.runs_total == 1 else 'ies'} in {run_dirs_place(inputs.sweep_dir)}. "
        "Learning curves show the seed mean and a +-1 seed-sd band.",
        "N*: first crossing of the target per seed, linearly interpolated between eval points; a seed that never reaches "
        f"it is censored. Learning table: mean and {intervals.DEFAULT_CONFIDENCE:.0%} {intervals.INTERVAL_METHOD} "
        f"(Student's t) over the seeds that reached it (with one seed: \"{intervals.ONE_SEED}\"). Decision table: N* "
        "and q are geometric means over seeds, so T = N*/q = exp(mean ln T_s). A configuration with a censored seed "
        "cannot be named best (its N* is only a lower bound) and is ruled out only when the best beats even that "
        "bound; budget / N*_ref is the most samples a seed of it could train over the reference's N*, \"(cut)\" where "
        "the budget cut it rather than the test beat it. Realized T: time/step summed up to each seed's crossing "
        "(warm-up step included), mean over reached seeds.",
        "Resolved: the winner beats every other configuration at the 95% level on ln T_s = ln N*_s - ln q_s, each seed "
        "with its own q (the seed is the unit), the between-seed variance pooled over configurations (sd "
        f"{format_number(plan.get('pooled_sd'))}, {plan.get('pooled_df') or 0} df) and floored there for each one. "
        "Resolved as a near-optimal set: the best cannot be told apart from some eligible points, each of which beats "
        "the reference, and it beats everything else; its members are called equivalent only when every T ratio "
        "interval (joint, Bonferroni) lies inside [0.90, 1.11] (plan/resolve.py); otherwise the report says why "
        "neither.",
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
        shown = shown_path(inputs.generation_profile_path, inputs.sweep_dir)
        notes.append(f"Generation profile ({shown}): {len(gen.rows)} concurrency levels; "
                     f"{details}; measured on {gen.measured_on}. Each level: a warm-up call, then the median of timed "
                     "repeats" + (" (device synchronized)." if gen.server is None else server_note(gen.server)))
    train = inputs.training_profile
    if train is not None:
        keys = ("model", "dtype", "device", "threads", "micro_batch_size", "repeats")
        details = ", ".join(f"{k} {getattr(train, k)}" for k in keys if getattr(train, k) is not None)
        notes.append(f"Training profile ({shown_path(inputs.training_profile_path, inputs.sweep_dir)}): "
                     f"{len(train.rows)} batch sizes"
                     + (f"; {details}" if details else "") + ".")
    return notes


def server_note(server) -> str:
    """How a server's profile was measured (profile/openai_server.py), for the report's methods."""
    return (f" (streamed requests; ignore_eos {server.ignore_eos}; tokens from {server.tokens_from}). The server's "
            "knee also gives the generation side of q: each label's time/generate is the reference's carried by the "
            "knee and the label's tokens per sample.")


def machine_note(inputs: ReportInputs) -> str:
    if not inputs.machine:
        return (f"Machine: unknown (none of the {inputs.runs_total} runs records one; imported and unfinished runs "
                "carry none).")
    parts = ", ".join(f"{key} {' / '.join(map(str, values))}" for key, values in inputs.machine.items())
    return f"Machine (from the summaries of {inputs.runs_with_summary} of {inputs.runs_total} runs): {parts}."
