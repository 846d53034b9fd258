"""Drive a sweep: validate every point, lock the sweep directory, skip finished runs, run the rest on an executor
(all of them, or as a race: sweep.adaptive), with progress (sweep.progress: a live display in a terminal, plain lines
in a log), and move each finished run into place.
"""

from __future__ import annotations

import math
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing
from pathlib import Path

from batchscale.console import console, print_plain
from batchscale.errors import UserError
from batchscale.files import resolve_out
from batchscale.rundir.lock import SweepLock
from batchscale.rundir.ownership import MARKER_FILE, directory_kind, mark_directory, read_marker
from batchscale.sweep.executors import EXECUTORS, RunJob, open_executor, run_jobs
from batchscale.sweep.progress import SweepProgress
from batchscale.sweep.race import RaceSettings
from batchscale.sweep.runner import (adopt, available_cores, failure_reason, prebuild_models, prepare_sweep_dir,
                                     read_summary)
from batchscale.sweep.spec import Point


def check_inputs(points: list[Point]) -> None:
    """Read every distinct task's data (and import a user reward) now, so a bad input fails before any run starts."""
    from batchscale.tasks import build_task

    distinct = {(p.config.task.model_dump_json(), p.config.model.chat_template): p.config for p in points}
    for config in distinct.values():
        build_task(config.task, config.model.chat_template).close()


def check_devices(points: list[Point]) -> None:
    """Every `run.device` the points ask for exists on this machine (local executors: the runs start here), so a sweep
    for a GPU fails before its first run, not once per point."""
    from batchscale.device import resolve_device

    for device in sorted({p.config.run.device for p in points}):
        resolve_device(device)


SWEEP_KINDS = ("sweep", "demo")  # directories a sweep may write into (a demo's directory is a sweep of its own)


def check_sweep_dir(sweep_dir: Path) -> None:
    """A sweep writes into a new or empty directory, or one batchscale wrote as a sweep (rundir.ownership), never
    into a run, an export or a directory of someone else's files (whose sweep.json it would rewrite)."""
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise UserError("--out", f"{sweep_dir} exists and is not a directory", "choose another --out")
    if not sweep_dir.is_dir() or not any(sweep_dir.iterdir()):
        return
    kind = directory_kind(sweep_dir)
    if kind is None:
        raise UserError("--out", f"{sweep_dir} is a non-empty directory without a sweep batchscale wrote (no "
                        f"{MARKER_FILE} marker, nor only the files an earlier sweep writes there)",
                        "choose a new or empty --out (a rerun needs the sweep's own directory)")
    if kind not in SWEEP_KINDS:
        raise UserError("--out", f"{sweep_dir} is a {kind} directory, not a sweep directory",
                        "choose a new or empty --out")


