"""Group run directories by configuration label for the analysis (the reading itself is `rundir.read_run`'s).

Accepted inputs: one run directory, a directory of run directories, or a sweep directory with
`runs/<label>__s<seed>/`. A run without a scored eval record is skipped with a warning; within a label, seeds must be
distinct and agree on the batch.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from batchscale.errors import DataWarning, UserError
from batchscale.rundir import Run, find_run_dirs, primary_eval_score, read_run

__all__ = ["Run", "load_runs"]


def load_runs(path: Path) -> dict[str, list[Run]]:
    """All runs under `path` with at least one scored eval, grouped by label, seeds sorted. Raises if none remain."""
    by_label: dict[str, list[Run]] = {}
    for run_dir in find_run_dirs(path):
        run = read_run(run_dir)
        if not any(primary_eval_score(r) is not None for r in run.evals):
            warnings.warn(f"skipping {run_dir}: no eval record with eval/accuracy or eval/score", DataWarning)
            continue
        by_label.setdefault(run.label, []).append(run)
    if not by_label:
        raise UserError("path", f"no run under {path} has a scored eval record", "let runs reach their first eval")
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
