"""Optional TensorBoard scalars mirroring a run's records (`run.tensorboard = true`), indexed by cumulative samples
(the x-axis of every learning curve), in `<run>/tensorboard/`. The run log stays the record of truth."""

from __future__ import annotations

from pathlib import Path


class TensorBoardMirror:
    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(Path(run_dir) / "tensorboard"))

    def write(self, record: dict) -> None:
        for key, value in record.items():
            if key not in ("kind", "step") and isinstance(value, (int, float)) and not isinstance(value, bool):
                self._writer.add_scalar(key, value, global_step=record["samples"])

    def close(self) -> None:
        self._writer.close()
