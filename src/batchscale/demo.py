"""The main job: the paper's two-stage procedure ("align, then accelerate") end to end on the built-in default, on CPU.

1. Align learning: a GRPO sweep of the warm-started tiny model on arithmetic, at G = 8 over several P with the learning
   rate retuned by the square-root rule, plus a fixed-LR control at one larger batch. Analysis on the sample axis:
   N*, rN, the aligned family, the gradient-norm scaling and B_simple.
2. Accelerate: profile generation throughput against active concurrency (the knee) and training time against batch.
3. Decide: T = N*/q with q measured from the sweep's own step times, the feasible argmax of q / rN, the regime.
4. Report: report.html (plots embedded) and report.md.

The sweep file the demo runs is written into the output directory, so every number in the report can be reproduced
with the ordinary commands (`batchscale sweep`, `analyze`, `profile`, `plan`, `report`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from batchscale.console import console, print_plain
from batchscale.errors import DataWarning, SparseEvalWarning
from batchscale.files import resolve_out, write_json_atomic
from batchscale.rundir.ownership import mark_directory


@dataclass(frozen=True)
class DemoScale:
    prompts_per_step: tuple[int, ...]  # the sqrt-LR family, G = 8
    control_prompts_per_step: int  # the fixed-LR control
    seeds: tuple[int, ...]  # the most any point gets; every point starts with `initial_seeds` of them
    initial_seeds: int
    budget_samples: int
    eval_every_samples: int
    eval_size: int
    generation_levels: tuple[int, ...]
    training_batches: tuple[int, ...]
    target: float | None  # the demo's rule; None: the default rule on the reference's first seeds


# The demo's rule for the target: greedy exact accuracy 0.50 on the 256 held-out sums, fixed in advance. The
# warm-started policy starts in [0.25, 0.35] (policy/tiny: 0.273 as built here from the recipe, 0.344 for an earlier
# build); the reference passes 0.50 within 4,608 samples from either start, the larger batches only from the higher
# one (runs of 2026-12-02, docs/LOG.md), so the answer depends on the start (the report's curves begin there). Every
# run, the reference's included, can stop once the target is reached.
DEMO_TARGET = 0.50
DEMO_TARGET_RULE = ("the demo's rule: greedy exact accuracy 0.50 on the 256 held-out sums, fixed in advance (the "
                    "warm-started policy starts in [0.25, 0.35])")


# Every label evaluates at the same sample spacing, 512 samples (one step of P64): the spacing the racing rule's error
# rate was simulated at (sweep/race_simulation.py, README), whose stop checks run at each eval. N* lies at 2,600-5,300
# samples from the pinned start (docs/LOG.md, 2026-12-03), so a crossing's eval interval is 10-20% of N*; a CPU on
# which a seed learns faster (N* < 2,048) reads it from an interval over 25% of N*, which `analyze` warns about
# (SparseEvalWarning). The demo says why instead (`note_sparse_evals`): the spacing is its design, interpolation reads
# such a crossing late by about a percent (docs/LOG.md: +2.9% at 58% of N*, no smoothing), and the test on ln T
# already carries the grid's resolution ((gap / N*)^2 / 12: an sd of 7% at 25%). Every eval keeps all of its
# examples in samples.jsonl (run.log_samples = task.eval_size), so the report counts the answers training fixed and
# broke over the whole eval set. The sweep races (sweep.race): two seeds each to start (the least that gives an
# interval), up to four for the points the decision cannot yet tell apart.
FULL = DemoScale((4, 8, 16, 32, 64), 32, (0, 1, 2, 3), 2, 4608, 512, 256, (1, 2, 4, 8, 16, 32, 64, 128, 256),
                 (16, 32, 64, 128, 256), DEMO_TARGET)
QUICK = DemoScale((8, 16, 32), 32, (0, 1), 2, 1536, 256, 64, (1, 4, 16, 64), (16, 64), None)

# Two runs at a time, one thread each (on 2 cores): the tiny model's small updates gain little from a second thread
# (P4: 0.140 s a step on two, 0.157 on one; P32: 0.435 and 0.612), so two runs side by side do ~1.6x the work of one
# on both cores (docs/LOG.md). Every q is then a one-core q, measured beside another run.
DEMO_WORKERS = 2

# `make demo` in 10 minutes on 2 cores: the install (~2 min, outside this process) and the profiles, analysis and
# report after the sweep (~1.5 min on an AVX2-only CPU) are set aside; the sweep gets the rest, less what this process
# spent before it other than the tiny model's one-time warm start (first use only: ~2.5 min here, ~6 on AVX2 only),
# which is set-up like the install. No seed starts that would overrun it (sweep.race).
DEMO_WALL_S = 600.0
INSTALL_ALLOWANCE_S = 120.0
AFTER_SWEEP_ALLOWANCE_S = 90.0


def default_time_budget(spent_s: float) -> float:
    return max(60.0, DEMO_WALL_S - INSTALL_ALLOWANCE_S - AFTER_SWEEP_ALLOWANCE_S - spent_s)


def micro_batch(prompts_per_step: int) -> int:
    """Micro-batches of up to 128 sequences: the tiny model's GEMMs run at ~1.4x the speed of 32 (docs/LOG.md);
    execution only, the update is the same (tests/test_micro_batches.py)."""
    return min(128, prompts_per_step * 8)


def sweep_toml(scale: DemoScale) -> str:
    large = [p for p in scale.prompts_per_step if micro_batch(p) == 128]
    points = "".join(f'\n[[points]]\n"batch.prompts_per_step" = {p}\n"batch.micro_batch_size" = {micro_batch(p)}\n'
                     for p in scale.prompts_per_step if p not in large)
    return f"""# Written by `batchscale demo`: the learning side of the two-stage procedure. The demo races it:
