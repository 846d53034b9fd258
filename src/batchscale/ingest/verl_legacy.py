"""verl's oldest metric names and step numbering (v0.1, December 2024, to mid January 2025), rewritten into the names
the key table (common.STEP_KEY_MAP) knows, for every verl-style shape (console, JSONL, TensorBoard, W&B).

From verl's own code of that era (verl/trainer/ppo/ray_trainer.py `fit` and verl/trainer/ppo/workers/fsdp_workers.py
at v0.1, `9fa2cfb`, 2024-12-12, and up to `018b0d7`, 2025-01-17):

- phase times are `timing/<phase>` (`gen`, `ref`, `values`, `adv`, `update_critic`, `update_actor`, `testing`;
  briefly `timing(s)/<phase>` at 018b0d7), later `timing_s/<phase>`: renamed to `timing_s/<phase>`. There is no
  `step` timer before 018b0d7, so `timing_s/step` is the sum of the phases (what the later `step` timer wraps, less
  the metric bookkeeping between them), noted;
- learning rates are logged in units: `actor/lr(1e-4)` is lr x 1e4 (`metrics['actor/lr(1e-4)'] = lr * 1e4`, until
  2856be4, 2025-01-02): scaled back to `actor/lr`, `critic/lr`;
- `global_steps` starts at 0 and is incremented after the step is logged (1-based from 018b0d7): a log whose step-0
  row holds training keys is zero-based, and each of its training rows is moved to step + 1 (the number of updates
  made), so step 0 counts one step of samples. The validation before training (`logger.log(val_metrics, step=0)`
  from 2856be4, or only the `Initial validation metrics: {...}` print at v0.1) and after it (`step=global_steps`,
  already the number of updates) hold bare `test_score/<source>` keys: they keep their step;
- validation inside a step line is `val/test_score/<source>`; the bare `test_score/<source>` keys become the same;
- a log holding `<role>/lr(1e-4)` names predates 2856be4, so it predates `actor_rollout_ref.rollout.n` (2997e5d): it
  generated one response per prompt, and G = 1 is the log's own evidence (a hint: a config or flag still wins).
"""

from __future__ import annotations

import re

from batchscale.ingest.common import ParsedLog, mapped_keys

LEGACY_TIMING = re.compile(r"^timing(?:\(s\))?/(?P<phase>[^/]+)$")  # timing/gen, timing(s)/gen
SCALED_LR = re.compile(r"^(?P<role>[\w-]+)/lr\(1e(?P<exponent>-?\d+)\)$")  # actor/lr(1e-4): lr x 1e4
BARE_TEST_SCORE = "test_score/"


def rename_legacy_key(key: str, value):
    """(new key, new value) of one logged metric (see module docstring); other keys unchanged."""
    timing = LEGACY_TIMING.match(key)
    if timing:
        return f"timing_s/{timing.group('phase')}", value
    scaled = SCALED_LR.match(key)
    if scaled and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{scaled.group('role')}/lr", value * 10.0 ** int(scaled.group("exponent"))
    if key.startswith(BARE_TEST_SCORE):
        return "val/" + key, value
    return key, value


def is_bare_validation(metrics: dict) -> bool:
    """A row of validation metrics logged on their own (before or after training), in the old names."""
    return bool(metrics) and all(key.startswith(BARE_TEST_SCORE) for key in metrics)


def normalize_legacy_verl(parsed: ParsedLog) -> None:
    """Rewrite old verl names and zero-based steps in place (see module docstring); notes what was done."""
    if parsed.style != "verl":
        return
    legacy_keys = {key for row in parsed.rows for key in row.metrics
                   if LEGACY_TIMING.match(key) or SCALED_LR.match(key) or key.startswith(BARE_TEST_SCORE)}
    if not legacy_keys:
        return
    training = mapped_keys("verl")
    zero_based = any(row.step == 0 and not is_bare_validation(row.metrics)
                     and any(rename_legacy_key(k, v)[0] in training for k, v in row.metrics.items())
                     for row in parsed.rows)
    summed_steps = 0
    for row in parsed.rows:
        bare = is_bare_validation(row.metrics)
        renamed = dict(rename_legacy_key(key, value) for key, value in row.metrics.items())
        phases = [value for key, value in row.metrics.items() if LEGACY_TIMING.match(key)
                  and isinstance(value, (int, float)) and not isinstance(value, bool)]
        if phases and "timing_s/step" not in renamed:
            renamed["timing_s/step"] = sum(phases)
            summed_steps += 1
        row.metrics = renamed
        if zero_based and not bare:
            row.step += 1
    drop_repeated_final_validation(parsed)
    if any(SCALED_LR.match(key) for key in legacy_keys):
        parsed.batch_hints.setdefault("samples_per_prompt", 1)
        parsed.hint_reasons["samples_per_prompt"] = (
            "the log's <role>/lr(1e-4) names date it before 2856be4 (2025-01-02), when verl had no "
            "actor_rollout_ref.rollout.n (added at 2997e5d, 2025-01-05): one response per prompt")
    parsed.notes.append("verl before 2025-01-17 names (timing/<phase>, <role>/lr(1e-4), test_score/<source>) read as "
                        "timing_s/<phase>, <role>/lr (scaled), val/test_score/<source>")
    if summed_steps:
        parsed.notes.append(f"{summed_steps} step(s) log no step timer (verl before 2025-01-17): time/step is the sum "
                            "of the logged timing phases")
    if zero_based:
        parsed.notes.append("the log counts steps from 0 (verl before 2025-01-17): training step k is imported as "
                            "step k + 1 (updates made), validation logged on its own keeps its step")



def drop_repeated_final_validation(parsed: ParsedLog) -> None:
    """From 2856be4 the validation after training is logged on its own at `global_steps` (the updates made); when the
    last training step validated too, that is the same model twice: the repeat is dropped, noted."""
    validated = {row.step for row in parsed.rows if any(k.startswith("val/") for k in row.metrics)
                 and any(k in mapped_keys("verl") for k in row.metrics)}
    repeats = [row for row in parsed.rows if row.step in validated and row.metrics
               and all(k.startswith("val/" + BARE_TEST_SCORE) for k in row.metrics)]
    for row in repeats:
        parsed.rows.remove(row)
        parsed.notes.append(f"the validation logged after training ({row.where}) repeats the one of step {row.step} "
                            "(the same model): skipped")
