"""TensorBoard: scalars in `<run>/tensorboard/` (torch's SummaryWriter), each record's numbers at its step, and the
resolved config as a text summary; each number also under `by_samples/<key>` at the record's samples (base.py). The
directory is the run's own, so a resumed run removes it and writes it again from the records kept (a killed writer
may also have lost its last unflushed events)."""

from __future__ import annotations

import json
import shutil

from batchscale.telemetry.trackers.base import Tracker, TrackedRun, by_samples, scalars

TENSORBOARD_DIR = "tensorboard"


class TensorBoardTracker(Tracker):
    def __init__(self, run: TrackedRun, resume: bool, previous: dict[str, str]):
        from torch.utils.tensorboard import SummaryWriter

        log_dir = run.run_dir / TENSORBOARD_DIR
        if resume:
            shutil.rmtree(log_dir, ignore_errors=True)
        self._writer = SummaryWriter(str(log_dir))
        self._shown = run.final_dir / TENSORBOARD_DIR
        self._writer.add_text("config", "```json\n" + json.dumps(run.config, indent=2) + "\n```", global_step=0)

    def log(self, record: dict) -> None:
        for key, value in scalars(record).items():
            self._writer.add_scalar(key, value, global_step=record["step"])
        if (against := by_samples(record)) is not None:
            samples, values = against
            for key, value in values.items():
                self._writer.add_scalar(key, value, global_step=samples)

    def close(self) -> None:
        self._writer.close()

    def where(self) -> str:
        return f"tensorboard --logdir {self._shown}"
