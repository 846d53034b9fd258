"""TRL's prompts per optimizer step, P, from its training arguments, with the batch's unit decided from the evidence.

What one optimizer step (a logged TRL step) consumes: `per_device_train_batch_size` items per device and micro-step,
x the GPUs one process drives (`_n_gpu` under the Trainer's DataParallel: one process, several GPUs, no distributed
launch; 1 per process otherwise), x `gradient_accumulation_steps`, x the processes. What an item is changed with TRL
0.15 (cf97133, 2025-02-06, "redefining per_device_batch_size as generations per device"):

- TRL 0.14 and earlier: an item is a prompt (grpo_config.py at v0.14.0: "Number of prompts sampled per device"),
  each generating num_generations completions: P = items;
- TRL 0.15 and later: an item is a completion, a prompt's G completions spread over the batch, generated fresh once
  every num_iterations passes (0.16 on): P = items / num_iterations / num_generations.

The unit is decided by, in order: the TRL version where a file records it (the model card TRL writes beside its
checkpoints, `- TRL: 0.14.0`, passed here as `trl_version`); the fields of a complete dump of the arguments
(training_args.bin, TensorBoard's args text: `COMPLETE` set): `log_completions` arrived after the change (82d12eb,
2025-02-07) and is in every later release, while GRPOConfig at v0.14.0 has none of LATER_FIELDS; divisibility (TRL
0.15 on refuses a batch of completions that is not a whole number of groups, so items not divisible by
num_iterations x num_generations can only be prompts). The epoch counter is no evidence here: a logged `epoch` over
`step` gives steps per epoch = dataset prompts / P under both readings, so it decides only with the dataset's size,
which no TRL file records. Where the evidence cannot decide, P is left unknown and `trl_readings` holds the two
readings, for the question (batch_size.missing_batch_error).
"""

from __future__ import annotations

import re

COMPLETE = "batchscale.complete_trl_args"  # set by the readers of complete dumps (not a TRL field)
VERSION = "trl_version"  # set by the TRL reader from a model card (not a TRL field)
UNIT_CHANGED = (0, 15)  # the first release counting completions
# GRPOConfig fields that arrived with or after the change and are in every later release (log_completions first,
# 82d12eb), or later still (num_iterations 0.16; steps_per_generation, generation_batch_size 0.18)
LATER_FIELDS = ("log_completions", "num_iterations", "steps_per_generation", "generation_batch_size")
# fields added between v0.14.0 and the change (dev builds): their presence without LATER_FIELDS leaves it undecided
BETWEEN_FIELDS = ("ds3_gather_for_generation", "vllm_dtype", "vllm_max_model_len", "sync_ref_model")
BATCH_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations")


def positive_int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def parse_version(text) -> tuple[int, ...] | None:
    match = re.match(r"^v?(\d+)\.(\d+)", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def processes(config: dict) -> tuple[int | None, str]:
    """(processes, whence): `world_size` (accelerate's num_processes, set by the training_args.bin reader), else
    generation_batch_size / (per_device_train_batch_size x steps_per_generation), as GRPOConfig.__post_init__ sets
    it from the process count (TRL 0.18 on)."""
    world = positive_int(config.get("world_size"))
    if world:
        return world, "the saved accelerate state"
    generation, per_device, steps = (positive_int(config.get(k)) for k in
                                     ("generation_batch_size", "per_device_train_batch_size", "steps_per_generation"))
    if generation and per_device and steps and generation % (per_device * steps) == 0:
        return generation // (per_device * steps), "generation_batch_size / (per_device x steps_per_generation)"
    return None, ""


def gpus_per_process(config: dict) -> int:
    """The GPUs one process feeds: the Trainer's `_n_gpu` under DataParallel (no distributed launch), else 1."""
    n_gpu = positive_int(config.get("_n_gpu")) or 1
    single = str(config.get("distributed_type", "NO")).upper() in ("NO", "DISTRIBUTEDTYPE.NO", "NONE")
    return n_gpu if n_gpu > 1 and single else 1


def unit_evidence(config: dict, items: int, groups: int) -> tuple[str | None, str]:
    """("prompts" | "completions" | None, why) from the evidence (module docstring), in order."""
    version = parse_version(config.get(VERSION))
    if version is not None:
        unit = "prompts" if version < UNIT_CHANGED else "completions"
        return unit, f"the model card records TRL {config[VERSION]}"
    if config.get(COMPLETE):
        later = [name for name in LATER_FIELDS if name in config]
        if later:
            return "completions", f"the arguments hold {later[0]} (TRL 0.15 and later)"
        if not any(name in config for name in BETWEEN_FIELDS):
            return "prompts", "the arguments hold GRPOConfig's fields of TRL 0.14 (no log_completions, added in 0.15)"
    if items % groups:
        return "prompts", (f"{items} items per step are not a whole number of groups of {groups}, which TRL 0.15 and "
                           "later refuse")
    return None, ""


def decide_trl_prompts(config: dict, fields: dict, notes: list[str]) -> None:
    """Set fields["prompts_per_step"] from TRL's arguments, or fields["trl_readings"] when the unit is undecided;
    each way says why in `notes`."""
    per_device, accumulation, group = (positive_int(config.get(key)) for key in BATCH_KEYS)
    world, whence = processes(config)
    if not (per_device and accumulation and group and world):
        missing = [key for key, v in zip(BATCH_KEYS + ("processes",), (per_device, accumulation, group, world))
                   if not v]
        notes.append(f"P not derivable from the training arguments (no {', '.join(missing)})")
        return
    iterations = positive_int(config.get("num_iterations")) or 1
    gpus = gpus_per_process(config)
    items = per_device * gpus * accumulation * world
    shape = (f"per_device_train_batch_size {per_device}" + (f" x {gpus} GPUs of one process (_n_gpu)" if gpus > 1
             else "") + f" x gradient_accumulation_steps {accumulation} x {world} process(es) ({whence})")
    unit, why = unit_evidence(config, items, iterations * group)
    readings = {"prompts": items, "completions": items // (iterations * group)}
    if unit is None:
        fields["trl_readings"] = (f"TRL's batch unit is undecided: {shape} = {items} items per step are prompts "
                                  f"before TRL 0.15 (P = {readings['prompts']}) or completions since (P = "
                                  f"{readings['completions']}); no file records the TRL version or a field that dates "
                                  "it")
        return
    if unit == "completions" and items % (iterations * group):
        notes.append(f"{shape} = {items} completions per step are not a whole number of groups of {group} "
                     f"({iterations} iteration(s)) although {why}; P not derived")
        return
    fields["prompts_per_step"] = readings[unit]
    per = f" / num_iterations {iterations} / num_generations {group}" if unit == "completions" else ""
    notes.append(f"P = {shape}{per} = {fields['prompts_per_step']} fresh prompts per optimizer step: the batch "
                 f"counts {unit} because {why}")
    steps_per_generation = positive_int(config.get("steps_per_generation"))
    if unit == "completions" and steps_per_generation and steps_per_generation * iterations != accumulation:
        notes.append(f"one generation batch serves {steps_per_generation * iterations // accumulation} optimizer "
                     f"steps (steps_per_generation {steps_per_generation})")
