"""`batchscale analyze`: the paper's first stage ("align learning") from run directories to analysis.json.

Steps: read runs by label -> pick reference and target -> per label N* per seed, mean and bootstrap CI, rN and the update
ratio -> alignment against the reference -> gradient-norm proxy, slope and B_simple over the reference's LR-rule family ->
write analysis.json, PNG plots and report.md (every file written to a temporary name and moved into place only after all
of them rendered, so a failure leaves nothing half-written).

Default reference: among labels whose lr_rule is the default "sqrt" (all labels if none is), the smallest samples_per_step
(ties: fewer prompts_per_step, then label name): the paper's reference is the smallest batch of the retuned family.
Default target: see targets.py (80% of the way from the reference's initial to its best mean score).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

import numpy as np

from batchscale.analysis import alignment, bootstrap, curves, gradnoise, prediction, targets
from batchscale.analysis.runs import Run, load_runs
from batchscale.errors import DataWarning, UserError
from batchscale.rundir import ANALYSIS_FILE, AnalysisDocument

DEFAULT_LR_RULE = "sqrt"
CONFIG_KEYS = ("prompts_per_step", "samples_per_prompt", "samples_per_step", "samples_per_update", "updates_per_step",
               "lr", "lr_rule")


def analyze(
    path: Path,
    target: float | None = None,
    reference: str | None = None,
    out: Path | None = None,
    smooth_window: int = 1,
    seed: int = 0,
    allow_mixed: bool = False,
) -> dict:
    """Analyse the runs under `path`, write analysis.json, plots and report.md into `out` (default `path`); return the
    analysis.json document. DataWarnings (censoring, skipped dirs, target outside the scores) are also listed in
    report.md."""
    # matplotlib only once there is something to draw
    from batchscale.analysis.plots import PLOT_FILES
    from batchscale.analysis.report import render_outputs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataWarning)
        result, details = compute_analysis(Path(path), target, reference, smooth_window, seed, allow_mixed)
    details["warnings"] = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    for w in caught:  # hand them on to the caller (the CLI prints them)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    out_dir = Path(out) if out is not None else Path(path)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        files = render_outputs(result, details, out_dir)  # {final name: temporary path}
        files[ANALYSIS_FILE] = write_temporary(out_dir / ANALYSIS_FILE, json.dumps(result, indent=2, allow_nan=False) + "\n")
    except BaseException:
        for name in [*PLOT_FILES.values(), "report.md", ANALYSIS_FILE]:  # nothing half-written stays behind
            (out_dir / f".{name}.tmp").unlink(missing_ok=True)
        raise
    for name, temporary in files.items():
        os.replace(temporary, out_dir / name)
    return result


def write_temporary(final_path: Path, text: str) -> Path:
    """Write `text` next to `final_path` under a temporary name; the caller moves it into place."""
    temporary = final_path.with_name(f".{final_path.name}.tmp")
    temporary.write_text(text)
    return temporary


def is_default_lr_rule(lr_rule) -> bool:
    """sqrt scaling, named or given as its exponent 0.5."""
    return str(lr_rule).strip().lower() in (DEFAULT_LR_RULE, "0.5", "a=0.5")


def choose_reference(by_label: dict[str, list[Run]]) -> str:
    """Smallest samples_per_step among the default-LR-rule labels (all labels when none uses it)."""
    candidates = [label for label, runs in by_label.items() if is_default_lr_rule(runs[0].descriptor.lr_rule)]
    candidates = candidates or list(by_label)
    return min(
        candidates,
        key=lambda label: (by_label[label][0].samples_per_step, by_label[label][0].descriptor.prompts_per_step or 0, label),
    )


def resolve_target(target: float | None, reference_summary: dict, all_scores: np.ndarray) -> tuple[float, str]:
    """The target and how it was chosen; warns when it lies outside the observed scores."""
    if target is None:
        mean_scores = reference_summary["mean"]
        if mean_scores.size == 0 or not np.max(mean_scores) > mean_scores[0]:
            raise UserError(
                "target", "no default: the reference's mean score never rises above its initial value", "pass --target"
            )
        target = targets.choose_default_target(reference_summary["grid"], mean_scores)
        rule = f"default: {targets.DEFAULT_TARGET_FRACTION:.0%} of the way from the reference's initial to best mean score"
    else:
        if not math.isfinite(target):
            raise UserError("--target", f"must be a finite number, got {target}", "pass a score such as 0.5")
        rule = "given by the user"
    if target > np.max(all_scores):
        warnings.warn(
            f"target {target:.4g} is above every observed score (max {np.max(all_scores):.4g}): every seed is censored",
            DataWarning,
        )
    elif target <= np.min(all_scores):
        warnings.warn(
            f"target {target:.4g} is at or below every observed score (min {np.min(all_scores):.4g}): every seed reaches "
            "it at its first eval, so rN is undefined",
            DataWarning,
        )
    return float(target), rule


def compute_analysis(path: Path, target, reference, smooth_window: int, seed: int,
                     allow_mixed: bool = False) -> tuple[dict, dict]:
    """(analysis.json document, details for plots and report); runs of different tasks or models only with
    allow_mixed (analysis.runs.load_runs)."""
    if smooth_window < 1:
        raise UserError("smooth_window", "must be >= 1 eval point", "use 1 for no smoothing")
    by_label = load_runs(path, allow_mixed)
    if reference is not None and reference not in by_label:
        raise UserError("--reference", f"unknown label {reference!r}; labels: {sorted(by_label)}", "pass one of them")
    reference = reference or choose_reference(by_label)
    eval_curves = {label: [curves.extract_eval_curve(r, smooth_window) for r in runs] for label, runs in by_label.items()}
    step_curves = {label: [curves.extract_step_curve(r, smooth_window) for r in runs] for label, runs in by_label.items()}
    reference_summary = curves.summarize_seed_curves(eval_curves[reference])
    all_scores = np.concatenate([j for seed_curves in eval_curves.values() for _, j in seed_curves])
    target, target_rule = resolve_target(target, reference_summary, all_scores)

    per_label = {label: measure_label(by_label[label], eval_curves[label], target, seed) for label in by_label}
    reference_n, reference_updates = per_label[reference]["n_star"]["mean"], per_label[reference]["updates_mean"]
    lr_rule = by_label[reference][0].descriptor.lr_rule
    family = [label for label in by_label if by_label[label][0].descriptor.lr_rule == lr_rule]
    configs, details = {}, {"labels": {}, "reference": reference, "target_rule": target_rule, "family": family}
    for label, runs in by_label.items():
        measured = per_label[label]
        if measured["n_star"]["censored"]:
            outcome = "N* is the mean over seeds that did" if measured["n_star"]["reached"] else "N* is undefined"
            warnings.warn(
                f"{label}: {measured['n_star']['censored']} of {len(runs)} seeds never reached the target "
                f"(censored; {outcome})",
                DataWarning,
            )
        aligned = alignment.measure_alignment(eval_curves[label], eval_curves[reference])
        configs[label] = {
            **{key: getattr(runs[0].descriptor, key) for key in CONFIG_KEYS},
            "seeds": [r.seed for r in runs],
            "samples_to_target": measured["n_star"],
            "r_n": targets.compute_ratio(measured["n_star"]["mean"], reference_n),
            "updates_to_target": measured["updates_mean"],
            "update_ratio": targets.compute_ratio(measured["updates_mean"], reference_updates),
            "grad_norm_actor": None,
            "aligned": aligned["aligned"],
        }
        details["labels"][label] = {
            "lr_rule": runs[0].descriptor.lr_rule,
            "n_star_per_seed": measured["n_star_per_seed"],
            "alignment": aligned,
            "curve": curves.summarize_seed_curves(eval_curves[label]),
            "step_curve": curves.summarize_seed_curves(step_curves[label]),
        }
    grad = measure_grad_noise(by_label, family, configs, details)
    predicted = prediction.predict_label_penalties(by_label, reference, configs)  # rN from the reference's B_noise
    result = AnalysisDocument(
        reference=reference,
        target=target,
        target_rule=target_rule,
        configs=configs,
        grad_norm_slope=grad["actor"]["slope"] if grad.get("actor") else None,
        b_simple=grad["actor"]["b_simple"] if grad.get("actor") else None,
        prediction=predicted,
    ).to_json()  # the schema checks every key here, at the producer
    family_alignment = [(configs[label]["samples_per_step"], configs[label]["aligned"]) for label in family]
    details["alignment_break"] = alignment.find_alignment_break(family_alignment, configs[reference]["samples_per_step"])
    return result, details


def measure_label(runs: list[Run], seed_curves: list, target: float, seed: int) -> dict:
    """N* per seed, its censored bootstrap summary, and the mean updates-to-target over reached seeds."""
    n_star_per_seed = [targets.find_samples_to_target(n, j, target) for n, j in seed_curves]
    updates = [targets.compute_updates_to_target(n, r.samples_per_step) for n, r in zip(n_star_per_seed, runs)]
    reached_updates = [u for u in updates if u is not None]
    return {
        "n_star_per_seed": n_star_per_seed,
        "n_star": bootstrap.summarize_censored(n_star_per_seed, seed=seed),
        "updates_mean": float(np.mean(reached_updates)) if reached_updates else None,
    }


def measure_grad_noise(by_label: dict[str, list[Run]], family: list[str], configs: dict, details: dict) -> dict:
    """Grad-norm proxy per label (into configs/details) and slope + B_simple over the reference's LR-rule family."""
    # Average every label over the same sample window: up to the smallest final sample count among the family.
    final_samples = [max((r.steps[-1]["samples"] for r in by_label[label] if r.steps), default=math.inf) for label in family]
    max_samples = min(final_samples) if final_samples else None
    max_samples = None if max_samples == math.inf else max_samples
    aligned_batches = [configs[label]["samples_per_step"] for label in family if configs[label]["aligned"]]
    grad = {}
    for network, key in gradnoise.GRAD_NORM_KEYS.items():
        proxies = {label: gradnoise.measure_grad_norm(runs, key, max_samples) for label, runs in by_label.items()}
        for label, proxy in proxies.items():
            details["labels"][label][f"grad_norm_{network}"] = proxy["norm"] if proxy else None
            if network == "actor":
                configs[label]["grad_norm_actor"] = proxy["norm"] if proxy else None
        measured = [label for label in family if proxies[label] is not None]
        if not measured:
            grad[network] = None
            continue
        batches = [configs[label]["samples_per_step"] for label in measured]
        slope_range = gradnoise.select_slope_range(np.array(batches, dtype=float), aligned_batches)
        grad[network] = gradnoise.analyze_grad_noise(batches, [proxies[label] for label in measured], slope_range)
    details["grad_noise"] = grad
    details["grad_window_samples"] = max_samples
    return grad
