"""`batchscale analyze`: the paper's first stage ("align learning") from run directories to analysis.json.

Steps: read runs by label -> optional centred smoothing (curves.py) -> is there a learning signal (signal.py)? -> pick
reference and target -> per label N* per seed, mean and t-interval on log N* (intervals.py), realized time-to-target, rN
and the update ratio -> alignment against the reference -> gradient-norm proxy, slope and B_simple over the reference's
LR-rule family (same exponent: "sqrt", "0.5" and "a=0.5" are one family) ->
write analysis.json, PNG plots and report.md (every file written to a temporary name and moved into place only after all
of them rendered, so a failure leaves nothing half-written).

Default reference: among labels whose lr_rule is the default "sqrt" (all labels if none is), the smallest samples_per_step
(ties: fewer prompts_per_step, then label name): the paper's reference is the smallest batch of the retuned family.
Default target: see targets.py (80% of the way from the reference's initial to its best mean score), offered only when
the reference's curve rises clearly above its start (signal.py). When no label does, there is no learning signal:
analysis.json says so (`learning_signal` false, `why_no_signal`), no N* is measured without a user target, and the plan
names no winner.
Where the target came from travels as analysis.json `target_rule`: "given by the user (--target)"; the target a racing
sweep fixed (sweep.json race.target, used when no --target is given: its runs stopped on reaching exactly that score);
or the default rule. The report passes the recorded rule back when it recomputes the details.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchscale.analysis import alignment, curves, gradnoise, intervals, prediction, signal, targets
from batchscale.analysis.runs import LoadedRun, load_runs
from batchscale.config import DEFAULT_LR_RULE, LR_RULE_EXPONENTS, read_lr_rule
from batchscale.errors import DataWarning, SparseEvalWarning, UserError
from batchscale.rundir import ANALYSIS_FILE, AnalysisDocument, race_target, read_sweep_document
from batchscale.rundir.ownership import (MARKER_FILE, check_may_write_outputs, directory_kind, mark_directory,
                                         read_marker)

CONFIG_KEYS = ("prompts_per_step", "samples_per_prompt", "samples_per_step", "samples_per_update", "updates_per_step",
               "lr", "lr_rule", "rollout_mode", "max_staleness")
STALENESS_KEY = "async/staleness_mean"


def analyze(
    path: Path,
    target: float | None = None,
    reference: str | None = None,
    out: Path | None = None,
    smooth_window: int = 1,
    allow_mixed: bool = False,
    score: str = "eval",
) -> dict:
    """Analyse the runs under `path`, write analysis.json, plots and report.md into `out` (default `path`); return the
    analysis.json document. DataWarnings (censoring, skipped dirs, target outside the scores) are also listed in
    report.md."""
    # matplotlib only once there is something to draw
    from batchscale.analysis.plots import PLOT_FILES
    from batchscale.analysis.report import render_outputs

    out_dir = Path(out) if out is not None else Path(path)
    check_may_write_outputs(out_dir, analysis_outputs(), "--out" if out is not None else "PATH")  # a user's report.md
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataWarning)
        result, details = compute_analysis(Path(path), target, reference, smooth_window, allow_mixed, score)
    details["warnings"] = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    for w in caught:  # hand them on to the caller (the CLI prints them)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
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
    if read_marker(out_dir) is None:  # so a rerun may replace these files: batchscale wrote them
        mark_directory(out_dir, directory_kind(out_dir) or "analysis")
    return result


def analysis_outputs() -> tuple[str, ...]:
    """The names analyze writes into its output directory (the failure cleanup removes these, by name)."""
    from batchscale.analysis.plots import PLOT_FILES

    return (*PLOT_FILES.values(), "report.md", ANALYSIS_FILE, MARKER_FILE)


TRAIN_REWARD_NOTE = ("scores are the training reward reward/mean (--score train-reward), measured on the training "
                     "prompts, not a held-out eval")


def warn_about_scores(by_label: dict[str, list[LoadedRun]], score: str) -> None:
    """Say when the curve is the training reward, and when a run's log starts late (resumed): its target baseline is
    then its first logged eval, not step 0."""
    if score == "train-reward":
        warnings.warn(TRAIN_REWARD_NOTE, DataWarning)
    for runs in by_label.values():
        for run in runs:
            if run.descriptor.first_step > 1:
                warnings.warn(f"{run.label} seed {run.seed}: the log starts at step {run.descriptor.first_step} "
                              "(resumed or truncated), so its baseline is its first logged eval, not step 0", DataWarning)


def write_temporary(final_path: Path, text: str) -> Path:
    """Write `text` next to `final_path` under a temporary name; the caller moves it into place."""
    temporary = final_path.with_name(f".{final_path.name}.tmp")
    temporary.write_text(text)
    return temporary


def normalize_lr_rule(lr_rule) -> float | str | None:
    """The LR rule as its exponent a (lr ~ B^a) when it names one ("sqrt", "0.5", "a=0.5" -> 0.5; the names are
    config's, `config.read_lr_rule`), else the text."""
    if lr_rule is None:
        return None
    text = str(lr_rule).strip().lower()
    exponent = read_lr_rule(text)
    return text if exponent is None else exponent


def is_default_lr_rule(lr_rule) -> bool:
    """sqrt scaling, named or given as its exponent 0.5."""
    return normalize_lr_rule(lr_rule) == LR_RULE_EXPONENTS[DEFAULT_LR_RULE]


@dataclass(frozen=True)
class ReferenceFacts:
    """What the reference choice reads of a configuration: its runs' run.json, or a sweep point's plan (before any
    run)."""

    lr_rule: str | None  # as run.json names it: "sqrt", "a=0.5", ...
    samples_per_step: int
    rollout_mode: str
    prompts_per_step: int | None


def choose_reference_label(facts: dict[str, ReferenceFacts]) -> str:
    """Smallest samples_per_step among the default-LR-rule labels (all labels when none uses it), a synchronous one
    before an asynchronous one of the same batch, then fewer prompts, then the label. Analysis and a racing sweep
    (sweep.adaptive, before its runs exist) both choose by it."""
    candidates = [label for label, f in facts.items() if is_default_lr_rule(f.lr_rule)] or list(facts)
    return min(candidates, key=lambda label: (facts[label].samples_per_step, facts[label].rollout_mode != "sync",
                                              facts[label].prompts_per_step or 0, label))


def choose_reference(by_label: dict[str, list[LoadedRun]]) -> str:
    """The reference among the labels of loaded runs (`choose_reference_label` on their run.json)."""
    return choose_reference_label({label: ReferenceFacts(runs[0].descriptor.lr_rule, runs[0].samples_per_step,
                                                         runs[0].descriptor.rollout_mode,
                                                         runs[0].descriptor.prompts_per_step)
                                   for label, runs in by_label.items()})


USER_TARGET_RULE = "given by the user (--target)"


def race_fixed_target(path: Path, target: float | None, score: str) -> tuple[float, str] | None:
    """(target, rule) of a racing sweep (sweep.json race.target) when none is given: its runs stopped at exactly that
    score, so another target would misread them. A --target that differs is kept, with a DataWarning; the training
    reward (--score train-reward) is not the score the race stopped on, so no race target is read for it."""
    raced = race_target(path) if score == "eval" and Path(path).is_dir() else None
    if raced is None:
        return None
    if target is None:
        return raced
    if not math.isclose(target, raced[0], rel_tol=1e-9, abs_tol=1e-12):
        warnings.warn(f"--target {target:.4g} differs from the target {raced[0]:.4g} the racing sweep fixed; runs "
                      "stopped on reaching that one, so N* at another target reads them wrongly", DataWarning)
    return None


def resolve_target(target: float | None, reference_summary: dict, reference_signal: dict, learning_signal: bool,
                   all_scores: np.ndarray, rule: str | None = None) -> tuple[float | None, str]:
    """The target and how it was chosen (None: no learning signal and none given): `rule` when the caller knows it
    (a racing sweep's fixed target, or the rule analysis.json recorded, which the report passes back), else
    "given by the user (--target)" for a given target, else the default rule. Warns when the target lies outside the
    observed scores."""
    if target is None:
        if not learning_signal:
            return None, "none: no label's curve rises clearly above its start"
        if not reference_signal["learns"]:
            raise UserError("target", f"no default: the reference's mean curve does not rise clearly above its start "
                            f"({reference_signal['note']})", "pass --target, or a --reference that learns")
        target = targets.choose_default_target(reference_summary["grid"], reference_summary["mean"])
        rule = (f"default: {targets.DEFAULT_TARGET_FRACTION:.0%} of the way from the reference's initial to best mean "
                "score")
    else:
        if not math.isfinite(target):
            raise UserError("--target", f"must be a finite number, got {target}", "pass a score such as 0.5")
        rule = rule or USER_TARGET_RULE
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


def compute_analysis(path: Path, target, reference, smooth_window: int = 1,
                     allow_mixed: bool = False, score: str = "eval", target_rule: str | None = None) -> tuple[dict, dict]:
    """(analysis.json document, details for plots and report); runs of different tasks or models only with
    allow_mixed (analysis.runs.load_runs); `score` picks the curve (curves.SCORES). `target_rule` says where a given
    `target` came from (the report passes analysis.json's back); without a target, a racing sweep's fixed one is
    used (`race_fixed_target`), else the default rule."""
    if not isinstance(smooth_window, int) or smooth_window < 1 or smooth_window % 2 == 0:
        raise UserError("--smooth-window", f"must be an odd number of eval points >= 1, got {smooth_window}",
                        "use 1 for no smoothing, or 3, 5, ... for a centred moving average")
    if score not in curves.SCORES:
        raise UserError("--score", f"unknown score {score!r}", f"use one of: {', '.join(curves.SCORES)}")
    by_label = load_runs(path, allow_mixed, score)
    warn_about_scores(by_label, score)
    if reference is not None and reference not in by_label:
        raise UserError("--reference", f"unknown label {reference!r}; labels: {sorted(by_label)}", "pass one of them")
    reference = reference or choose_reference(by_label)
    eval_curves = {label: [curves.extract_eval_curve(r, smooth_window, score) for r in runs]
                   for label, runs in by_label.items()}
    step_curves = {label: [curves.extract_step_curve(r, smooth_window, score) for r in runs]
                   for label, runs in by_label.items()}
    summaries = {label: curves.summarize_seed_curves(eval_curves[label]) for label in by_label}
    signals = {label: signal.measure_learning_signal(eval_curves[label], summaries[label]) for label in by_label}
    learning_signal = any(s["learns"] for s in signals.values())
    why_no_signal = None if learning_signal else (
        "no learning signal to decide on: no label's mean curve rises clearly above its start ("
        + "; ".join(f"{label} {s['note']}" for label, s in signals.items()) + ")")
    if why_no_signal:
        warnings.warn(why_no_signal, DataWarning)
    all_scores = np.concatenate([j for seed_curves in eval_curves.values() for _, j in seed_curves])
    raced = race_fixed_target(path, target, score) if target_rule is None else None
    if raced is not None:
        target, target_rule = raced
    target, target_rule = resolve_target(target, summaries[reference], signals[reference], learning_signal, all_scores,
                                         target_rule)
    if score == "train-reward" and TRAIN_REWARD_NOTE not in target_rule:
        target_rule += f"; {TRAIN_REWARD_NOTE}"

    per_label = {label: measure_label(label, by_label[label], eval_curves[label], target) for label in by_label}
    reference_n, reference_updates = per_label[reference]["n_star"]["mean"], per_label[reference]["updates_mean"]
    lr_rule = normalize_lr_rule(by_label[reference][0].descriptor.lr_rule)
    family = [label for label in by_label if normalize_lr_rule(by_label[label][0].descriptor.lr_rule) == lr_rule]
    configs, details = {}, {"labels": {}, "reference": reference, "target_rule": target_rule, "family": family}
    warn_censoring(by_label, per_label, reference, target)
    raced_stops = race_stops(path)
    for label, runs in by_label.items():
        measured = per_label[label]
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
            "time_to_target_realized": measured["realized_mean"],
            "learns": signals[label]["learns"],
            "staleness_mean": mean_of_present([r.get(STALENESS_KEY) for run in runs for r in run.steps]),
            "stopped": race_stop_message(runs) or raced_stops.get(label),
            "n_star_per_seed": measured["n_star_per_seed"],
            "samples_trained_per_seed": [float(samples_trained(r)) for r in runs],
            "crossing_gap_per_seed": measured["crossing_gap_per_seed"],
        }
        details["labels"][label] = {
            "lr_rule": runs[0].descriptor.lr_rule,
            "n_star_per_seed": measured["n_star_per_seed"],
            "realized_per_seed": measured["realized_per_seed"],
            "alignment": aligned,
            "signal": signals[label],
            "curve": summaries[label],
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
        smooth_window=smooth_window,
        score=score,
        learning_signal=learning_signal,
        why_no_signal=why_no_signal,
        prediction=predicted,
    ).to_json()  # the schema checks every key here, at the producer
    family_alignment = [(configs[label]["samples_per_step"], configs[label]["aligned"]) for label in family]
    details["alignment_break"] = alignment.find_alignment_break(family_alignment, configs[reference]["samples_per_step"])
    return result, details


