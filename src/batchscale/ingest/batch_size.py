"""P, G and the updates each step makes, from the evidence: the framework's config (given with --config, printed in
the log, or found beside it), the log's own token counts, hints in the file (TRL's trainer state), and flags.

Flags are needed only for what the log cannot tell. A flag that contradicts the config or the logged batch size by more
than TOLERANCE is an error naming both numbers; a flag may override a hint (TRL's `train_batch_size` is per device).

The logged batch size (verl, verl/trainer/ppo/metric_utils.py): `perf/total_num_tokens` is the sum over the step's
sequences of their prompt + response tokens (`global_token_num`), and `prompt_length/mean`, `response_length/mean` are
the means of the same two counts, so `total / (prompt mean + response mean)` is the number of sequences, P x G,
exactly. The median over the logged steps is compared with P x G, and fills in P or G when only the other is known.
"""

from __future__ import annotations

import statistics

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog
from batchscale.ingest.frameworkconfig import read_run_fields

TOLERANCE = 0.05
BATCH_FIELDS = ("prompts_per_step", "samples_per_prompt")
BATCH_HINTS = {
    "verl": "data.train_batch_size and actor_rollout_ref.rollout.n",
    "openrlhf": "--rollout_batch_size and --n_samples_per_prompt",
    "trl": "P = per_device_train_batch_size x gradient_accumulation_steps x processes / num_generations,"
           " G = num_generations",
}
TOKEN_KEYS = {"verl": ("perf/total_num_tokens", "prompt_length/mean", "response_length/mean")}


def disagree(a: float, b: float) -> bool:
    return abs(a - b) > TOLERANCE * max(abs(a), abs(b))


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def logged_samples_per_step(parsed: ParsedLog) -> float | None:
    """Median over steps of total tokens / (mean prompt + mean response tokens): P x G as the log measured it."""
    keys = TOKEN_KEYS.get(parsed.style)
    if not keys:
        return None
    estimates = []
    for row in parsed.rows:
        try:
            total, prompt, response = (float(row.metrics[k]) for k in keys)
        except (KeyError, TypeError, ValueError):
            continue
        if prompt + response > 0 and total > 0:
            estimates.append(total / (prompt + response))
    return statistics.median(estimates) if estimates else None


def resolve_batch(parsed: ParsedLog, prompts_per_step: int | None, samples_per_prompt: int | None) -> dict:
    """Run descriptor fields: P, G (required), lr, algorithm, model, task, seed, updates; `batch_from` says whence."""
    fields = read_run_fields(parsed.config, parsed.style, parsed.notes) if parsed.config else {}
    where = parsed.config_path or "the config"
    origin = {name: "config" for name in BATCH_FIELDS if name in fields}
    for name, value in parsed.batch_hints.items():
        if name not in fields:
            fields[name], origin[name] = value, "log"
    for name, flag_value in zip(BATCH_FIELDS, (prompts_per_step, samples_per_prompt)):
        if flag_value is None:
            continue
        if origin.get(name) == "config" and disagree(flag_value, fields[name]):
            raise UserError(flag_name(name), f"{flag_value} contradicts {fields[name]} in {where}",
                            f"drop {flag_name(name)} (the config is the run's own record) or pass the right config")
        if origin.get(name) == "log" and fields[name] != flag_value:
            parsed.notes.append(f"{flag_name(name)} {flag_value} overrides the log's {fields[name]}")
        fields[name], origin[name] = flag_value, "flag"
    check_logged_batch(parsed, fields, origin)
    missing = [name for name in BATCH_FIELDS if name not in fields]
    if missing:
        found = f"the config {parsed.config_path} lacks it" if parsed.config_path else "no framework config was found"
        raise UserError(
            ", ".join(missing),
            f"P and G are needed for cumulative samples (step x P x G); {parsed.style} logs do not record them"
            f" and {found}",
            f"pass --prompts-per-step P --samples-per-prompt G ({parsed.style}: {BATCH_HINTS[parsed.style]})",
        )
    for name in BATCH_FIELDS:
        if fields[name] < 1:
            raise UserError(name, f"must be a positive integer, got {fields[name]}", "fix the flag or the config")
    fields["batch_from"] = origin
    resolve_updates(parsed, fields)
    return fields


def check_logged_batch(parsed: ParsedLog, fields: dict, origin: dict) -> None:
    """Compare P x G with the logged batch size; fill in P or G when only the other is known."""
    logged = logged_samples_per_step(parsed)
    if logged is None:
        return
    known = [name for name in BATCH_FIELDS if name in fields]
    if len(known) == 1:
        other = BATCH_FIELDS[1 - BATCH_FIELDS.index(known[0])]
        value = round(logged / fields[known[0]])
        if value >= 1 and not disagree(value * fields[known[0]], logged):
            fields[other], origin[other] = value, "log"
            parsed.notes.append(f"{other} = {value} from the logged batch of {logged:.1f} sequences per step "
                                f"(perf/total_num_tokens / (prompt_length/mean + response_length/mean))")
        return
    if len(known) < 2:
        parsed.notes.append(f"the log holds {logged:.1f} sequences per step (P x G); P and G are still needed")
        return
    product = fields["prompts_per_step"] * fields["samples_per_prompt"]
    if not disagree(product, logged):
        parsed.notes.append(f"P x G = {product} agrees with the logged {logged:.1f} sequences per step")
        return
    flags = [flag_name(name) for name in BATCH_FIELDS if origin.get(name) == "flag"]
    message = (f"P x G = {product} but the log holds {logged:.1f} sequences per step "
               "(perf/total_num_tokens / (prompt_length/mean + response_length/mean))")
    if flags:
        raise UserError(" and ".join(flags), message, "pass the P and G the run used (or drop the flags and let "
                        "the config decide)")
    parsed.problems.append(message + f"; P and G kept from {parsed.config_path}")


def resolve_updates(parsed: ParsedLog, fields: dict) -> None:
    """samples_per_update and updates_per_step from the config's mini-batch and epoch settings (verl); without them,
    the single pass: one update of all P * G samples, said in a note."""
    prompts, group = fields["prompts_per_step"], fields["samples_per_prompt"]
    mini_batch_prompts, epochs = fields.pop("mini_batch_prompts", None), fields.pop("epochs", None)
    if mini_batch_prompts is None and epochs is None:
        parsed.notes.append("updates per step unknown (no mini-batch or epoch setting in a config): one update of "
                            "P x G samples assumed")
        return
    mini_batch_prompts = mini_batch_prompts or prompts
    if not 1 <= mini_batch_prompts <= prompts or prompts % mini_batch_prompts:
        raise UserError("ppo_mini_batch_size", f"{mini_batch_prompts} prompts must divide the {prompts} prompts of a "
                        "step", "check the framework config given or found beside the log")
    fields["samples_per_update"] = mini_batch_prompts * group
    fields["updates_per_step"] = (epochs or 1) * (prompts // mini_batch_prompts)
