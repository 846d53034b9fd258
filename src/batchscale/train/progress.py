"""Live progress for training: a rich bar of samples done out of the budget, with reward, eval accuracy and ETA.

Drawn on stderr so that stdout stays clean for `--json`.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from batchscale.config import Config, derive_plan

console = Console(stderr=True)


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


def train_with_progress(cfg: Config, out_dir: Path, overwrite: bool = False) -> tuple[dict, Path]:
    from batchscale.train.loop import train

    plan = derive_plan(cfg)
    total = plan.num_steps * plan.samples_per_step
    with training_progress() as progress:
        bar = progress.add_task(f"{plan.label} s{cfg.run.seed}", total=total, reward="-", accuracy="-")

        def on_record(record: dict) -> None:
            if record["kind"] == "step":
                progress.update(bar, completed=record["samples"], reward=f"{record['reward/mean']:.3f}")
            else:
                progress.update(bar, accuracy=f"{record['eval/accuracy']:.3f}")

        summary = train(cfg, out_dir, overwrite, on_record=on_record, log=progress.console.print)
    return summary, Path(out_dir)
