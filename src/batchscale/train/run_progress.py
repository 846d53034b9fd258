"""A training run's live progress: the rich bar in a terminal, plain eval and heartbeat lines elsewhere.

In a terminal a run draws a bar of samples done out of the budget, with reward, eval accuracy and ETA. Where a rich
display draws nothing (a pipe, a file, CI, a Ray task's log) the same facts go out as plain lines: one per eval, and a
heartbeat whenever `console.HEARTBEAT_S` seconds pass with nothing printed. Drawn on stderr (`console.console`).
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from batchscale.config import Config, derive_plan
from batchscale.console import HEARTBEAT_S, Heartbeat, console, draws_live, format_duration
from batchscale.markup import console_text as escape  # names are data: controls and bidi shown inert


def training_progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("samples  reward {task.fields[reward]}  eval {task.fields[accuracy]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )


def train_with_progress(cfg: Config, out_dir: Path, overwrite: bool = False,
                        heartbeat_s: float = HEARTBEAT_S, resume: bool = False) -> tuple[dict, Path]:
    """Train (or with `resume`, continue) one run with live progress: the rich bar in a terminal, plain eval and
    heartbeat lines elsewhere."""
    from batchscale.train.loop import train

    plan = derive_plan(cfg)
    total = plan.num_steps * plan.samples_per_step
    if not draws_live(console):
        return _train_plain(cfg, out_dir, overwrite, f"{plan.label} seed {cfg.run.seed}", total, heartbeat_s, resume)
    with training_progress() as progress:
        bar = progress.add_task(escape(f"{plan.label} s{cfg.run.seed}"), total=total, reward="-", accuracy="-")

        def on_record(record: dict) -> None:
            if record["kind"] == "step":
                progress.update(bar, completed=record["samples"], reward=f"{record['reward/mean']:.3f}")
            else:
                progress.update(bar, accuracy=f"{record['eval/accuracy']:.3f}")

        summary = train(cfg, out_dir, overwrite, on_record=on_record, resume=resume,
                        log=lambda line: progress.console.print(line, markup=False, highlight=False))
    return summary, Path(out_dir)


def _train_plain(cfg: Config, out_dir: Path, overwrite: bool, name: str, total: int,
                 heartbeat_s: float, resume: bool = False) -> tuple[dict, Path]:
    from batchscale.train.loop import train

    start = time.monotonic()
    state = {"samples": 0, "reward": None}

    def where() -> str:
        reward = "" if state["reward"] is None else f", reward {state['reward']:.3f}"
        return f"{state['samples']:,}/{total:,} samples{reward}, {format_duration(time.monotonic() - start)}"

    heartbeat = Heartbeat(console, heartbeat_s, lambda: f"{name}: at {where()}")

    def on_record(record: dict) -> None:
        with heartbeat.lock:
            state["samples"] = max(state["samples"], record.get("samples", 0))
            if record["kind"] == "step":
                state["reward"] = record["reward/mean"]
            else:
                heartbeat.say(f"{name}: eval {record['eval/accuracy']:.3f} at {where()}")

    heartbeat.start()
    try:
        summary = train(cfg, out_dir, overwrite, on_record=on_record, log=heartbeat.say, resume=resume)
    finally:
        heartbeat.close()
    return summary, Path(out_dir)
