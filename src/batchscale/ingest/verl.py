"""Read verl's file-logger JSONL: one line per step, `{"step": N, "data": {"timing_s/gen": ..., ...}}`.

verl writes the line after each training step (and a step-0 line holding only `val-core/...` when it validates before
training). The step is the line's `step`, else `data["training/global_step"]`. Tolerated and reported: a truncated last
line (the run was killed mid-write) and blank lines. Anything else that is not JSON, or a line without a step, is an
error naming the line, since a damaged middle would silently shift the sample axis. The log has no timestamps: wall_s
comes from `timing_s/step`.
"""

from __future__ import annotations

import json
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow, parse_step

STEP_KEY_FIX = "each line must be {\"step\": N, \"data\": {...}} as verl's file logger writes it"


def read_verl_jsonl(path: Path) -> ParsedLog:
    """Parse a verl file-logger JSONL into rows (see module docstring)."""
    if path.is_dir():
        candidates = sorted(path.glob("*.jsonl"))
        if len(candidates) != 1:
            raise UserError(str(path), f"expected one .jsonl file in the directory, found {len(candidates)}",
                            "pass the verl log file itself")
        path = candidates[0]
    text = path.read_text(errors="replace")
    if not text.strip():
        raise UserError(str(path), "the file is empty", "pass the JSONL file verl's file logger wrote")
    lines = text.splitlines()
    last_index = max(i for i, line in enumerate(lines) if line.strip())
    parsed = ParsedLog(rows=[], style="verl")
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        where = f"line {index + 1}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if index == last_index:
                parsed.problems.append(f"{where} (the last) is truncated and was skipped")
                continue
            fix = "repair or delete the line; is FORMAT right?"
            raise UserError(f"{path}: {where}", "not valid JSON", fix) from None
        if not isinstance(entry, dict) or not isinstance(entry.get("data"), dict):
            raise UserError(f"{path}: {where}", "no 'data' object", STEP_KEY_FIX + "; is FORMAT right?")
        data = entry["data"]
        step_value = entry.get("step", data.get("training/global_step"))
        if step_value is None:
            raise UserError(f"{path}: {where}", "missing step key ('step' or data['training/global_step'])",
                            STEP_KEY_FIX)
        step = parse_step(step_value, f"{path}: {where}", STEP_KEY_FIX)
        parsed.rows.append(RawRow(step=step, metrics=data, where=where))
    if not parsed.rows:
        raise UserError(str(path), "no usable records", "pass the JSONL file verl's file logger wrote")
    return parsed
