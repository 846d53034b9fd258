"""The config's rules that span fields, checked before any compute: each failure is one `UserError` naming the key,
the rule and the fix."""

from __future__ import annotations

import math
import re

from batchscale.algorithms.specs import get_algorithm_spec
from batchscale.config.derived import tracker_names
from batchscale.config.ranges import check_label_text, check_lr_exponents, check_template
from batchscale.config.schema import Config, RolloutConfig
from batchscale.errors import UserError
from batchscale.telemetry.trackers import check_trackers_installed


DIVISOR_SEARCH = 100_000  # candidates tried on each side of `wanted`, and below sqrt(n): the hint's time is bounded


def nearest_divisor(n: int, wanted: int) -> int:
    """A divisor of n close to `wanted` (the smaller one on a tie): the fix a micro-batch error suggests. Exact (the
    nearest) whenever n <= DIVISOR_SEARCH**2 or a divisor lies within DIVISOR_SEARCH of `wanted`; otherwise the nearest
    among the divisors found, in bounded time whatever n is (a scan of all of 1..n would hang on a huge P*G)."""
    candidates = {1, n}
    for d in range(1, min(math.isqrt(n), DIVISOR_SEARCH) + 1):
        if n % d == 0:
            candidates.update((d, n // d))
    for d in range(max(1, wanted - DIVISOR_SEARCH), min(n, wanted + DIVISOR_SEARCH) + 1):
        if n % d == 0:
            candidates.add(d)
    return min(candidates, key=lambda d: (abs(d - wanted), d))


DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_device_name(name: str, field: str = "run.device") -> None:
    """The spelling of a device; whether this machine has it is `device.resolve_device`'s question (it needs torch)."""
    if not DEVICE_PATTERN.fullmatch(name):
        raise UserError(field, f"got {name!r}: must be 'auto', 'cpu', 'cuda' or 'cuda:N'",
                        f"set {field} to 'auto' (CUDA when available), 'cpu', 'cuda' or e.g. 'cuda:0'")


def check_combinations(cfg: Config) -> None:
    """Rules that span fields, the algorithm's needs read from `cfg.algorithm.name` (algorithms.specs: GRPO's baseline
    needs G >= 2), so every caller gets them. Raises UserError naming the key, the rule and the fix."""
    check_device_name(cfg.run.device)
    check_batch_shape(cfg)
    if cfg.model.dtype == "bfloat16" and cfg.optim.compute_dtype == "float32":
        raise UserError("optim.compute_dtype", "float32 arithmetic needs float32 weights, but model.dtype = 'bfloat16'",
                        "set model.dtype = 'float32' (float32 master weights), or optim.compute_dtype = 'auto'")
    if cfg.task.name == "data" and not cfg.task.path:
        raise UserError("task.path", "task.name = 'data' reads prompts from a file, but no path is set",
                        "set task.path to a JSONL or Parquet file, or a saved Hugging Face dataset")
    if cfg.task.name == "arithmetic":
        bad = set(cfg.task.operations) - set("+-*")
        if bad or not cfg.task.operations:
            raise UserError("task.operations", f"must be a non-empty string of '+', '-', '*', got {cfg.task.operations!r}",
                            "set task.operations to e.g. '+' or '+-'")
    check_rollout_mode(cfg.rollout, cfg.batch.prompts_per_step * cfg.batch.samples_per_prompt)
    check_trackers_installed(tracker_names(cfg.run))
    if cfg.run.label is not None and ("/" in cfg.run.label or "__" in cfg.run.label):
        raise UserError("run.label", f"{cfg.run.label!r} must not contain '/' or '__' (run directories are <label>__s<seed>)",
                        "choose a label of letters, digits, '-' and '_'")
    check_label_text(cfg.run.label)
    check_lr_exponents({"optim.lr_rule": cfg.optim.lr_rule, "critic.lr_rule": cfg.critic.lr_rule})
    if cfg.task.name == "arithmetic":
        check_template(cfg.task.template)


def check_rollout_mode(rollout: RolloutConfig, samples_per_step: int) -> None:
    """Asynchronous rollouts need the streaming engine and at least one step's responses in flight."""
    if rollout.mode != "async":
        return
    if rollout.backend != "engine":
        raise UserError("rollout.mode", f"asynchronous rollouts stream through the engine, but rollout.backend = "
                        f"{rollout.backend!r}", "set rollout.backend = 'engine', or rollout.mode = 'sync'")
    if rollout.generation_batch is not None and rollout.generation_batch < samples_per_step:
        raise UserError("rollout.generation_batch", f"{rollout.generation_batch} responses in flight cannot fill one "
                        f"update of P*G = {samples_per_step}", f"set rollout.generation_batch >= {samples_per_step}")


def check_batch_shape(cfg: Config) -> None:
    """The batch splits as the update needs: G for the algorithm's baseline, whole micro-batches per update, whole
    prompts per mini-batch, at least one step in the budget."""
    b = cfg.batch
    samples_per_step = b.prompts_per_step * b.samples_per_prompt
    min_samples_per_prompt = get_algorithm_spec(cfg.algorithm.name).min_samples_per_prompt  # unknown name: the error
    if b.samples_per_prompt < min_samples_per_prompt:
        raise UserError(
            "batch.samples_per_prompt",
            f"{cfg.algorithm.name} needs at least {min_samples_per_prompt} responses per prompt "
            f"(its baseline is computed within each prompt's group), got {b.samples_per_prompt}",
            f"set batch.samples_per_prompt >= {min_samples_per_prompt}",
        )
    if samples_per_step % b.micro_batch_size:
        near = nearest_divisor(samples_per_step, b.micro_batch_size)
        raise UserError(
            "batch.micro_batch_size",
            f"P*G = {b.prompts_per_step}*{b.samples_per_prompt} = {samples_per_step} samples per step must split into "
            f"whole micro-batches, but {samples_per_step} is not divisible by {b.micro_batch_size}",
            f"set batch.micro_batch_size to a divisor of {samples_per_step}, e.g. {near}",
        )
    mini_batches = cfg.algorithm.ppo_mini_batches
    if b.prompts_per_step % mini_batches:
        raise UserError(
            "algorithm.ppo_mini_batches",
            f"mini-batches hold whole prompts' groups, but P = {b.prompts_per_step} prompts do not split into "
            f"{mini_batches} equal mini-batches",
            f"set algorithm.ppo_mini_batches to a divisor of {b.prompts_per_step}",
        )
    samples_per_update = samples_per_step // mini_batches
    if mini_batches > 1 and samples_per_update % b.micro_batch_size:
        near = nearest_divisor(samples_per_update, b.micro_batch_size)
        raise UserError(
            "batch.micro_batch_size",
            f"each of the {mini_batches} mini-batch(es) of P*G / ppo_mini_batches = {samples_per_update} samples must "
            f"split into whole micro-batches, but {samples_per_update} is not divisible by {b.micro_batch_size}",
            f"set batch.micro_batch_size to a divisor of {samples_per_update}, e.g. {near}",
        )
    if cfg.run.budget_samples < samples_per_step:
        raise UserError(
            "run.budget_samples",
            f"the budget ({cfg.run.budget_samples} samples) is smaller than one step (P*G = {samples_per_step})",
            f"set run.budget_samples >= {samples_per_step}",
        )
