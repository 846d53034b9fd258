"""`batchscale import skyrl|prime-rl|nemo-rl|xtuner PATH`: the logs the newer frameworks write, read in their key
style (newer_frameworks.py):

- a TensorBoard directory or event file (SkyRL's `_TensorboardAdapter`, NeMo-RL's and xtuner's TensorBoard loggers:
  one scalar per tag and step) -> tensorboard.read_tensorboard;
- a W&B history export (`.csv`: every framework here logs to W&B) -> wandb_csv.read_wandb_csv;
- a flat JSONL, one object per line with its `step` (xtuner's `exp_tracking/tracker.jsonl`, one line per
  `add_scalars` call, so a step may span lines: they are merged; prime-rl's FileMonitor, v0.8 on, writes
  `{"step", "time", ...}` too, in keys renamed after the v0.5.0 map), a `time` (epoch seconds) read as the row's
  timestamp.

The style is the FORMAT's, not detected: the user says which framework wrote the log. A line that is not a JSON
object, or lacks its step, is an error naming it (a damaged middle would shift the sample axis); a truncated last
line is tolerated and reported.
"""

from __future__ import annotations

import json
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import STEP_KEYS, ParsedLog, RawRow, parse_step
from batchscale.ingest.inputs import input_kind, read_input_text
from batchscale.ingest.tensorboard import read_tensorboard
from batchscale.ingest.wandb_csv import read_wandb_csv

FIX = ("pass the framework's flat JSONL of metrics (one {\"step\": N, ...} per line), its TensorBoard directory, or a "
       "W&B history export (.csv)")


def newer_reader(style: str):
    """The reader of FORMAT `style` (module docstring)."""
    def read(path: Path) -> ParsedLog:
        if input_kind(path) == "directory" or path.name.startswith("events.out.tfevents"):
            return read_tensorboard(path, style)
        if path.suffix == ".csv":
            parsed = read_wandb_csv(path, style)
            if isinstance(parsed, list):
                raise UserError(str(path), f"is a W&B chart export of {len(parsed)} run(s), not a run's history",
                                "export the run's history (run.history().to_csv()), or import the chart with FORMAT "
                                "wandb-csv")
            return parsed
        return read_flat_jsonl(path, style)
    read.__name__ = f"read_{style.replace('-', '_')}"
    return read


def read_flat_jsonl(path: Path, style: str) -> ParsedLog:
    """One row per line; the step is `step` or the style's step key; `time` is a timestamp (module docstring)."""
    lines = read_input_text(path).split("\n")
    used = [i for i, line in enumerate(lines) if line.strip()]
    if not used:
        raise UserError(str(path), "the file is empty", FIX)
    parsed = ParsedLog(rows=[], style=style, shape="flat JSONL")
    step_keys = ("step", *STEP_KEYS[style])
    for index in used:
        where = f"line {index + 1}"
        try:
            entry = json.loads(lines[index])
        except json.JSONDecodeError:
            if index == used[-1]:
                parsed.problems.append(f"{where} (the last) is truncated and was skipped")
                continue
            raise UserError(f"{path}: {where}", "not valid JSON", "repair or delete the line; is FORMAT right?") from None
        if not isinstance(entry, dict):
            raise UserError(f"{path}: {where}", "not a JSON object", FIX)
        key = next((k for k in step_keys if k in entry), None)
        if key is None:
            raise UserError(f"{path}: {where}", f"missing step key (none of {', '.join(step_keys)})", FIX)
        time_s = entry.get("time")
        time_s = float(time_s) if isinstance(time_s, (int, float)) and not isinstance(time_s, bool) else None
        metrics = {k: v for k, v in entry.items() if k not in ("step", "time")}
        parsed.rows.append(RawRow(step=parse_step(entry[key], f"{path}: {where}", FIX), metrics=metrics, where=where,
                                  time_s=time_s))
    if not parsed.rows:
        raise UserError(str(path), "no usable records", FIX)
    times = [row.time_s for row in parsed.rows if row.time_s is not None]
    if times:
        parsed.start_time_s = min(times)  # the first row's time: wall_s from it when no per-step time is logged
    return parsed