def run_sweep(points: list[Point], sweep_dir: Path, executor: str = "local", workers: int = 1,
              address: str | None = None, threads: int | None = None, race: RaceSettings | None = None,
              target: float | None = None, target_rule: str | None = None) -> dict:
    """Run every point not yet finished, holding the sweep directory's lock throughout (a second sweep on the same
    directory is a UserError naming this one). With `race` the sweep races (sweep.race: points start with a few
    seeds, stop when they can no longer win, seeds go to the contenders); `target` is then the score runs stop at
    (default: the default rule on the reference's first seeds), `target_rule` where it came from. A point that fails with a UserError (a diverged run,
    a broken reward) does not stop the others; the sweep then ends with one UserError listing the failed points."""
    if executor not in EXECUTORS:
        raise UserError("--executor", f"unknown executor {executor!r}", f"choose one of: {', '.join(EXECUTORS)}")
    if workers < 1:
        raise UserError("--workers", f"must be >= 1, got {workers}", "pass --workers 1 or more")
    if target is not None and race is None:
        raise UserError("--target", "only a racing sweep stops runs at a target", "add --adaptive, or drop --target")
    if target is not None and not math.isfinite(target):
        raise UserError("--target", f"must be a finite score, got {target}", "pass e.g. --target 0.55")
    sweep_dir = resolve_out(sweep_dir)
    check_sweep_dir(sweep_dir)
    check_inputs(points)
    if executor == "local":  # a Ray cluster's nodes may have GPUs its driver lacks
        check_devices(points)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    threads = threads or max(1, available_cores() // workers)
    with SweepLock(sweep_dir):
        if read_marker(sweep_dir) is None:
            mark_directory(sweep_dir, directory_kind(sweep_dir) or "sweep")
        if race is not None:
            return _race_locked(points, sweep_dir, race, target, target_rule, executor, workers, address, threads)
        return _run_locked(points, sweep_dir, executor, workers, address, threads)


def event_handler(progress: SweepProgress, totals: dict[str, int]):
    """The executors' progress events (sweep.runner.run_point posts them) onto the display."""
    def on_events(events: list) -> None:
        for kind, name, payload in events:
            if kind == "start":
                progress.run_started(name, totals.get(name, 0))
            elif kind == "record":
                progress.record(name, payload)
    return on_events


def run_totals(points: list[Point]) -> dict[str, int]:
    return {p.name: p.plan.num_steps * p.plan.samples_per_step for p in points}


def _race_locked(points, sweep_dir, race, target, target_rule, executor, workers, address, threads) -> dict:
    from batchscale.sweep.adaptive import candidate_points, run_adaptive_locked

    candidates = candidate_points(points, race.max_seeds)
    console.print(f"racing sweep: {len({p.label for p in points})} points, {race.initial_seeds} seeds each to start, "
                  f"up to {race.max_seeds} for the contenders"
                  + (f", a time budget of {race.time_budget_s:.0f} s" if race.time_budget_s else "")
                  + f", on {executor} ({workers} worker(s) x {threads} thread(s))")
    first = len({p.label for p in points}) * race.initial_seeds
    with SweepProgress(first, 0, workers=workers) as progress:
        result = run_adaptive_locked(points, sweep_dir, race, target, executor, workers, address, threads, progress,
                                     event_handler(progress, run_totals(candidates)), target_rule)
    _raise_failures(sweep_dir, result.pop("failed"), result["runs"])
    return {"sweep_dir": str(sweep_dir), **result}


def _run_locked(points: list[Point], sweep_dir: Path, executor: str, workers: int, address: str | None,
                threads: int) -> dict:
    state = prepare_sweep_dir(points, sweep_dir, threads, log=print_plain)
    resumed = f" ({len(state.resumable)} from a checkpoint)" if state.resumable else ""
    console.print(f"sweep: {len(points)} runs, {len(state.finished)} already finished, {len(state.todo)} to run"
                  f"{resumed} on {executor} ({workers} worker(s) x {threads} thread(s))")
    if state.todo:
        prebuild_models(state.todo, log=print_plain)
    summaries = {p.name: read_summary(sweep_dir, p.name) for p in state.finished}
    jobs = [RunJob(point, *state.staging_for(point, sweep_dir, log=print_plain)) for point in state.todo]
    failed: list[tuple[str, BaseException]] = []
    with SweepProgress(len(points), len(state.finished), workers=workers) as progress:
        pool = open_executor(executor, workers, threads, address, event_handler(progress, run_totals(state.todo)))
        outcomes = run_jobs(pool, jobs)
        with closing(outcomes):  # leaving early (an error, Ctrl-C) stops the executor's runs at once
            for left, ((point, staging, _), outcome) in enumerate(outcomes, 1):
                if isinstance(outcome, BaseException):
                    if not isinstance(outcome, (UserError, BrokenProcessPool)):
                        raise outcome
                    failed.append((point.name, outcome))
                    progress.run_failed(point.name, failure_reason(outcome), runs_left=len(jobs) - left)
                    continue
                adopt(staging, sweep_dir, point.name)  # only a run this sweep started and saw finish is adopted
                summaries[point.name] = outcome
                progress.run_finished(point.name, point.label, point.seed, outcome["samples"], outcome["eval_end"],
                                      None, outcome["wall_s"] or 0.0, runs_left=len(jobs) - left)
    _raise_failures(sweep_dir, failed, len(points))
    return {"sweep_dir": str(sweep_dir), "runs": len(points), "skipped": len(state.finished),
            "ran": len(state.todo), "summaries": summaries}


def _raise_failures(sweep_dir: Path, failed: list[tuple[str, BaseException]], runs: int) -> None:
    if not failed:
        return
    name, error = failed[0]
    others = f" (and {len(failed) - 1} more: {', '.join(n for n, _ in failed[1:])})" if len(failed) > 1 else ""
    raise UserError(f"sweep {sweep_dir}", f"{len(failed)} of {runs} runs failed; {name}: {failure_reason(error)}{others}",
                    "fix the cause and rerun the sweep: finished runs are kept, a failed one resumes from its newest "
                    "checkpoint when its config is unchanged, else starts again")
