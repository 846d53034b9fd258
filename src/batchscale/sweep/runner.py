"""Run a sweep's points, resumably, on an executor; report progress as runs finish and records arrive.

Each point trains into a staging directory `runs/.<name>.partial-<pid>-<token>/` whose name the sweep picks for it
(rundir.staging), and the sweep that started the point moves it to `runs/<name>/` when the point's worker reports
success. A directory under runs/ is therefore always a finished run moved there by the sweep that trained it to its
end. A sweep holds the directory's lock (rundir.lock) from before it looks at runs/ until its last run is in place,
so a rerun never races a live sweep: it skips finished runs, removes run directories without a summary, continues
each unfinished point from the newest checkpoint its staging directory holds (sweep.resume: claimed under a fresh
name, resumed by its worker) and removes every other staging directory (none belongs to a live process), restarting
those points cleanly; every record exists exactly once.

Workers die with the sweep (batchscale.processes): a sweep killed with SIGKILL leaves no worker training on, and no
late result can be renamed into runs/, because only the sweep process renames.

Cores are split, not oversubscribed: with W workers on C cores each run uses max(1, C // W) torch threads.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from batchscale.rundir import is_finished_run, is_run_dir, read_run, sweep_runs_dir, write_sweep_points
from batchscale.rundir.staging import sweep_staging_dir
from batchscale.sweep.resume import Resumable, reclaim_staging, with_threads
from batchscale.sweep.spec import Point

_events = None  # a local pool worker's progress queue, set by init_worker


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def init_worker(events, parent_pid: int) -> None:
    """First thing in a local pool worker: die with the sweep, and keep its progress queue."""
    from batchscale.processes import die_with_parent

    global _events
    die_with_parent(parent_pid)
    _events = events


def run_point(config_data: dict, staging: str, name: str, threads: int, events=None, stop=None,
              resume: bool = False) -> dict:
    """Train one point into `staging` (a fresh directory the sweep named); returns its summary. Runs in a worker
    process (every argument a plain value: a Ray task gets copies); the sweep moves `staging` into place. `stop`: a
    racing sweep's rule (sweep.race_rule.StopRule). With `resume`, `staging` is an unfinished run the sweep claimed
    (sweep.resume) and the run continues from its newest checkpoint, its earlier records kept."""
    from batchscale.config import validate_config
    from batchscale.train.loop import train

    cfg = validate_config(with_threads(config_data, threads))
    events = events if events is not None else _events
    post = events.put if events is not None else (lambda event: None)
    post(("start", name, None))

    def on_record(record: dict) -> None:
        keep = ("kind", "samples", "reward/mean", "eval/accuracy")
        post(("record", name, {k: record[k] for k in keep if k in record}))

    summary = train(cfg, Path(staging), overwrite=False, on_record=on_record, log=lambda line: None, stop=stop,
                    resume=resume, lock=False)  # the sweep lock covers its staging directories
    post(("done", name, summary))
    return summary


def failure_reason(error: BaseException) -> str:
    """A failed run's reason for the user: its UserError, or what a dead worker most likely means."""
    from batchscale.errors import UserError

    return str(error) if isinstance(error, UserError) else "its worker process died (killed, or out of memory?)"


def adopt(staging: Path, sweep_dir: Path, name: str) -> Path:
    """Move a point this sweep trained (its worker reported success) into runs/<name>/."""
    final = sweep_runs_dir(sweep_dir) / name
    os.replace(staging, final)
    return final


@dataclass
class SweepState:
    finished: list[Point]
    todo: list[Point]
    resumable: dict[str, Resumable]  # point name -> the staging directory its worker resumes (sweep.resume)

    def staging_for(self, point: Point, sweep_dir: Path, log: Callable[[str], None] = print) -> tuple[Path, bool]:
        """(staging directory, resume?) of a point about to be submitted: its claimed one (once; `log` hears that it
        resumes), else a fresh one."""
        claimed = self.resumable.pop(point.name, None)
        if claimed is None:
            return sweep_staging_dir(sweep_dir, point.name), False
        for line in claimed.lines(point):
            log(line)
        return claimed.staging, True


def prepare_sweep_dir(points: list[Point], sweep_dir: Path, threads: int | None = None,
                      log: Callable[[str], None] = print) -> SweepState:
    """Decide what is left to run, claim the staging directories its points resume from and clear the rest of what
    interrupted sweeps left (call while holding the sweep lock; `threads`: each run's, as run_point sets them).
    Records the sweep's points in sweep.json."""
    runs = sweep_runs_dir(sweep_dir)
    runs.mkdir(parents=True, exist_ok=True)
    finished, todo = [], []
    for point in points:
        final = runs / point.name
        if is_finished_run(final):
            finished.append(point)
            continue
        if os.path.lexists(final) and not is_run_dir(final):  # never delete what batchscale did not write
            from batchscale.errors import UserError

            raise UserError(str(final), f"is not a run batchscale wrote, but the sweep writes point {point.name} there",
                            f"move {final} out of {runs}, and rerun")
        shutil.rmtree(final, ignore_errors=True)  # a run directory without a summary did not finish
        todo.append(point)
    resumable = reclaim_staging(todo, sweep_dir, threads, log)
    write_sweep_points(sweep_dir, [{"name": p.name, "label": p.label, "seed": p.seed} for p in points])
    return SweepState(finished, todo, resumable)


def prebuild_models(points: list[Point], log=print, heartbeat_s: float | None = None) -> None:
    """Build cached models (the warm-started tiny model, converted GGUF) once here, not once per worker. A build is
    a `long_phase` that stays silent while the model is cached: in a log, one that runs prints its start line, a
    "still working" line at least every `heartbeat_s` seconds (default `console.HEARTBEAT_S`) and its time."""
    from batchscale.policy.load import smollm2_dir
    from batchscale.policy.tiny import build_tiny
    from batchscale.console import HEARTBEAT_S, long_phase

    seen = set()
    for point in points:
        model, task = point.config.model, point.config.task
        key = (model.name, task.model_dump_json())
        if key in seen:
            continue
        seen.add(key)
        if model.name not in ("tiny", "smollm2-135m"):
            continue
        title = "the tiny model's warm start" if model.name == "tiny" else "converting smollm2-135m"
        with long_phase(title, heartbeat_s=heartbeat_s or HEARTBEAT_S, announce=False) as phase:
            if model.name == "tiny":
                build_tiny(task, phase.relay(log))
            else:
                smollm2_dir(phase.relay(log))


def read_summary(sweep_dir: Path, name: str) -> dict:
    return read_run(sweep_runs_dir(sweep_dir) / name).summary.model_dump(mode="json")
