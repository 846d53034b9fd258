"""P, G and the updates each step makes, from the evidence: the framework's config (given with --config, printed in
the log, or found beside it), the log's own token counts, hints in the file (TRL's trainer state), and flags.

Flags are needed only for what the log cannot tell. A flag that contradicts the config or the logged batch size by more
than TOLERANCE is an error naming both numbers; a flag may override a hint (TRL's `train_batch_size` is per device).

The logged batch size (verl, verl/trainer/ppo/metric_utils.py): `perf/total_num_tokens` is the sum over the step's
sequences of their prompt + response tokens (`global_token_num`), and `prompt_length/mean`, `response_length/mean` are
the means of the same two counts, so `total / (prompt mean + response mean)` is the number of sequences, P x G,
exactly; without the total, `global_seqlen/mean` (the step's tokens per data-parallel rank, `_balance_batch`) times
the ranks gives it when the config names them. This holds for every shape of a verl log (console, JSONL, TensorBoard,
W&B). The median over the logged steps is compared with P x G (more than TOLERANCE off: an error naming both), and
fills in P or G when only the other is known. A batch that varies between steps (dynamic sampling) gives the sample
axis from the per-step counts instead, with a warning.
"""

from __future__ import annotations

import statistics

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog
from batchscale.ingest.frameworkconfig import read_run_fields
from batchscale.ingest.newer_frameworks import BATCH_HINTS as NEWER_BATCH_HINTS
from batchscale.ingest.newer_frameworks import PROMPT_COUNT_KEYS, SAMPLE_COUNT_KEYS

TOLERANCE = 0.05
BATCH_FIELDS = ("prompts_per_step", "samples_per_prompt")
BATCH_HINTS = {
    "verl": "data.train_batch_size and actor_rollout_ref.rollout.n",
    "openrlhf": "--rollout_batch_size and --n_samples_per_prompt",
    "trl": "P = per_device_train_batch_size x gradient_accumulation_steps x processes / num_generations,"
           " G = num_generations",
    **NEWER_BATCH_HINTS,
}
TOKEN_KEYS = {"verl": ("perf/total_num_tokens", "prompt_length/mean", "response_length/mean")}
SEQLEN_KEY = {"verl": "global_seqlen/mean"}  # total tokens / data-parallel ranks (verl's _balance_batch)
TOTAL_FORMULA = "perf/total_num_tokens / (prompt_length/mean + response_length/mean)"
SEQLEN_FORMULA = "global_seqlen/mean x {ranks} data-parallel ranks / (prompt_length/mean + response_length/mean)"


def disagree(a: float, b: float) -> bool:
    return abs(a - b) > TOLERANCE * max(abs(a), abs(b))


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def data_parallel_ranks(config: dict) -> int | None:
    """verl's data-parallel size from its config: nnodes x n_gpus_per_node for the FSDP actor without sequence
    parallelism (verl balances the batch over the actor's ranks); None where it is not that simple (Megatron,
    Ulysses)."""
    try:
        ranks = int(config["trainer.nnodes"]) * int(config["trainer.n_gpus_per_node"])
    except (KeyError, TypeError, ValueError):
        return None
    strategy = str(config.get("actor_rollout_ref.actor.strategy", "fsdp"))
    sequence_parallel = config.get("actor_rollout_ref.actor.ulysses_sequence_parallel_size", 1)
    return ranks if strategy.startswith("fsdp") and sequence_parallel in (1, None) and ranks >= 1 else None


def logged_batch_by_step(parsed: ParsedLog) -> tuple[dict[int, float], str]:
    """({step: P x G as the log measured it}, how): per step, total tokens / (mean prompt + mean response tokens),
    the total from `perf/total_num_tokens`, else from `global_seqlen/mean` x the data-parallel ranks. A step's keys
    may sit in several rows (TensorBoard writes one scalar per event), so rows are merged by step first."""
    by_step: dict[int, dict] = {}
    for row in parsed.rows:
        by_step.setdefault(row.step, {}).update(row.metrics)
    count_key = SAMPLE_COUNT_KEYS.get(parsed.style)
    if count_key:  # the log counts the step's samples itself
        counts = {step: value for step, m in by_step.items() if (value := number(m.get(count_key))) and value > 0}
        return counts, count_key
    keys = TOKEN_KEYS.get(parsed.style)
    if not keys:
        return {}, ""
    ranks = data_parallel_ranks({**parsed.command_config, **parsed.config})
    counts, how = {}, TOTAL_FORMULA
    for step, metrics in by_step.items():
        total = number(metrics.get(keys[0]))
        if total is None and ranks is not None and number(metrics.get(SEQLEN_KEY[parsed.style])) is not None:
            total, how = number(metrics[SEQLEN_KEY[parsed.style]]) * ranks, SEQLEN_FORMULA.format(ranks=ranks)
        prompt, response = number(metrics.get(keys[1])), number(metrics.get(keys[2]))
        if total and prompt is not None and response is not None and prompt + response > 0 and total > 0:
            counts[step] = total / (prompt + response)
    return counts, how