def race_stops(path: Path) -> dict[str, str]:
    """label -> why a racing sweep stopped the point (sweep.json race.stopped): the race also stops a point between
    seeds, after a finished seed, when no run's summary says so."""
    document = read_sweep_document(path) if Path(path).is_dir() else None
    return dict(document.race.stopped) if document is not None and document.race is not None else {}


def samples_trained(run: LoadedRun) -> int:
    """Cumulative samples at the run's last record: a seed that never reached the target has N* above this."""
    return max((r["samples"] for r in (*run.steps, *run.evals)), default=0)


def race_stop_message(runs: list[LoadedRun]) -> str | None:
    """Why a racing sweep stopped this label's point ("cannot win (T > 41 s at N = 5,120)"), from the first of its
    seeds whose summary says so; None when none was stopped for that reason. A run stopped on reaching the sweep's
    target (reason "target") is read as any other: its N* is where it crossed."""
    for run in runs:
        stopped = run.summary.stopped if run.summary is not None else None
        if stopped is not None and stopped.reason == "cannot_win":
            return stopped.message
    return None


def warn_censoring(by_label: dict[str, list[LoadedRun]], per_label: dict, reference: str, target: float | None) -> None:
    """A DataWarning per label with censored seeds; a partly censored reference makes every rN a bound."""
    if target is None:
        return
    for label, runs in by_label.items():
        n_star = per_label[label]["n_star"]
        if n_star["censored"]:
            outcome = "N* is the mean over seeds that did" if n_star["reached"] else "N* is undefined"
            warnings.warn(f"{label}: {n_star['censored']} of {len(runs)} seeds never reached the target "
                          f"(censored; {outcome})", DataWarning)
    ref = per_label[reference]["n_star"]
    if ref["censored"] and ref["reached"]:
        warnings.warn(f"the reference {reference} is partly censored: its N* is a lower bound, so every rN is a bound "
                      "too (an upper bound for every label that reached the target in all seeds)", DataWarning)


