"""Group run directories by configuration label for the analysis (the reading itself is `rundir.read_run`'s).

Accepted inputs: one run directory, a directory of run directories, or a sweep directory with
`runs/<label>__s<seed>/`. A run without a scored eval record is skipped with a warning; within a label, seeds must be
distinct and agree on the batch.

Runs of different tasks or models measure different things, so comparing them is refused unless the user asks for it
(`allow_mixed`, the commands' --allow-mixed), and then warned about; the message lists which runs hold which task and
model. A run whose descriptor does not say (an import without `task`/`model`) is compared on what it says.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from batchscale.analysis.curves import TRAIN_REWARD_KEY
from batchscale.errors import DataWarning, UserError
from batchscale.rundir import LoadedRun, RunDescriptor, find_run_dirs, primary_eval_score, read_run
from batchscale.rundir.run import read_descriptor

__all__ = ["LoadedRun", "check_mixed_runs", "check_one_task_and_model", "load_runs"]

NAMES_SHOWN = 3  # run directories named per (task, model) group in the message


def check_one_task_and_model(runs: list[tuple[Path, RunDescriptor]], allow_mixed: bool = False) -> None:
    """Refuse (or, with allow_mixed, warn about) runs of more than one task or model, naming which runs differ."""
    tasks = {d.task for _, d in runs if d.task is not None}
    models = {d.model for _, d in runs if d.model is not None}
    if len(tasks) <= 1 and len(models) <= 1:
        return
    groups: dict[tuple, list[str]] = {}
    for path, d in runs:
        groups.setdefault((d.task, d.model), []).append(Path(path).name)
    parts = []
    for (task, model), names in sorted(groups.items(), key=lambda item: (str(item[0][0]), str(item[0][1]))):
        shown = ", ".join(names[:NAMES_SHOWN]) + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")
        parts.append(f"task {task} / model {model}: {shown}")
    differs = " and ".join(kind for kind, values in (("tasks", tasks), ("models", models)) if len(values) > 1)
    listing = "; ".join(parts)
    if allow_mixed:
        warnings.warn(f"comparing runs of different {differs} (--allow-mixed): {listing}", DataWarning, stacklevel=2)
        return
    raise UserError("runs", f"hold different {differs}, which measure different things ({listing})",
                    "analyse each task and model on its own, or pass --allow-mixed to compare them anyway")


def check_mixed_runs(path: Path, allow_mixed: bool = False) -> None:
    """`check_one_task_and_model` over the runs under `path`, reading only their run.json."""
    check_one_task_and_model([(run_dir, read_descriptor(run_dir)) for run_dir in find_run_dirs(path)], allow_mixed)


def load_runs(path: Path, allow_mixed: bool = False, score: str = "eval") -> dict[str, list[LoadedRun]]:
    """All runs under `path` with at least one scored eval (with score "train-reward": a step with reward/mean),
    grouped by label, seeds sorted. Raises if none remain, and (unless allow_mixed) if they are runs of different
    tasks or models."""
    by_label: dict[str, list[LoadedRun]] = {}
    runs = [read_run(run_dir) for run_dir in find_run_dirs(path)]
    check_one_task_and_model([(run.path, run.descriptor) for run in runs], allow_mixed)
    for run in runs:
        run_dir = run.path
        if score == "train-reward":
            if not any(isinstance(r.get(TRAIN_REWARD_KEY), (int, float)) for r in run.steps):
                warnings.warn(f"skipping {run_dir}: no step record with {TRAIN_REWARD_KEY}", DataWarning)
                continue
        elif not any(primary_eval_score(r) is not None for r in run.evals):
            warnings.warn(f"skipping {run_dir}: no eval record with eval/accuracy or eval/score", DataWarning)
            continue
        by_label.setdefault(run.label, []).append(run)
    if not by_label:
        if score == "eval":
            raise UserError("path", f"no run under {path} has a scored eval record",
                            "let runs reach their first eval, or use --score train-reward for runs without evals")
        raise UserError("path", f"no run under {path} has a step record with {TRAIN_REWARD_KEY}",
                        "import runs whose logs carry the training reward")
    for label, runs in by_label.items():
        runs.sort(key=lambda r: r.seed)
        seeds = [r.seed for r in runs]
        if len(set(seeds)) != len(seeds):
            raise UserError(f"label {label}", f"seed repeated in {seeds}", "give each run of a label its own seed")
        batches = {(r.descriptor.samples_per_step, r.descriptor.samples_per_update) for r in runs}
        if len(batches) != 1:
            raise UserError(f"label {label}", f"seeds disagree on (samples_per_step, samples_per_update) "
                            f"{sorted(batches)}", "give each configuration its own label")
    return dict(sorted(by_label.items()))
