"""Drive a sweep: validate every point, skip finished runs, run the rest on an executor, with live progress.

The progress display shows runs done / total, and one bar per active run with its samples, reward and eval accuracy.
"""

from __future__ import annotations

from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from batchscale.config import derive_plan
from batchscale.errors import UserError
from batchscale.progress import console
from batchscale.sweep.executors import EXECUTORS, run_local, run_ray
from batchscale.sweep.runner import available_cores, prebuild_models, prepare_sweep_dir, read_summary
from batchscale.sweep.spec import Point


def check_inputs(points: list[Point]) -> None:
    """Read every distinct task's data now, so a bad file fails before any run starts."""
    from batchscale.tasks import build_task

    for task in {p.config.task.model_dump_json(): p.config.task for p in points}.values():
        build_task(task)


def run_sweep(points: list[Point], sweep_dir: Path, executor: str = "local", workers: int = 1,
              address: str | None = None, threads: int | None = None) -> dict:
    if executor not in EXECUTORS:
        raise UserError("--executor", f"unknown executor {executor!r}", f"choose one of: {', '.join(EXECUTORS)}")
    if workers < 1:
        raise UserError("--workers", f"must be >= 1, got {workers}", "pass --workers 1 or more")
    check_inputs(points)
    state = prepare_sweep_dir(points, sweep_dir)
    threads = threads or max(1, available_cores() // workers)
    console.print(f"sweep: {len(points)} runs, {len(state.finished)} already finished, {len(state.todo)} to run "
                  f"on {executor} ({workers} worker(s) x {threads} thread(s))")
    if state.todo:
        prebuild_models(state.todo, log=console.print)
    summaries = {p.name: read_summary(sweep_dir, p.name) for p in state.finished}
    totals = {p.name: derive_plan(p.config).num_steps * derive_plan(p.config).samples_per_step for p in state.todo}
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
                    progress.advance(overall)

        if executor == "local":
            results = run_local(state.todo, str(sweep_dir), workers, threads, on_events)
        else:
            results = run_ray(state.todo, str(sweep_dir), threads, address, on_events)
        for summary in results:
            summaries[f"{summary['label']}__s{summary['seed']}"] = summary
    return {"sweep_dir": str(sweep_dir), "runs": len(points), "skipped": len(state.finished),
            "ran": len(state.todo), "summaries": summaries}
