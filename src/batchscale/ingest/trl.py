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

Batch shape: the state's `train_batch_size` is the per-device batch of one micro-step, so `train_batch_size /
num_generations` is not P in general (it ignores processes, gradient accumulation and `steps_per_generation`) and is
not used; a `num_generations` in the state (some forks) hints G. The checkpoint's `training_args.bin` (the
`GRPOConfig` the Trainer saved beside the state, read by pickle opcodes only: pickle_tree.py) is the run's config:
`per_device_train_batch_size`, `gradient_accumulation_steps`, `num_generations`, `num_iterations`,
`steps_per_generation`, `_n_gpu`, and the process count (accelerate's `distributed_state.num_processes`, else
`generation_batch_size / (per_device_train_batch_size x steps_per_generation)`), from which trl_batch.py derives P
with the batch's unit decided from the evidence (the TRL version a model card beside the checkpoint records, the
fields the arguments hold, divisibility). Classes that wrap TRL's config (Unsloth's `UnslothGRPOConfig`, a subclass
of GRPOConfig compiled into `unsloth_compiled_cache`) are read by their fields the same way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow, parse_step
from batchscale.ingest.frameworkconfig import flatten_mapping
from batchscale.ingest.inputs import read_input_text
from batchscale.ingest.pickle_tree import TreeTooLarge, plain, read_pickle_tree
from batchscale.ingest.trl_batch import COMPLETE, VERSION
from batchscale.rundir.run import GNS_STEP_KEYS

REWARD_FUNCTION_MEAN = re.compile(r"^rewards/[^/]+/mean$")
NOT_RL_FIX = ("import the trainer_state.json of an RL run (GRPO, RLOO, PPO, ...): TRL logs 'reward' at each logging "
              "step")

GNS_KEY = GNS_STEP_KEYS["actor"]["grad_sq"]
GNS_NOTE = ("gns/* were logged by batchscale's GradientNoiseCallback (batchscale.integrations.trl): TRL spreads a "
            "prompt group's completions over micro-batches, so the estimate takes completions as independent (B_noise "
            "differs from a group-unit one by 1 + (G - 1) x their within-group correlation; docs/IMPORT.md)")

TRAINING_ARGS = "training_args.bin"  # transformers' TRAINING_ARGS_NAME, torch.save'd by Trainer._save
MAX_CARD_BYTES = 2**20
FIX = "pass the trainer_state.json the Hugging Face / TRL Trainer saved (its log_history entries carry a 'step')"


def read_trl_state(path: Path) -> ParsedLog:
    """Parse `trainer_state.json` (or a checkpoint directory holding one) into rows."""
    if path.is_dir():
        path = path / "trainer_state.json"
        if not path.is_file():
            raise UserError(str(path), "not found", FIX)
    text = read_input_text(path)
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
    read_training_args(path.parent / TRAINING_ARGS, parsed)
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
    """G = num_generations when the state records it (see module docstring; train_batch_size is not P)."""
    group = state.get("num_generations")
    if isinstance(group, int) and not isinstance(group, bool) and group >= 1:
        parsed.batch_hints["samples_per_prompt"] = group


def read_training_args(args_path: Path, parsed: ParsedLog) -> None:
    """The run's GRPOConfig from `training_args.bin` beside the state, as the config (module docstring)."""
    if not args_path.is_file():  # a pipe or device of that name is not the Trainer's file
        return
    tree = read_pickle_tree(args_path)
    try:
        args = plain(tree)
    except TreeTooLarge as e:
        raise UserError(str(args_path), f"{e}; refused, nothing in it was run",
                        "pass the training_args.bin a Hugging Face / TRL Trainer saved") from None
    if not isinstance(args, dict) or "per_device_train_batch_size" not in args:
        parsed.notes.append(f"{args_path} holds no training arguments ({getattr(tree, 'cls', type(tree).__name__)}); "
                            "ignored")
        return
    config = flatten_mapping({k: v for k, v in args.items() if k != "distributed_state"})
    state = args.get("distributed_state") if isinstance(args.get("distributed_state"), dict) else {}
    if isinstance(state.get("num_processes"), int) and state["num_processes"] >= 1:
        config["world_size"] = state["num_processes"]
    if state.get("distributed_type") is not None:
        config["distributed_type"] = str(state["distributed_type"])
    config[COMPLETE] = True
    version = model_card_version(args_path.parent)
    if version:
        config[VERSION] = version
    parsed.config = config
    parsed.config_path = f"{args_path} ({getattr(tree, 'cls', '?')}, read by pickle opcodes; nothing run)"


MODEL_CARD_VERSION = re.compile(r"^- TRL: (\S+)\s*$", re.MULTILINE)  # TRL's templates/lm_model_card.md


def model_card_version(checkpoint: Path) -> str | None:
    """The TRL version the model card TRL writes (README.md in the checkpoint or the output directory above it)
    records, if any; a README that is not TRL's card (PEFT writes one too) gives None."""
    for card in (checkpoint / "README.md", checkpoint.parent / "README.md"):
        try:
            if card.is_file() and card.stat().st_size <= MAX_CARD_BYTES:
                found = MODEL_CARD_VERSION.search(card.read_text(errors="replace"))
                if found:
                    return found.group(1)
        except OSError:
            continue
    return None
