"""A sweep rerun continues each unfinished point from its newest checkpoint instead of starting it again.

An interrupted sweep leaves its unfinished points in staging directories, `runs/.NAME.partial-PID-TOKEN/`
(rundir.staging), each an unfinished run with the checkpoints it wrote (`run.checkpoint_every_samples`;
rundir.checkpoint). A rerun holds the sweep lock, so none of them belongs to a live process. For each point still to
run, `reclaim_staging`:

- takes, among the point's staging directories, the unfinished run (config.json and metrics.jsonl, no summary.json)
  whose newest checkpoint that passes its checks (rundir.checkpoint.newest_checkpoint) is the latest step;
- keeps it only if the point's config, as the sweep file gives it now (with the torch threads this sweep gives each
  run), continues that run (train.resume.continuation_problem: it differs in no key outside train.resume.MAY_DIFFER,
  and the budget does not shrink); otherwise the point starts again, and the sweep's output says why;
- renames it to a fresh staging name of this process (rundir.staging.claim_staging), which the point's worker then
  resumes (`train(..., resume=True)`, sweep.runner.run_point), locally or on Ray alike: the path is on the sweep
  directory every worker sees;
- says so when the point is submitted: `grpo-P8-G8-sqrt seed 0: resuming from step 12 (checkpoint, 1,536
  samples)`.

Every other staging directory (none usable, a finished one the sweep never moved into place, the losers of a point
with several) is removed with the lock files killed workers left (rundir.staging.clear_staging). A resumed synchronous
run writes the records the uninterrupted one would, times aside (train.resume), so a sweep killed mid-point and rerun
finishes with the uninterrupted sweep's records (tests/test_sweep_resume.py). A racing sweep's stop rule
(sweep.race_rule.StopRule) sees the resumed run's records from its first: those before the checkpoint come back
from metrics.jsonl.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from batchscale.config import Config, validate_config
from batchscale.errors import UserError
from batchscale.rundir.checkpoint import newest_checkpoint
from batchscale.rundir.run import CONFIG_FILE, METRICS_FILE, SUMMARY_FILE
from batchscale.rundir.staging import claim_staging, clear_staging, staged_points
from batchscale.sweep.progress import display_name
from batchscale.sweep.spec import Point
from batchscale.train.resume import continuation_problem


@dataclass(frozen=True)
class Resumable:
    """A staging directory this sweep claimed for a point, and the checkpoint its worker continues from."""

    staging: Path
    step: int
    samples: int
    warnings: tuple[str, ...] = ()  # its newer checkpoints skipped, and why

    def lines(self, point: Point) -> list[str]:
        """What the sweep's output says when the point's worker starts on it."""
        display = display_name(point.name, point.label, point.seed)
        return [*(f"{display}: {warning}" for warning in self.warnings),
                f"{display}: resuming from step {self.step} (checkpoint, {self.samples:,} samples)"]


@dataclass(frozen=True)
class StagedCheckpoint:
    path: Path  # the staging directory
    step: int
    samples: int
    warnings: tuple[str, ...]  # its newer checkpoints skipped, and why


def with_threads(config_data: dict, threads: int | None) -> dict:
    """A point's config as its worker trains it: `run.threads` set to the sweep's share of the cores."""
    if threads is None:
        return config_data
    return {**config_data, "run": {**config_data["run"], "threads": threads}}


def staged_checkpoint(path: Path) -> StagedCheckpoint | None:
    """The newest usable checkpoint of the unfinished run in staging directory `path`; None when it is not an
    unfinished run or has none."""
    if not (path / CONFIG_FILE).is_file() or not (path / METRICS_FILE).is_file() or (path / SUMMARY_FILE).exists():
        return None
    warnings: list[str] = []
    found = newest_checkpoint(path, warn=warnings.append)
    if found is None:
        return None
    checkpoint, _ = found
    return StagedCheckpoint(path, checkpoint.step, checkpoint.samples, tuple(warnings))


def point_config(point: Point, threads: int | None) -> Config:
    return validate_config(with_threads(point.config_data, threads))


def reclaim_staging(points: list[Point], sweep_dir: Path, threads: int | None,
                    log: Callable[[str], None] = print) -> dict[str, Resumable]:
    """For each of `points` (those still to run) the staging directory its worker resumes, claimed (see the module
    docstring); every other staging directory is removed. Call while holding the sweep lock."""
    staged = staged_points(sweep_dir)
    claimed: dict[str, Resumable] = {}
    for point in points:
        display = display_name(point.name, point.label, point.seed)
        candidates = [found for path in staged.get(point.name, []) if (found := staged_checkpoint(path)) is not None]
        if not candidates:
            if staged.get(point.name):
                log(f"{display}: not resuming its interrupted run (no usable checkpoint): it starts again")
            continue
        best = max(candidates, key=lambda c: (c.step, c.path.name))
        try:
            problem = continuation_problem(best.path, point_config(point, threads))
        except UserError as e:  # a config.json this batchscale cannot read back
            problem = f"its config.json cannot be read back ({e})"
        if problem is not None:
            log(f"{display}: not resuming its interrupted run from step {best.step}: {problem}; it starts again")
            continue
        staging = claim_staging(best.path, sweep_dir, point.name)
        claimed[point.name] = Resumable(staging, best.step, best.samples, best.warnings)
    clear_staging(sweep_dir, keep=[r.staging for r in claimed.values()])
    return claimed