def measure_label(label: str, runs: list[LoadedRun], seed_curves: list, target: float | None) -> dict:
    """N* per seed and its summary over seeds (intervals.py), the mean updates-to-target and the mean realized
    time-to-target over reached seeds; warns when a crossing was read from evals farther apart than 25% of N*."""
    if target is None:  # no learning signal and no target: nothing to measure
        n_star = {**intervals.summarize_censored([]), "interval": "no target: no learning signal"}
        return {"n_star_per_seed": [None] * len(runs), "n_star": n_star, "updates_mean": None,
                "realized_per_seed": [None] * len(runs), "realized_mean": None, "crossing_gap_per_seed": [None] * len(runs)}
    n_star_per_seed = [targets.find_samples_to_target(n, j, target) for n, j in seed_curves]
    warn_wide_brackets(label, runs, seed_curves, n_star_per_seed, target)
    updates = [targets.compute_updates_to_target(n, r.samples_per_step, r.descriptor.updates_per_step)
               for n, r in zip(n_star_per_seed, runs)]
    realized = [targets.compute_realized_time(n, r.steps) for n, r in zip(n_star_per_seed, runs)]
    return {
        "n_star_per_seed": n_star_per_seed,
        "n_star": intervals.summarize_censored(n_star_per_seed),
        "updates_mean": mean_of_present(updates),
        "realized_per_seed": realized,
        "realized_mean": mean_of_present(realized),
        "crossing_gap_per_seed": [None if (b := targets.find_crossing_bracket(n, j, target)) is None else b[1] - b[0]
                                  for n, j in seed_curves],
    }


