"""The run directory: the one contract everything downstream reads (see shared/DESIGN.md).

- `run.json`: a flat descriptor (label, seed, algorithm, P, G, B_train, lr, lr_rule, model, task, source).
- `config.json`: the full resolved config with its derived batch plan (native runs).
- `metrics.jsonl`: `step` and `eval` records, one JSON object per line, each flushed (and fsynced) as written, so a
  crash loses at most the line being written and every earlier record is readable.
- `summary.json`: written last, atomically; its presence is what marks a run as finished.

Optional TensorBoard scalars mirror the step and eval records.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import write_json_atomic  # noqa: F401  (re-exported)

def _clean(value):
    """JSON has no NaN/inf: write them as null rather than producing a file other tools cannot parse."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def prepare_run_dir(out_dir: Path, overwrite: bool = False) -> Path:
    """Refuse to mix two runs' records in one directory (checked before any compute)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite:
            raise UserError("--out", f"{out_dir} already holds files (a previous run?)",
                            "choose another --out, or pass --overwrite to replace it")
        shutil.rmtree(out_dir)
    return out_dir


class RunLog:
    def __init__(self, out_dir: Path, descriptor: dict, config: dict | None = None, tensorboard: bool = False):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.dir / "run.json", descriptor)
        if config is not None:
            write_json_atomic(self.dir / "config.json", config)
        self._file = open(self.dir / "metrics.jsonl", "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.dir / "tensorboard"))

    def write(self, record: dict) -> None:
        record = {k: _clean(v) for k, v in record.items()}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        if self._tb is not None:
            for key, value in record.items():
                if key not in ("kind", "step") and isinstance(value, (int, float)) and value is not None:
                    self._tb.add_scalar(key, value, global_step=record["samples"])

    def finish(self, summary: dict) -> None:
        self.close()
        write_json_atomic(self.dir / "summary.json", summary)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