#   batchscale sweep sweep.toml --adaptive --initial-seeds {scale.initial_seeds} --workers 2 --time-budget SECONDS{
    f" --target {scale.target}" if scale.target is not None else ""}
# (every point starts with {scale.initial_seeds} seeds; the contenders get up to {len(scale.seeds)}; README: the racing rule)
seeds = {list(scale.seeds)}

[set]
"model.name" = "tiny"
"task.reward" = "digit_match"
"batch.samples_per_prompt" = 8
"batch.reference_samples_per_step" = 128
"optim.lr" = 1e-5
"optim.compute_dtype" = "float32"
"sampling.max_new_tokens" = 6
"run.budget_samples" = {scale.budget_samples}
"run.eval_every_samples" = {scale.eval_every_samples}
"task.eval_size" = {scale.eval_size}
"run.log_samples" = {scale.eval_size}
"batch.micro_batch_size" = 128
"run.save_policy" = false

[grid]
"batch.prompts_per_step" = {large}
{points}
[[points]]   # the control: a larger batch with the learning rate NOT rescaled
"batch.prompts_per_step" = {scale.control_prompts_per_step}
"batch.micro_batch_size" = {micro_batch(scale.control_prompts_per_step)}
"optim.lr_rule" = "none"
"""


def check_demo_dir(out: Path) -> None:
    """The demo writes into a new or empty directory, or an earlier demo's (rundir.ownership: its marker, or a
    sweep.toml the demo wrote and nothing but the demo's files), whose sweep it resumes; never over a user's files
    (their own sweep.toml above all)."""
    from batchscale.errors import UserError
    from batchscale.rundir.ownership import MARKER_FILE, directory_kind

    if out.exists() and not out.is_dir():
        raise UserError("--out", f"{out} exists and is not a directory", "choose another --out")
    if not out.is_dir() or not any(out.iterdir()):
        return
    kind = directory_kind(out)
    if kind is None:
        raise UserError("--out", f"{out} is a non-empty directory without a demo batchscale wrote (no {MARKER_FILE} "
                        "marker, nor only the files an earlier demo writes there)", "choose a new or empty --out")
    if kind != "demo":
        raise UserError("--out", f"{out} is a {kind} directory, not a demo's", "choose a new or empty --out")


def run_demo(out: Path, quick: bool = False, time_budget_s: float | None = None) -> dict:
    from batchscale.plan.make import plan_sweep
    from batchscale.report.build import build_report
    from batchscale.rundir import GENERATION_PROFILE_FILE, PLAN_FILE, TRAINING_PROFILE_FILE, write_document
    from batchscale.sweep.driver import run_sweep
    from batchscale.sweep.race import RaceSettings
    from batchscale.sweep.runner import available_cores, prebuild_models
    from batchscale.sweep.spec import load_sweep_spec
    from batchscale.profile.generation import profile_generation
    from batchscale.profile.training import profile_training
    from batchscale.threads import choose_threads
    import torch

    began = time.perf_counter()
    scale = QUICK if quick else FULL
    out = resolve_out(out)
    check_demo_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    mark_directory(out, "demo")
    seconds: dict[str, float] = {}

    def stage(name: str, title: str):
        console.rule(f"[bold]{title}")
        return name, time.perf_counter()

    def done(mark) -> None:
        seconds[mark[0]] = time.perf_counter() - mark[1]

    sweep_file = out / "sweep.toml"
    sweep_file.write_text(sweep_toml(scale))
    points = load_sweep_spec(sweep_file)
    mark = stage("setup", "set-up: the warm-started tiny model (built on first use, then cached)")
    prebuild_models(points, log=print_plain)
    done(mark)

    mark = stage("sweep", "1/4 align learning: a GRPO sweep over P with sqrt-LR, and a fixed-LR control")
    spent = time.perf_counter() - began - seconds["setup"]
    budget = time_budget_s if time_budget_s is not None else default_time_budget(spent)
    race = RaceSettings(scale.initial_seeds, len(scale.seeds), budget)
    workers = min(DEMO_WORKERS, available_cores())
    swept = run_sweep(points, out, workers=workers, race=race, target=scale.target,
                      target_rule=DEMO_TARGET_RULE if scale.target is not None else None)
    done(mark)

    mark = stage("profiles", "2/4 accelerate: generation throughput vs concurrency, training time vs batch")
    torch.set_num_threads(choose_threads("tiny", workers=workers).threads)  # measured as the sweep's runs train
    generation = profile_generation("tiny", concurrencies=list(scale.generation_levels), repeats=3, log=print_plain)
    write_document(out / GENERATION_PROFILE_FILE, generation)
    # the sweep's arithmetic (optim.compute_dtype float32), not "auto", which is bf16 autocast on a native-bf16 CPU
    training = profile_training("tiny", batches=list(scale.training_batches), repeats=3, log=print_plain,
                                compute_dtype="float32")
    write_document(out / TRAINING_PROFILE_FILE, training)
    done(mark)

    mark = stage("analysis", "3/4 analyse on the sample axis and decide on the time axis")
    analysis = analyze_demo(out, scale)
    plan = plan_sweep(out, out / GENERATION_PROFILE_FILE)
    write_document(out / PLAN_FILE, plan)
    plan = plan.to_json()
    done(mark)

    mark = stage("report", "4/4 report")
    report = build_report(out, out / GENERATION_PROFILE_FILE, out / TRAINING_PROFILE_FILE)
    done(mark)

    result = {"out": str(out), "report": str(report), "best": plan["best"], "runner_up": plan["runner_up"],
              "answer": plan["answer"], "near_optimal": plan["near_optimal"], "equivalent": plan["equivalent"],
              "budget_cut": plan["budget_cut"], "not_run": plan["not_run"], "start_accuracy": start_accuracy(out),
              "resolved": plan["resolved"], "why_unresolved": plan["why_unresolved"],
              "explanation": plan["explanation"], "regime": plan["regime"], "reference": plan["reference"],
              "target": analysis["target"], "target_rule": analysis["target_rule"], "race": swept["race"],
              "seconds": seconds, "rows": plan["rows"]}
    write_json_atomic(out / "demo.json", result)
    return result


def analyze_demo(out: Path, scale: DemoScale) -> dict:
    """`analyze` on the demo's sweep: its DataWarnings handed on to the caller, but a crossing between sparse evals
    (SparseEvalWarning) said as the demo's own choice of spacing (see the comment on FULL), not warned about."""
    from batchscale.analysis.analyze import analyze

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataWarning)
        analysis = analyze(out)
    for w in caught:
        if not issubclass(w.category, SparseEvalWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    note_sparse_evals([str(w.message) for w in caught if issubclass(w.category, SparseEvalWarning)], scale)
    return analysis


def note_sparse_evals(messages: list[str], scale: DemoScale) -> None:
    """The demo's own eval spacing, said as a choice, in one line."""
    from batchscale.analysis.targets import WIDE_BRACKET_FRACTION

    if messages:
        labels = ", ".join(m.split(":", 1)[0] for m in messages)
        simulated = " (the spacing its racing rule's error rate was simulated at)" if scale == FULL else ""
        print_plain(f"note: {labels}: a crossing lies between evals more than {WIDE_BRACKET_FRACTION:.0%} of N* "
                    f"apart. The demo evaluates every {scale.eval_every_samples} samples by design{simulated}; "
                    "linear interpolation reads such a crossing late by about a percent, and the test on ln T "
                    "already counts the eval grid's resolution (docs/LOG.md).")


def start_accuracy(out: Path) -> float | None:
    """The policy's greedy accuracy before any update: the first eval of the runs (every run starts from the same
    pinned weights; the mean, should a CPU's rounding make them differ)."""
    from batchscale.rundir import find_run_dirs, read_run

    starts = [run.summary.eval_start for run in map(read_run, find_run_dirs(out))
              if run.summary is not None and run.summary.eval_start is not None]
    return sum(starts) / len(starts) if starts else None


def describe_budgets(rows: list[dict]) -> str:
    """"P4 1.70, P8 3.12, ..." : each point's budget over the reference's N*, "(cut)" where the budget cut it."""
    return ", ".join(f"{row['label']} {row['budget_over_reference_n_star']:.2f}" + (" (cut)" if row["budget_cut"] else "")
                     for row in rows if row.get("budget_over_reference_n_star") is not None)


def summarize_demo(result: dict) -> str:
    if result["answer"] == "winner":
        verdict = f"resolved: {result['best']}"
    elif result["answer"] == "near_optimal":
        tie = "equivalent within [0.90, 1.11]" if result.get("equivalent") else \
            "not separated: more seeds could change which is fastest"
        verdict = f"resolved as a near-optimal set: any of {', '.join(result['near_optimal'])} ({tie})"
    else:
        verdict = f"not resolved: {result['why_unresolved']}"
    race = result["race"]
    start = result.get("start_accuracy")
    lines = [f"decision: {result['best']} (reference {result['reference']}, target {result['target']:.4g}: "
             f"{result['target_rule']})",
             f"verdict: {verdict}", f"why: {result['explanation']}",
             f"start: greedy accuracy {start:.3f} before any update" if start is not None else "start: unknown",
             f"race: {race['ended']}; {race['samples_trained']:,.0f} samples trained, "
             f"{race['samples_trained'] / race['full_grid_samples']:.0%} of the full grid",
             f"budget / N*_ref: {describe_budgets(result['rows']) or 'unknown'}"]
    lines += [f"stopped: {label}: {why}" for label, why in race["stopped"].items()]
    lines += [f"cut by the budget, not beaten: {label}" for label in result.get("budget_cut") or []]
    lines += [f"not run (the time budget ended first): {label}" for label in result.get("not_run") or []]
    regime = result.get("regime")
    if isinstance(regime, dict):
        lines.append(f"regime: {regime.get('name')}: {regime.get('sentence', '')}")
    lines.append("time: " + ", ".join(f"{k} {v:.0f} s" for k, v in result["seconds"].items())
                 + f", total {sum(result['seconds'].values()):.0f} s")
    lines.append(f"report: {result['report']}")
    return "\n".join(lines)
