"""Read TRL's `trainer_state.json` (the Hugging Face Trainer state saved with each checkpoint): its `log_history`.

Each entry is one `log` call at an optimizer step: training entries (`reward`, `grad_norm`, `learning_rate`,
`step_time`, `completions/mean_length`, ...), evaluation entries (`eval_*`), and a final summary (`train_runtime`, ...).

Logging windows: TRL logs every `logging_steps` optimizer steps. Its own metrics (reward, completion lengths,
step_time) are means over the steps since the previous log; `grad_norm` and `learning_rate` come from the Trainer and
are the values at the logged step. So each record stands for the window (previous logged step, step]: samples are
still cumulative at its end (step x P x G) and wall_s sums step_time x window length (records.assign_wall_seconds).
This is stated in the run descriptor's import notes. The file has no timestamps: without `step_time` (TRL before
v0.26), wall_s is null (TRL's final `train_runtime` is noted for reference).

Keys differ across TRL versions and forks (trl/trainer/grpo_trainer.py): `completion_length` before April 2025, then
`completions/mean_length`; `reward` is the weighted sum of the `rewards/<fn>/mean` TRL logs per reward function, and
a log holding only the per-function means gets their sum (noted). A state whose log holds no reward at all is
refused: it is not an RL run (an SFT or reward-model trainer's state).

Gradient noise: `gns/grad_sq`, `gns/trace_sigma`, `gns/b_noise` (null kept: not resolved) and the timers
`time/generate`, `time/train` are logged by batchscale's own callback (`integrations.trl`) and pass through under the
same names; its unit caveat is noted.

Batch shape: the Trainer records `train_batch_size` in the state, the per-device batch (completions per device per
micro-step); with `num_generations` (recorded by some trainers and forks) it hints G and P = train_batch_size / G,
which assumes one process and no gradient accumulation, so flags may override it (noted).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow, parse_step
from batchscale.rundir.run import GNS_STEP_KEYS

REWARD_FUNCTION_MEAN = re.compile(r"^rewards/[^/]+/mean$")
NOT_RL_FIX = ("import the trainer_state.json of an RL run (GRPO, RLOO, PPO, ...): TRL logs 'reward' at each logging "
              "step")

GNS_KEY = GNS_STEP_KEYS["actor"]["grad_sq"]
GNS_NOTE = ("gns/* were logged by batchscale's GradientNoiseCallback (batchscale.integrations.trl): TRL spreads a "
            "prompt group's completions over micro-batches, so the estimate takes completions as independent (B_noise "
            "differs from a group-unit one by 1 + (G - 1) x their within-group correlation; docs/IMPORT.md)")

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
    check_rewards(path, parsed)
    read_batch_hints(state, parsed)
    if any(GNS_KEY in row.metrics for row in parsed.rows):
        parsed.notes.append(GNS_NOTE)
    logging_steps = state.get("logging_steps")
    first_logged = min((row.step for row in parsed.rows if row.step > 0), default=1)
    parsed.step_window = logging_steps if isinstance(logging_steps, int) and logging_steps >= 1 else first_logged
    parsed.window_note = (
        f"TRL logs every logging_steps={logging_steps if logging_steps is not None else '?'} optimizer steps; reward,"
        " completion lengths and step_time are means over the window (previous logged step, step], grad_norm and"
        " learning_rate are the values at the logged step; samples are cumulative at the window end and wall_s sums"
        " step_time x window length"
    )
    return parsed


def check_rewards(path: Path, parsed: ParsedLog) -> None:
    """Refuse a state without any reward key; give a log of per-function means only their sum as `reward`."""
    def has_reward(key: str) -> bool:
        name = key[len("eval_"):] if key.startswith("eval_") else key
        return name == "reward" or REWARD_FUNCTION_MEAN.match(name) is not None

    if not any(has_reward(key) for row in parsed.rows for key in row.metrics):
        raise UserError(f"{path}: log_history", "not an RL run: no 'reward' or 'rewards/<fn>/mean' key in any entry "
                        "(an SFT or reward-model trainer's state?)", NOT_RL_FIX)
    summed = 0
    for row in parsed.rows:
        means = [v for k, v in row.metrics.items() if REWARD_FUNCTION_MEAN.match(k) and isinstance(v, (int, float))]
        if "reward" not in row.metrics and means:
            row.metrics = {**row.metrics, "reward": sum(means)}
            summed += 1
    if summed:
        parsed.notes.append(f"{summed} entries log rewards/<fn>/mean without 'reward': reward/mean is their sum "
                            "(TRL's reward with unit weights)")


def read_batch_hints(state: dict, parsed: ParsedLog) -> None:
    """G = num_generations and P = train_batch_size / G when the state records both (see module docstring)."""
    per_device, group = state.get("train_batch_size"), state.get("num_generations")
    if not isinstance(group, int) or group < 1:
        return
    parsed.batch_hints["samples_per_prompt"] = group
    if isinstance(per_device, int) and per_device >= group and per_device % group == 0:
        parsed.batch_hints["prompts_per_step"] = per_device // group
        parsed.notes.append(f"P = train_batch_size {per_device} / num_generations {group} from the trainer state "
                            "assumes one process and gradient_accumulation_steps=1; pass --prompts-per-step otherwise")
