"""Run a sweep's points, resumably, on an executor; report progress as runs finish and records arrive.

Each point trains into a hidden staging directory `runs/.<name>.partial/` and is renamed to `runs/<name>/` only after
its summary is written, so a directory under runs/ is always a finished run. A rerun skips finished runs and deletes
and restarts staged ones, so a sweep killed at any moment and rerun has every record exactly once.

Cores are split, not oversubscribed: with W workers on C cores each run uses max(1, C // W) torch threads.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from batchscale.sweep.spec import Point
from batchscale.rundir import is_finished_run, read_run, sweep_runs_dir, write_sweep_points


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def staging_dir(sweep_dir: Path, name: str) -> Path:
    return sweep_runs_dir(sweep_dir) / f".{name}.partial"


def run_point(config_data: dict, sweep_dir: str, name: str, threads: int, events=None) -> dict:
    """Train one point into its staging directory, then move it into place. Runs in a worker process."""
    from batchscale.config import validate_config
    from batchscale.trainer import train

    config_data = {**config_data, "run": {**config_data["run"], "threads": threads}}
    cfg = validate_config(config_data)
    staging, final = staging_dir(Path(sweep_dir), name), sweep_runs_dir(sweep_dir) / name
    post = events.put if events is not None else (lambda event: None)
    post(("start", name, None))

    def on_record(record: dict) -> None:
        keep = ("kind", "samples", "reward/mean", "eval/accuracy")
        post(("record", name, {k: record[k] for k in keep if k in record}))

    summary = train(cfg, staging, overwrite=True, on_record=on_record, log=lambda line: None)
    os.replace(staging, final)
    post(("done", name, summary))
    return summary


@dataclass
class SweepState:
    finished: list[Point]
    todo: list[Point]


def prepare_sweep_dir(points: list[Point], sweep_dir: Path) -> SweepState:
    """Decide what is left to run; clear the staging of interrupted runs. Records the sweep's points in sweep.json."""
    runs = sweep_runs_dir(sweep_dir)
    runs.mkdir(parents=True, exist_ok=True)
    finished, todo = [], []
    for point in points:
        final = runs / point.name
        if is_finished_run(final):
            finished.append(point)
            continue
        shutil.rmtree(staging_dir(sweep_dir, point.name), ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)  # a run directory without a summary did not finish
        todo.append(point)
    write_sweep_points(sweep_dir, [{"name": p.name, "label": p.label, "seed": p.seed} for p in points])
    return SweepState(finished, todo)


def prebuild_models(points: list[Point], log=print) -> None:
    """Build cached models (the warm-started tiny model, converted GGUF) once here, not once per worker."""
    from batchscale.policy.load import smollm2_dir
    from batchscale.policy.tiny import build_tiny

    seen = set()
    for point in points:
        model, task = point.config.model, point.config.task
        key = (model.name, task.model_dump_json())
        if key in seen:
            continue
        seen.add(key)
        if model.name == "tiny":
            build_tiny(task, log)
        elif model.name == "smollm2-135m":
            smollm2_dir(log)


def read_summary(sweep_dir: Path, name: str) -> dict:
    return read_run(sweep_runs_dir(sweep_dir) / name).summary.model_dump(mode="json")
