"""Drive a sweep: validate every point, lock the sweep directory, skip finished runs, run the rest on an executor,
with live progress, and move each finished run into place.

The progress display shows runs done / total, and one bar per active run with its samples, reward and eval accuracy.
"""

from __future__ import annotations

from concurrent.futures.process import BrokenProcessPool
from contextlib import closing
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from batchscale.config import derive_plan
from batchscale.errors import UserError
from batchscale.rundir.lock import SweepLock
from batchscale.rundir.staging import sweep_staging_dir
from batchscale.sweep.executors import EXECUTORS, open_executor, run_jobs
from batchscale.sweep.runner import adopt, available_cores, prebuild_models, prepare_sweep_dir, read_summary
from batchscale.sweep.spec import Point
from batchscale.train.progress import console


def check_inputs(points: list[Point]) -> None:
    """Read every distinct task's data (and import a user reward) now, so a bad input fails before any run starts."""
    from batchscale.tasks import build_task

    for task in {p.config.task.model_dump_json(): p.config.task for p in points}.values():
        build_task(task).close()


def check_devices(points: list[Point]) -> None:
    """Every `run.device` the points ask for exists on this machine (local executors: the runs start here), so a sweep
    for a GPU fails before its first run, not once per point."""
    from batchscale.device import resolve_device

    for device in sorted({p.config.run.device for p in points}):
        resolve_device(device)


def check_sweep_dir(sweep_dir: Path) -> None:
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise UserError("--out", f"{sweep_dir} exists and is not a directory", "choose another --out")


def run_sweep(points: list[Point], sweep_dir: Path, executor: str = "local", workers: int = 1,
              address: str | None = None, threads: int | None = None) -> dict:
    """Run every point not yet finished, holding the sweep directory's lock throughout (a second sweep on the same
    directory is a UserError naming this one). A point that fails with a UserError (a diverged run, a broken reward)
    does not stop the others; the sweep then ends with one UserError listing the failed points."""
    if executor not in EXECUTORS:
        raise UserError("--executor", f"unknown executor {executor!r}", f"choose one of: {', '.join(EXECUTORS)}")
    if workers < 1:
        raise UserError("--workers", f"must be >= 1, got {workers}", "pass --workers 1 or more")
    sweep_dir = Path(sweep_dir)
    check_sweep_dir(sweep_dir)
    check_inputs(points)
    if executor == "local":  # a Ray cluster's nodes may have GPUs its driver lacks
        check_devices(points)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with SweepLock(sweep_dir):
        return _run_locked(points, sweep_dir, executor, workers, address, threads)


def _run_locked(points: list[Point], sweep_dir: Path, executor: str, workers: int, address: str | None,
                threads: int | None) -> dict:
    state = prepare_sweep_dir(points, sweep_dir)
    threads = threads or max(1, available_cores() // workers)
    console.print(f"sweep: {len(points)} runs, {len(state.finished)} already finished, {len(state.todo)} to run "
                  f"on {executor} ({workers} worker(s) x {threads} thread(s))")
    if state.todo:
        prebuild_models(state.todo, log=console.print)
    summaries = {p.name: read_summary(sweep_dir, p.name) for p in state.finished}
    totals = {p.name: derive_plan(p.config).num_steps * derive_plan(p.config).samples_per_step for p in state.todo}
    jobs = [(point, sweep_staging_dir(sweep_dir, point.name)) for point in state.todo]
    failed: list[tuple[str, BaseException]] = []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=console) as progress:
        overall = progress.add_task("runs", total=len(points), completed=len(state.finished), status="")
        bars: dict[str, int] = {}
        reward: dict[str, str] = {}

        def on_events(events: list) -> None:
            for kind, name, payload in events:
                if kind == "start":
                    bars[name] = progress.add_task(name, total=totals[name], status="starting")
                elif kind == "record" and name in bars:
                    if "reward/mean" in payload:
                        reward[name] = f"reward {payload['reward/mean']:.3f}"
                        progress.update(bars[name], completed=payload["samples"], status=reward[name])
                    else:
                        status = f"{reward.get(name, '')}  eval {payload['eval/accuracy']:.3f}"
                        progress.update(bars[name], completed=payload["samples"], status=status)
                elif kind == "done" and name in bars:
                    progress.remove_task(bars.pop(name))

        outcomes = run_jobs(open_executor(executor, workers, threads, address, on_events), jobs)
        with closing(outcomes):  # leaving early (an error, Ctrl-C) stops the executor's runs at once
            for (point, staging), outcome in outcomes:
                if (bar := bars.pop(point.name, None)) is not None:
                    progress.remove_task(bar)
                progress.advance(overall)
                if isinstance(outcome, BaseException):
                    if not isinstance(outcome, (UserError, BrokenProcessPool)):
                        raise outcome
                    failed.append((point.name, outcome))
                    continue
                adopt(staging, sweep_dir, point.name)  # only a run this sweep started and saw finish is adopted
                summaries[point.name] = outcome
    if failed:
        name, error = failed[0]
        reason = str(error) if isinstance(error, UserError) else "its worker process died (killed, or out of memory?)"
        others = f" (and {len(failed) - 1} more: {', '.join(n for n, _ in failed[1:])})" if len(failed) > 1 else ""
        raise UserError(f"sweep {sweep_dir}", f"{len(failed)} of {len(points)} runs failed; {name}: {reason}{others}",
                        "fix the cause and rerun the sweep: finished runs are kept, failed ones start again")
    return {"sweep_dir": str(sweep_dir), "runs": len(points), "skipped": len(state.finished),
            "ran": len(state.todo), "summaries": summaries}
