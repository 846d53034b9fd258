"""Read a W&B history export (CSV): one row per `wandb.log` call, columns `_step`, `_runtime`, `_timestamp` and the
framework's own metric names.

The key style is detected from the columns (verl's names; OpenRLHF's `train/...`/`eval/...`; TRL's as rewritten by the
Hugging Face W&B callback, `train/reward`, `eval/reward`), so the verl / OpenRLHF / TRL mappings are reused unchanged.
The step is the framework's step column (`training/global_step`, `train/global_step`, `eval/global_step`) when the row
has it, else `_step`: verl logs to W&B with its global step, while OpenRLHF and TRL log through `define_metric` with
their own step column and `_step` is only W&B's call counter. `_runtime` (seconds since the run started) is the
timestamp. Empty cells are metrics not logged in that row; `NaN`/`inf` cells are dropped.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import STEP_KEYS, ParsedLog, RawRow, detect_style, normalize_trl_keys, parse_step

WANDB_COLUMNS = ("_step", "_runtime", "_timestamp", "_wandb")
FIX = "export the run's history from W&B as CSV (Export > CSV, or run.history().to_csv())"
STEP_COLUMNS_REWRITTEN_TRL = ("train/global_step",)


def read_wandb_csv(path: Path) -> ParsedLog:
    """Parse a W&B history CSV into rows and detect the key style."""
    text = path.read_text(errors="replace")
    if not text.strip():
        raise UserError(str(path), "the file is empty", FIX)
    problems: list[str] = []
    lines = text.splitlines(keepends=True)
    if not text.endswith("\n") and len(lines) > 1:
        last = next(csv.reader([lines[-1]]), [])
        header = next(csv.reader([lines[0]]))
        if len(last) != len(header):
            problems.append(f"row {len(lines)} (the last) is truncated and was skipped")
            text = "".join(lines[:-1])
    reader = csv.DictReader(io.StringIO(text))
    columns = [c for c in (reader.fieldnames or []) if c]
    metric_columns = {c for c in columns if c not in WANDB_COLUMNS}
    style, trl_rewritten = detect_style(metric_columns)
    if not style:
        raise UserError(str(path), "no column matches verl, OpenRLHF or TRL metric names; is FORMAT right?", FIX)
    step_columns = STEP_COLUMNS_REWRITTEN_TRL if trl_rewritten else STEP_KEYS[style]
    step_columns = [c for c in step_columns if c in columns]
    if not step_columns and "_step" not in columns:
        raise UserError(str(path), f"missing step key (none of {', '.join((*STEP_KEYS[style], '_step'))})", FIX)
    if not step_columns and style != "verl":
        problems.append(f"no {style} step column; W&B's _step (its log-call counter) was used as the step")
    rows = []
    for index, row in enumerate(reader):
        where = f"row {index + 2}"  # 1-based line number, the header is line 1
        if None in row:
            raise UserError(f"{path}: {where}", "more cells than header columns", "repair or delete the row")
        step_value = next((row[c] for c in (*step_columns, "_step") if c in row and row[c] not in (None, "")), None)
        if step_value is None:
            raise UserError(f"{path}: {where}", "missing step key (the step cell is empty)", FIX)
        metrics = {k: v for k, v in row.items() if k in metric_columns and v not in (None, "")}
        if trl_rewritten:
            metrics = normalize_trl_keys(metrics)
        runtime = row.get("_runtime")
        time_s = float(runtime) if runtime not in (None, "") and is_number(runtime) else None
        rows.append(RawRow(step=parse_step(step_value, f"{path}: {where}", FIX), metrics=metrics, where=where,
                           time_s=time_s))
    if not rows:
        raise UserError(str(path), "no rows under the header: no usable records", FIX)
    start_time_s = 0.0 if "_runtime" in columns else None  # _runtime already counts from the run's start
    return ParsedLog(rows=rows, style=style, start_time_s=start_time_s, problems=problems)


def is_number(text: str) -> bool:
    """True when `text` parses as a float."""
    try:
        float(text)
    except ValueError:
        return False
    return True