def warn_wide_brackets(label: str, runs: list[LoadedRun], seed_curves: list, n_star_per_seed: list,
                       target: float) -> None:
    """One DataWarning per label whose crossing lies in an eval interval wider than 25% of that seed's N*."""
    wide = []
    for run, (samples, scores), n_star in zip(runs, seed_curves, n_star_per_seed):
        bracket = targets.find_crossing_bracket(samples, scores, target)
        if bracket is not None and n_star and bracket[1] - bracket[0] > targets.WIDE_BRACKET_FRACTION * n_star:
            wide.append(f"seed {run.seed}: evals at {bracket[0]:,.0f} and {bracket[1]:,.0f} samples, N* {n_star:,.0f}")
    if wide:
        warnings.warn(f"{label}: the crossing lies between evals more than {targets.WIDE_BRACKET_FRACTION:.0%} of N* "
                      f"apart ({'; '.join(wide)}), so linear interpolation reads N* late on a concave curve: evaluate "
                      "more often", SparseEvalWarning)


def mean_of_present(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def measure_grad_noise(by_label: dict[str, list[LoadedRun]], family: list[str], configs: dict, details: dict) -> dict:
    """Grad-norm proxy per label (into configs/details) and slope + B_simple over the reference's LR-rule family."""
    # Average every label over the same sample window: up to the smallest final sample count among the family.
    final_samples = [max((r.steps[-1]["samples"] for r in by_label[label] if r.steps), default=math.inf) for label in family]
    max_samples = min(final_samples) if final_samples else None
    max_samples = None if max_samples == math.inf else max_samples
    # the gradient is a mean over one update's samples: B of |g|^2 = a + b/B is samples_per_update (run.json)
    aligned_batches = [configs[label]["samples_per_update"] for label in family if configs[label]["aligned"]]
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
        batches = [configs[label]["samples_per_update"] for label in measured]
        slope_range = gradnoise.select_slope_range(np.array(batches, dtype=float), aligned_batches)
        grad[network] = gradnoise.analyze_grad_noise(batches, [proxies[label] for label in measured], slope_range)
    details["grad_noise"] = grad
    details["grad_window_samples"] = max_samples
    return grad
