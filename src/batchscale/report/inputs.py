"""Everything the report shows, gathered once: the plan (through `plan.make.make_plan`, the same code path as
`batchscale plan`, so the two never disagree), analysis.json and the analysis's details (curves, per-seed N*,
alignment statistics) computed once for every figure and table, the optional generation and training profiles, the
machine the runs ran on (from their summaries), each seed's score against the training clock, and the doubts
(plan.doubts, the console's checks: q's scatter, the profiles' fits, a profile measured another way than the runs).

Reads run directories and documents only (formats in batchscale.rundir); imports neither torch nor matplotlib.
Profiles are optional: when none is given, the sweep directory's `profiles/generation.json` and
`profiles/training.json` are used if present.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from batchscale.errors import DataWarning, UserError
from batchscale.rundir import (ANALYSIS_FILE, TRAINING_PROFILE_FILE, AnalysisDocument, GenerationProfile,
                               TrainingProfile, find_run_dirs, read_document, read_run)


@dataclass(frozen=True)
class ReportInputs:
    sweep_dir: Path
    plan: dict  # the plan document (rundir.PlanDocument), as `batchscale plan --json` prints it
    analysis: dict  # analysis.json (rundir.AnalysisDocument)
    analysis_path: Path
    details: dict  # the analysis's details: curves, per-seed N*, alignment, gradient noise (analysis.analyze.compute_analysis)
    generation_profile: GenerationProfile | None
    generation_profile_path: Path | None
    training_profile: TrainingProfile | None
    training_profile_path: Path | None
    machine: dict[str, list] = field(default_factory=dict)  # summary machine key -> distinct values over runs
    runs_total: int = 0
    runs_with_summary: int = 0
    samples: list = field(default_factory=list)  # report.samples.LabelSamples: what the policy said, per label
    # label -> [(seed, seconds of time/step summed up to each eval, the eval scores)]: J against the training clock
    wall_curves: dict[str, list] = field(default_factory=dict)
    untimed_runs: int = 0  # runs with fewer than two evals on that clock (a step without time/step), left out
    doubts: list = field(default_factory=list)  # plan.doubts.Doubt: measurements the decision rests on, to doubt


def gather_inputs(sweep_dir: Path, generation_profile: Path | None, training_profile: Path | None,
                  allow_mixed: bool = False) -> ReportInputs:
    """Plan the sweep and read what the report needs; raises UserError (before anything is written) on bad input,
    and on runs of different tasks or models unless allow_mixed."""
    from batchscale.analysis.analyze import compute_analysis
    from batchscale.analysis.runs import check_mixed_runs
    from batchscale.plan.doubts import sweep_doubts
    from batchscale.plan.make import make_plan, plan_document
    from batchscale.report.samples import collect_samples

    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise UserError(f"sweep directory {sweep_dir}", "does not exist", "give the directory `batchscale sweep` wrote")
    check_mixed_runs(sweep_dir, allow_mixed)  # before any plan is made of them
    made = make_plan(path=sweep_dir, generation_profile=generation_profile)
    plan = plan_document(made)
    analysis = read_document(sweep_dir / ANALYSIS_FILE, AnalysisDocument)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # analyze already reported them when it wrote analysis.json
        _, details = compute_analysis(sweep_dir, analysis.target, analysis.reference, analysis.smooth_window,
                                      allow_mixed, analysis.score, target_rule=analysis.target_rule)
    generation_path = Path(plan.generation_profile) if plan.generation_profile else None
    training_path = find_training_profile(sweep_dir, training_profile)
    machine, total, with_summary = read_machine(sweep_dir)
    doubts = sweep_doubts(sweep_dir, [r.measurement for r in made.decision.rows], generation_path, training_path)
    wall_curves, untimed = read_wall_curves(sweep_dir, analysis.score, analysis.smooth_window, allow_mixed)
    return ReportInputs(
        sweep_dir=sweep_dir,
        plan=plan.to_json(),
        analysis=analysis.to_json(),
        analysis_path=sweep_dir / ANALYSIS_FILE,
        details=details,
        generation_profile=read_document(generation_path, GenerationProfile, "--generation-profile")
        if generation_path else None,
        generation_profile_path=generation_path,
        training_profile=read_document(training_path, TrainingProfile, "--training-profile") if training_path else None,
        training_profile_path=training_path,
        machine=machine,
        runs_total=total,
        runs_with_summary=with_summary,
        samples=collect_samples(sweep_dir),
        wall_curves=wall_curves,
        untimed_runs=untimed,
        doubts=doubts,
    )


def find_training_profile(sweep_dir: Path, given: Path | None) -> Path | None:
    if given is not None:
        if not Path(given).is_file():
            raise UserError(f"--training-profile {given}", "is not a file", "save `profile training --json` to it")
        return Path(given)
    default = sweep_dir / TRAINING_PROFILE_FILE
    return default if default.is_file() else None


def read_wall_curves(sweep_dir: Path, score: str, smooth_window: int,
                     allow_mixed: bool) -> tuple[dict[str, list], int]:
    """Per label (batch order is the figure's business), each seed's eval scores against the seconds of time/step
    summed up to each eval (analysis.targets.compute_realized_time: the clock of realized T), as the analysis reads
    the curves; (curves, runs left out with fewer than two evals on that clock)."""
    import numpy as np

    from batchscale.analysis.curves import extract_eval_curve
    from batchscale.analysis.runs import load_runs
    from batchscale.analysis.targets import compute_realized_time

    curves: dict[str, list] = {}
    untimed = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # the analysis reported these already
        by_label = load_runs(sweep_dir, allow_mixed, score)
    for label, runs in by_label.items():
        for run in runs:
            samples, scores = extract_eval_curve(run, smooth_window, score)
            seconds = [compute_realized_time(float(n), run.steps) if n > 0 else 0.0 for n in samples]
            timed = [i for i, s in enumerate(seconds) if s is not None]
            if len(timed) < 2:
                untimed += 1
                continue
            curves.setdefault(label, []).append((run.seed, np.array([seconds[i] for i in timed]),
                                                 np.asarray(scores)[timed]))
    return curves, untimed


def read_machine(sweep_dir: Path) -> tuple[dict[str, list], int, int]:
    """Distinct values of each summary `machine` fact over the runs; (values, runs, runs with a summary)."""
    values: dict[str, list] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # the analysis reported these already
        runs = [read_run(run_dir) for run_dir in find_run_dirs(sweep_dir)]
    finished = [run for run in runs if run.summary is not None]
    for run in finished:
        for key, value in run.summary.machine.items():
            value = ", ".join(map(str, value)) if isinstance(value, list) else value
            if value is not None and value not in values.setdefault(key, []):
                values[key].append(value)
    return {k: v for k, v in values.items() if v}, len(runs), len(finished)
