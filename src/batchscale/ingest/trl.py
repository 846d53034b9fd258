"""Read TRL's `trainer_state.json` (the Hugging Face Trainer state saved with each checkpoint): its `log_history`.

Each entry is one `log` call at an optimizer step: training entries (`reward`, `grad_norm`, `learning_rate`,
`step_time`, `completions/mean_length`, ...), evaluation entries (`eval_*`), and a final summary (`train_runtime`, ...).

Logging windows: TRL logs every `logging_steps` optimizer steps. Its own metrics (reward, completion lengths,
step_time) are means over the steps since the previous log; `grad_norm` and `learning_rate` come from the Trainer and
are the values at the logged step. So each record stands for the window (previous logged step, step]: samples are
still cumulative at its end (step x P x G) and wall_s sums step_time x window length (records.assign_wall_seconds).
This is stated in the run descriptor's import notes. The file has no timestamps: without `step_time`, wall_s is null
(TRL's final `train_runtime` is noted for reference).
"""

from __future__ import annotations

import json
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow, parse_step

FIX = "pass the trainer_state.json the Hugging Face / TRL Trainer saved (its log_history entries carry a 'step')"


def read_trl_state(path: Path) -> ParsedLog:
    """Parse `trainer_state.json` (or a checkpoint directory holding one) into rows."""
    if path.is_dir():
        path = path / "trainer_state.json"
        if not path.is_file():
            raise UserError(str(path), "not found", FIX)
    text = path.read_text(errors="replace")
    if not text.strip():
        raise UserError(str(path), "the file is empty", FIX)
    try:
        state = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(str(path), f"not valid JSON ({e.msg} at line {e.lineno})", FIX + "; is FORMAT right?") from None
    if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
        raise UserError(str(path), "no 'log_history' list", FIX + "; is FORMAT right?")
    parsed = ParsedLog(rows=[], style="trl")
    for index, entry in enumerate(state["log_history"]):
        where = f"log_history[{index}]"
        if not isinstance(entry, dict):
            raise UserError(f"{path}: {where}", "entry is not an object", FIX)
        if "step" not in entry:
            raise UserError(f"{path}: {where}", "missing step key 'step'", FIX)
        step = parse_step(entry["step"], f"{path}: {where}", FIX)
        if "train_runtime" in entry:
            parsed.notes.append(f"TRL reported train_runtime = {entry['train_runtime']} s for the whole run")
        parsed.rows.append(RawRow(step=step, metrics=entry, where=where))
    if not parsed.rows:
        raise UserError(str(path), "log_history is empty: no usable records", "import a run that logged at least once")
    logging_steps = state.get("logging_steps")
    parsed.window_note = (
        f"TRL logs every logging_steps={logging_steps if logging_steps is not None else '?'} optimizer steps; reward,"
        " completion lengths and step_time are means over the window (previous logged step, step], grad_norm and"
        " learning_rate are the values at the logged step; samples are cumulative at the window end and wall_s sums"
        " step_time x window length"
    )
    return parsed
