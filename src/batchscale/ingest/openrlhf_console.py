"""Read OpenRLHF's console log (`python3 -m openrlhf.cli.train_ppo_ray ... | tee train.log`), as OpenRLHF v0.9.1 to
v0.11.0 print it (openrlhf/trainer/ppo_trainer.py, `PPOTrainer.fit` / `evaluate`, a Ray actor; the logging format of
openrlhf/utils/logging_utils.py):

    (PPOTrainer pid=N) INFO 08-13 19:25:45 ppo_trainer.py:547] ✨ Global step 3: {'policy_loss': ..., 'actor_lr': ...}
    (PPOTrainer pid=N) INFO 08-13 19:26:30 ppo_trainer.py:597] ✨ Evaluation completed in 0:00:42, global_step 3,
        eval_metrics: {'eval_gsm8k_pass1': ..., ...}

The dict after "Global step N:" is the step's status, the same keys the TensorBoard logger writes as `train/<key>`
(`rollout/reward_mean`, `timing/generation`, `timing/step_total`, `actor_grad_norm`, ...); the eval dict is what it
writes as `eval/<key>`. Both are Python reprs, read with `ast.literal_eval`, and given those prefixes so one OpenRLHF
mapping serves event files and console logs alike.

The tqdm bars of the same console are skipped: `Episode [e/E]` counts prompts consumed, and the postfix of
`Train epoch [e/E]` (act_loss, reward, gen_len, kl, act_lr, grad_norm) describes one micro-batch of the actor's update,
with no global step. A console without "Global step" lines (OpenRLHF before v0.9.1 printed only those bars) is refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow
from batchscale.ingest.console import clean_lines, read_literal
from batchscale.ingest.inputs import input_kind, read_input_text
from batchscale.ingest.launch import attach_launch_options

STEP_LINE = re.compile(r"Global step (\d+): \{")
EVAL_LINE = re.compile(r"Evaluation completed in [^,]*, global_step (\d+), eval_metrics: \{")
FIX = ("pass the console log of OpenRLHF >= 0.9.1 (it prints '✨ Global step N: {...}' per step), or the run's "
       "TensorBoard directory (--logger.tensorboard_dir)")


def looks_like_text(path: Path) -> bool:
    """True for a console log, False for an event file or a directory (read as TensorBoard)."""
    return input_kind(path) in ("file", "stream") and not path.name.startswith("events.out.tfevents")


def read_openrlhf_console(path: Path) -> ParsedLog:
    """Parse the per-step status and eval dicts of an OpenRLHF console log (see module docstring)."""
    lines = clean_lines(read_input_text(path))
    parsed = ParsedLog(rows=[], style="openrlhf", shape="console text")
    skipped = []
    for index, (number, line, _) in enumerate(lines):
        for pattern, prefix in ((STEP_LINE, "train/"), (EVAL_LINE, "eval/")):
            match = pattern.search(line)
            if not match:
                continue
            literal = read_literal(lines, index)  # from the line's first "{": the dict (no brace comes before it)
            if literal is None or not isinstance(literal[0], dict):
                skipped.append(f"line {number}")
                continue
            metrics = {prefix + key: value for key, value in literal[0].items() if isinstance(value, (int, float))}
            parsed.rows.append(RawRow(step=int(match.group(1)), metrics=metrics, where=f"line {number}"))
    if not parsed.rows:
        raise UserError(str(path), "no '✨ Global step N: {...}' or 'eval_metrics: {...}' line; is FORMAT right?", FIX)
    if skipped:
        parsed.problems.append(f"{len(skipped)} status line(s) could not be read and were skipped, e.g. {skipped[0]}")
    attach_launch_options(parsed, path, lines)
    return parsed