def number(value) -> float | None:
    """A logged value as a float, or None."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def varies(counts: dict[int, float]) -> bool:
    """True when the logged P x G differs between steps by more than TOLERANCE (dynamic sampling)."""
    return bool(counts) and disagree(min(counts.values()), max(counts.values()))


def resolve_batch(parsed: ParsedLog, prompts_per_step: int | None, samples_per_prompt: int | None) -> dict:
    """Run descriptor fields: P, G (required), lr, algorithm, model, task, seed, updates; `batch_from` says whence."""
    fields = read_run_fields(parsed.config, parsed.style, parsed.notes) if parsed.config else {}
    origin = {name: "config" for name in BATCH_FIELDS if name in fields}
    merge_launch_command(parsed, fields, origin)
    add_logged_prompts(parsed)
    for name, value in parsed.batch_hints.items():
        if name not in fields:
            fields[name], origin[name] = value, "log"
            if name in parsed.hint_reasons:
                parsed.notes.append(f"{name} = {value}: {parsed.hint_reasons[name]}")
    for name, flag_value in zip(BATCH_FIELDS, (prompts_per_step, samples_per_prompt)):
        if flag_value is None:
            continue
        if origin.get(name) in ("config", "command") and disagree(flag_value, fields[name]):
            where = source_of(parsed, origin, name)
            raise UserError(flag_name(name), f"{flag_value} contradicts {fields[name]} in {where}",
                            f"drop {flag_name(name)} (the config is the run's own record) or pass the right config")
        if origin.get(name) == "log" and fields[name] != flag_value:
            parsed.notes.append(f"{flag_name(name)} {flag_value} overrides the log's {fields[name]}")
        fields[name], origin[name] = flag_value, "flag"
    logged = check_logged_batch(parsed, fields, origin)
    undecided = fields.pop("trl_readings", None)
    missing = [name for name in BATCH_FIELDS if name not in fields]
    if missing and undecided:
        raise UserError(", ".join(missing), undecided, f"pass {flag_name(missing[0])} (the TRL version the run used "
                        "decides: 0.14 and earlier counted prompts)")
    if missing:
        raise missing_batch_error(parsed, fields, origin, missing, logged)
    for name in BATCH_FIELDS:
        if fields[name] < 1:
            raise UserError(name, f"must be a positive integer, got {fields[name]}", "fix the flag or the config")
    fields["batch_from"] = origin
    resolve_updates(parsed, fields)
    return fields


SHORT = {"prompts_per_step": "P", "samples_per_prompt": "G"}


def missing_batch_error(parsed: ParsedLog, fields: dict, origin: dict, missing: list[str],
                        logged: tuple[float, str] | None) -> UserError:
    """The question for P or G, saying what the log does give (the logged P x G, the other of P and G)."""
    counted = logged and logged[1] in SAMPLE_COUNT_KEYS.values()  # the log counts samples, not tokens
    gives = [f"P x G = {logged[0]:.0f} from the logged {logged[1]}" if counted else
             f"P x G = {logged[0]:.0f} from the token counts ({logged[1]})"] if logged else []
    gives += [f"{SHORT[name]} = {fields[name]} from {origin_name(parsed, origin, name)}" for name in BATCH_FIELDS
              if name in fields]
    flags = " or ".join(f"{flag_name(name)} {SHORT[name]}" for name in missing)
    hint = f" ({parsed.style}: {BATCH_HINTS[parsed.style]})" if parsed.style in BATCH_HINTS else ""
    if gives:
        needed = "P or G" if len(missing) == 2 else SHORT[missing[0]]
        return UserError(", ".join(missing), f"{needed} unknown; known: {'; '.join(gives)}",
                         f"pass {flags}{' (one is enough)' if logged and len(missing) == 2 else ''}{hint}")
    found = f"the config {parsed.config_path} lacks it" if parsed.config_path else "no framework config was found"
    return UserError(
        ", ".join(missing),
        f"P and G are needed for cumulative samples (step x P x G); the {parsed.style} log does not record them"
        f" and {found}", f"pass --prompts-per-step P --samples-per-prompt G{hint}")


def origin_name(parsed: ParsedLog, origin: dict, name: str) -> str:
    """Where a field came from, in words: the flag, the log, the config file or the launch command."""
    if origin.get(name) == "flag":
        return flag_name(name)
    if origin.get(name) == "log":
        return "the log"
    return source_of(parsed, origin, name)


def add_logged_prompts(parsed: ParsedLog) -> None:
    """P as a hint where the log counts the step's prompts (prime-rl's progress/problems) and the count is steady."""
    key = PROMPT_COUNT_KEYS.get(parsed.style)
    values = [v for row in parsed.rows if key and (v := number(row.metrics.get(key))) and v > 0]
    if values and not disagree(min(values), max(values)) and "prompts_per_step" not in parsed.batch_hints:
        parsed.batch_hints["prompts_per_step"] = round(statistics.median(values))
        parsed.hint_reasons["prompts_per_step"] = f"the median of the logged {key}"


def source_of(parsed: ParsedLog, origin: dict, name: str) -> str:
    """Where a config-like field came from, for messages: the config file, or the launch command in the log."""
    if origin.get(name) == "command":
        return parsed.command_path or "the launch command"
    return parsed.config_path or "the config"


def merge_launch_command(parsed: ParsedLog, fields: dict, origin: dict) -> None:
    """The launch command's options fill what the config lacks (origin "command"); where both give a value and
    they differ, the config (what the framework resolved and ran) is kept, with a warning."""
    if not parsed.command_config:
        return
    command = read_run_fields(parsed.command_config, parsed.style, parsed.notes)
    for name, value in command.items():
        if name not in fields:
            fields[name] = value
            if name in BATCH_FIELDS:
                origin[name] = "command"
        elif value != fields[name]:
            parsed.problems.append(f"{parsed.command_path} sets {name} = {value}, but {parsed.config_path} holds "
                                   f"{fields[name]}: the config was kept")
    if not parsed.config_path:
        parsed.notes.append(f"no config file: P, G and the rest read from {parsed.command_path}")


def check_logged_batch(parsed: ParsedLog, fields: dict, origin: dict) -> tuple[float, str] | None:
    """Compare P x G with the batch the log's token counts give; fill in P or G when only the other is known. More
    than TOLERANCE off is an error naming both numbers. Where the logged batch varies from step to step (dynamic
    sampling), the per-step counts become the sample axis (`fields["samples_by_step"]`), with a warning. Returns
    (the logged P x G, how) for a question when P or G is still unknown, else None."""
    counts, how = logged_batch_by_step(parsed)
    if not counts:
        return None
    logged = statistics.median(counts.values())
    known = [name for name in BATCH_FIELDS if name in fields]
    if varies(counts):
        low, high = min(counts.values()), max(counts.values())
        fields["samples_by_step"] = counts
        parsed.problems.append(
            f"the logged batch varies from {low:.0f} to {high:.0f} sequences per step ({how}; dynamic sampling?): "
            "the sample axis is the cumulative sum of the per-step counts, not step x P x G")
        if len(known) < 2:
            parsed.notes.append(f"the log holds a median of {logged:.1f} sequences per step; P and G are still needed")
        return None
    if len(known) == 1:
        other = BATCH_FIELDS[1 - BATCH_FIELDS.index(known[0])]
        value = round(logged / fields[known[0]])
        if value >= 1 and not disagree(value * fields[known[0]], logged):
            fields[other], origin[other] = value, "log"
            parsed.notes.append(f"{other} = {value} from the logged batch of {logged:.1f} sequences per step ({how})")
            return None
        return logged, how
    if len(known) < 2:
        parsed.notes.append(f"the log holds {logged:.1f} sequences per step (P x G); P and G are still needed")
        return logged, how
    product = fields["prompts_per_step"] * fields["samples_per_prompt"]
    if not disagree(product, logged):
        parsed.notes.append(f"P x G = {product} agrees with the logged {logged:.1f} sequences per step")
        return None
    flags = [flag_name(name) for name in BATCH_FIELDS if origin.get(name) == "flag"]
    sources = sorted({origin[name] for name in BATCH_FIELDS} - {"flag"})
    named = " and ".join(flags) if flags else " and ".join(sorted({source_of(parsed, origin, n) for n in BATCH_FIELDS}))
    message = f"P x G = {product} but the log holds {logged:.1f} sequences per step ({how})"
    fix = ("pass the P and G the run used (or drop the flags and let the config decide)" if flags else
           "the config is not this run's: pass --config with the run's own config (one found beside the log may "
           "belong to another run)")
    if flags and sources:
        message += f"; P and G from flags and {', '.join(sources)}"
    raise UserError(named, message, fix)


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
