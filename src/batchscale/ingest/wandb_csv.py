"""Read a W&B CSV export in either layout W&B writes:

- the history export (`run.history().to_csv()`, the run page's Export): one row per `wandb.log` call, columns `_step`,
  `_runtime`, `_timestamp` and the framework's own metric names;
- the chart export (a panel's "Export as CSV"): `"Step","<run> - <metric>","<run> - <metric>__MIN",
  "<run> - <metric>__MAX"`, possibly for several runs (and metrics) per file. Each run becomes its own ParsedLog (its
  `run_name`), imported to a run directory of its own; the __MIN/__MAX columns (the panel's smoothing band over
  sampled points) are skipped, and there are no timestamps, so wall_s comes from a logged per-step time, else is null.

The key style is detected from the columns (verl's names; OpenRLHF's `train/...`/`eval/...`; TRL's as rewritten by the
Hugging Face W&B callback, `train/reward`, `eval/reward`), so the verl / OpenRLHF / TRL mappings are reused unchanged.
The step is the framework's step column (`training/global_step`, `train/global_step`, `eval/global_step`) when the row
has it, else `_step`: verl logs to W&B with its global step, while OpenRLHF and TRL log through `define_metric` with
their own step column and `_step` is only W&B's call counter. `_runtime` (seconds since the run started) is the
timestamp. Empty cells are metrics not logged in that row; `NaN`/`inf` cells are dropped.
"""

from __future__ import annotations

import collections
import csv
import io
import re
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import STEP_KEYS, ParsedLog, RawRow, detect_style, normalize_trl_keys, parse_step
from batchscale.ingest.inputs import read_input_text

WANDB_COLUMNS = ("_step", "_runtime", "_timestamp", "_wandb")
FIX = ("export the run's history from W&B as CSV (run.history().to_csv()), or a chart as CSV (the panel's "
       "Export as CSV)")
STEP_COLUMNS_REWRITTEN_TRL = ("train/global_step",)


CHART_COLUMN = re.compile(r"^(?P<run>.+) - (?P<metric>.+?)(?P<band>__MIN|__MAX)?$")


def read_wandb_csv(path: Path, style: str | None = None) -> ParsedLog | list[ParsedLog]:
    """Parse a W&B CSV (history or chart export, detected from the header) into rows and detect the key style (a
    history export's style is `style` when given)."""
    try:
        return read_csv_text(path, read_input_text(path), style)  # a UTF-8 byte-order mark is dropped
    except csv.Error as e:  # a stray carriage return, a NUL: not a CSV W&B wrote
        raise UserError(str(path), f"not a readable CSV ({e})", FIX + "; is FORMAT right?") from None


def read_csv_text(path: Path, text: str, forced_style: str | None = None) -> ParsedLog | list[ParsedLog]:
    """read_wandb_csv on the file's text."""
    if not text.strip():
        raise UserError(str(path), "the file is empty", FIX)
    header = next(csv.reader([text.split("\n")[0].rstrip("\r")]))
    counts = collections.Counter(header)
    duplicated = sorted(column for column, count in counts.items() if count > 1)
    if duplicated:
        raise UserError(f"{path}: header", f"column {duplicated[0]!r} appears {counts[duplicated[0]]} times",
                        "export the run again, or delete one of the duplicated columns")
    if header and header[0] not in WANDB_COLUMNS and any(CHART_COLUMN.match(c) for c in header[1:]):
        return read_wandb_chart(path, text, header)
    problems: list[str] = []
    lines = text.split("\n")
    lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])  # "\n" only, ends kept
    if not text.endswith("\n") and len(lines) > 1:
        last = next(csv.reader([lines[-1]]), [])
        header = next(csv.reader([lines[0]]))
        if len(last) != len(header):
            problems.append(f"row {len(lines)} (the last) is truncated and was skipped")
            text = "".join(lines[:-1])
    reader = csv.DictReader(io.StringIO(text))
    columns = [c for c in (reader.fieldnames or []) if c]
    metric_columns = {c for c in columns if c not in WANDB_COLUMNS}
    style, trl_rewritten = (forced_style, False) if forced_style else detect_style(metric_columns)
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
    return ParsedLog(rows=rows, style=style, start_time_s=start_time_s, problems=problems, shape="W&B history export")


def is_number(text: str) -> bool:
    """True when `text` parses as a float."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_wandb_chart(path: Path, text: str, header: list[str]) -> list[ParsedLog]:
    """One ParsedLog per run of a chart export (see module docstring); the first column is the chart's x-axis step."""
    columns: dict[str, dict[str, str]] = {}  # run name -> {metric: column}
    for column in header[1:]:
        match = CHART_COLUMN.match(column)
        if match is None:
            raise UserError(f"{path}: header", f"column {column!r} is not '<run> - <metric>'", FIX)
        if not match.group("band"):
            columns.setdefault(match.group("run"), {})[match.group("metric")] = column
    reader = list(csv.DictReader(io.StringIO(text)))
    runs = []
    for run_name, metrics in columns.items():
        style, trl_rewritten = detect_style(set(metrics))
        if not style:
            raise UserError(f"{path}: run {run_name!r}", f"no metric matches verl, OpenRLHF or TRL names "
                            f"({', '.join(sorted(metrics))})", "export a chart of a mapped metric (docs/IMPORT.md)")
        rows = []
        for index, row in enumerate(reader):
            values = {metric: row[column] for metric, column in metrics.items() if row.get(column) not in (None, "")}
            if not values:
                continue  # a step another run logged
            where = f"row {index + 2}"
            step = parse_step(row[header[0]], f"{path}: {where}, column {header[0]!r}", FIX)
            rows.append(RawRow(step=step, metrics=normalize_trl_keys(values) if trl_rewritten else values, where=where))
        if not rows:
            raise UserError(f"{path}: run {run_name!r}", "no values in any row", FIX)
        runs.append(ParsedLog(rows=rows, style=style, shape="W&B chart export", run_name=run_name,
                              notes=[f"run {run_name!r} of a W&B chart export: only the exported metrics "
                                     f"({', '.join(sorted(metrics))}); x-axis column {header[0]!r} is the step"]))
    return runs
