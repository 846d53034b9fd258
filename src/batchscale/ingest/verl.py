"""Read the three shapes of a verl run's log, detected from the file's first line (verl/utils/tracking.py):

- file-logger JSONL (`FileLogger`, `trainer.logger` with "file"): one line per step, `{"step": N, "data": {...}}`,
  written with orjson (numpy values serialized as numbers);
- flat JSONL: one metrics dict per line with a top-level `step` (custom loggers and W&B/MLflow dumps of verl runs);
- console text (`LocalLogger`, "console"): `step:N - key:value - ...` lines, usually saved with `tee` (verl_console.py);
  also as W&B captures it in a run folder, `wandb/run-*/files/output.log`, whose `config.yaml` beside it is the config
  (PATH: the run folder or its `files/`).

verl writes a step line after each training step, and a step-0 line holding only `val-core/...` when it validates
before training (a resumed run validates at its resumed step). The step is the line's `step`, else
`training/global_step`. Tolerated and reported: a truncated last line (the run was killed mid-write) and blank lines.
Anything else that is not JSON, or a line without a step, is an error naming the line, since a damaged middle would
silently shift the sample axis. The JSONL has no timestamps: wall_s comes from `timing_s/step`.
"""

from __future__ import annotations

import json
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow, parse_step
from batchscale.ingest.frameworkconfig import read_config_file
from batchscale.ingest.inputs import input_kind, read_input_text
from batchscale.ingest.verl_console import is_verl_console, missing_metrics_error, read_verl_console

STEP_KEY_FIX = ("each line must be {\"step\": N, \"data\": {...}} (verl's file logger) or {\"step\": N, ...} "
                "(flat JSONL)")
WANDB_CONSOLE, WANDB_CONFIG = "output.log", "config.yaml"  # a W&B run folder's files/ (wandb's own names)
SHAPE_FIX = ("pass verl's file-logger JSONL, a flat JSONL of metrics with a 'step', or the console log "
             "(`step:N - key:value` lines)")


def read_verl(path: Path) -> ParsedLog:
    """Detect the shape of a verl log (see module docstring) and read it."""
    wandb_files = wandb_run_files(path)
    path = wandb_files / WANDB_CONSOLE if wandb_files else pick_log_file(path)
    text = read_input_text(path)
    if not text.strip():
        raise UserError(str(path), "the file is empty", SHAPE_FIX)
    first = next(line for line in text.split("\n") if line.strip()).strip()
    if first.startswith("{") and is_json_object(first):
        return read_verl_jsonl(path, text)
    if is_verl_console(text):
        parsed = read_verl_console(path, text)
        if wandb_files:
            read_wandb_run_config(wandb_files, parsed)
        return parsed
    no_metrics = missing_metrics_error(path, text)
    if no_metrics is not None:
        raise no_metrics
    raise UserError(f"{path}: line 1", "neither JSON nor a verl console line (`step:N - key:value`)", SHAPE_FIX
                    + "; is FORMAT right?")


def wandb_run_files(path: Path) -> Path | None:
    """The `files/` folder of a W&B run folder (`wandb/run-<date>-<id>/`, or its `files/`) holding the console."""
    if not path.is_dir():
        return None
    for files in (path / "files", path):
        if (files / WANDB_CONSOLE).is_file() and (files.name == "files" or (files / WANDB_CONFIG).is_file()):
            return files
    return None


def read_wandb_run_config(files: Path, parsed: ParsedLog) -> None:
    """The run's config from the W&B folder's config.yaml (verl's `wandb.init(config=...)`), unless the console
    printed one; one that cannot be read is noted and ignored."""
    parsed.shape = "W&B run folder (files/output.log)"
    config_path = files / WANDB_CONFIG
    if parsed.config or not config_path.is_file():
        return
    try:
        parsed.config, parsed.config_path = read_config_file(config_path), str(config_path)
    except UserError as e:
        parsed.notes.append(f"ignored {config_path}: {e.rule}")


def pick_log_file(path: Path) -> Path:
    """The log itself, or the one .jsonl / .log file in a directory."""
    if input_kind(path) != "directory":  # a file, or a pipe read as a stream
        return path
    candidates = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".jsonl", ".log", ".txt"))
    if not candidates:
        raise UserError(str(path), "holds no .jsonl, .log or .txt file", "pass the verl log file itself")
    if len(candidates) > 1:  # several logs are several runs (or parts of one): the user says which
        shown = ", ".join(p.name for p in candidates[:4]) + (", ..." if len(candidates) > 4 else "")
        raise UserError(str(path), f"holds {len(candidates)} logs ({shown}), one run per import",
                        f"import each log on its own: batchscale import verl {candidates[0]} --out RUN_DIR (a run "
                        "resumed into a second log: concatenate them in order and import the result)")
    return candidates[0]


def is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def read_verl_jsonl(path: Path, text: str) -> ParsedLog:
    """Parse a verl JSONL, file-logger (`data` wrapper) or flat, into rows (see module docstring)."""
    lines = text.split("\n")  # "\n" only: U+2028 and other separators inside JSON strings are not line ends
    last_index = max(i for i, line in enumerate(lines) if line.strip())
    parsed = ParsedLog(rows=[], style="verl")
    shapes = set()
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
            raise UserError(f"{path}: {where}", "not valid JSON", "repair or delete the line; is FORMAT right?") from None
        if not isinstance(entry, dict):
            raise UserError(f"{path}: {where}", "not a JSON object", STEP_KEY_FIX)
        wrapped = isinstance(entry.get("data"), dict)
        shapes.add("file logger" if wrapped else "flat")
        data = entry["data"] if wrapped else {k: v for k, v in entry.items() if k != "step"}
        step_value = entry.get("step", data.get("training/global_step"))
        if step_value is None:
            raise UserError(f"{path}: {where}", "missing step key ('step' or 'training/global_step')", STEP_KEY_FIX)
        parsed.rows.append(RawRow(step=parse_step(step_value, f"{path}: {where}", STEP_KEY_FIX), metrics=data,
                                  where=where))
    if not parsed.rows:
        raise UserError(str(path), "no usable records", SHAPE_FIX)
    if len(shapes) > 1:
        raise UserError(str(path), "mixes file-logger lines ({\"step\", \"data\"}) and flat lines",
                        "import one log at a time")
    parsed.shape = f"{shapes.pop()} JSONL"
    return parsed
