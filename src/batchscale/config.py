"""Typed, validated run configuration and the batch plan derived from it.

A run is described by a TOML file with sections `model`, `task`, `batch`, `optim`, `critic`, `sampling`, `algorithm`,
`rollout` and `run`; `--set dotted.key=value` overrides any leaf. Validation happens before any compute and fails with
one line naming the key, the rule and the fix (`UserError`). Derived quantities (samples per step, gradient-accumulation
steps, the scaled learning rates, the number of steps) are computed once into a frozen `BatchPlan` and never mutated, so
a name never changes units halfway through a run.

Learning-rate scaling follows the paper's retuning rule: lr = lr_ref * (B_train / B_ref) ** a, with a = 1/2 ("sqrt",
the default for Adam), 1 ("linear"), 0 ("none") or any number given directly. B_train is the batch of one optimizer
update: P * G in the single pass, P * G / ppo_mini_batches when a rollout batch is split into mini-batches. The PPO
critic scales its own learning rate by its own rule from its own reference value (`critic.lr`, `critic.lr_rule`),
because the paper finds actor and critic respond differently to batch size.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from batchscale.algorithms.specs import get_algorithm_spec
from batchscale.config_ranges import (COUNT_MAX, MAX_NEW_TOKENS_MAX, SAMPLES_MAX, SEED_MAX, TEMPERATURE_MIN,
                                     THREADS_MAX, check_label_text, check_lr_exponents, check_template)
from batchscale.config_messages import explain_validation_error
from batchscale.errors import UserError
from batchscale.files import read_text_utf8
from batchscale.telemetry.trackers import check_trackers_installed

LR_RULE_EXPONENTS = {"sqrt": 0.5, "linear": 1.0, "none": 0.0}


class Section(BaseModel):
    """A config section: unknown keys, wrong types and non-finite numbers (inf, nan) are errors, never silently
    ignored or coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class ModelConfig(Section):
    name: str = "tiny"  # "tiny" (built-in, warm-started), "smollm2-135m", or a local Hugging Face directory
    gguf_file: str | None = None  # a GGUF file inside that directory, if the weights come as GGUF
    dtype: Literal["float32", "bfloat16"] = "float32"
    chat_template: bool = False  # wrap each prompt as a user turn with the tokenizer's chat template (instruct models)


class TaskColumns(Section):
    """task.name = "data": the columns holding each row's prompt and answer, as dotted paths into nested columns
    ("reward_model.ground_truth"); None: the shapes tasks/data.py knows (verl's, TRL's, batchscale's own)."""

    prompt: str | None = None
    answer: str | None = None


class TaskConfig(Section):
    name: Literal["arithmetic", "data", "reasoning_gym"] = "arithmetic"
    # arithmetic: operands drawn uniformly with `digits` digits, one of `operations` each
    digits: int = Field(2, ge=1, le=9)
    operations: str = "+"
    template: str = "{a}{op}{b}="  # the prompt text; `{a}`, `{op}`, `{b}` are filled in
    split_seed: int = Field(0, ge=0, le=SEED_MAX)  # fixes which problems are held out for eval, shared by every run and seed
    # data: rows from a JSONL or Parquet file or a saved Hugging Face dataset, in verl's, TRL's or our own shape
    path: str | None = None
    eval_path: str | None = None  # held-out rows; without it the last eval_size rows of `path` are held out
    reward: str = "digit_match"  # a built-in reward name or "module:function"; eval/accuracy is exact on the answer
    reward_timeout_s: float = Field(10.0, gt=0)  # a user reward ("module:function") must score a batch within this
    # how the reward and eval accuracy read a response's answer (tasks/answers.py); None: the task's own: arithmetic
    # "strict", data "last_number", reasoning_gym its <answer> tags or else the whole response
    answer_format: Literal["strict", "last_number", "hash", "boxed", "answer_tag", "text"] | None = None
    columns: TaskColumns = TaskColumns()  # data: where the prompt and the answer are (dotted paths)
    eval_size: int = Field(256, ge=1, le=COUNT_MAX)
    # reasoning_gym: a reasoning-gym dataset and its config fields (tasks/reasoning_gym_task.py); needs the extra
    dataset: str | None = None
    params: dict[str, Union[bool, int, float, str, list[Union[bool, int, float, str]]]] = {}

    def __hash__(self) -> int:  # a dict field: hash the values, so a Config stays hashable
        return hash(self.model_dump_json())


class BatchConfig(Section):
    prompts_per_step: int = Field(16, ge=1, le=COUNT_MAX)  # P
    samples_per_prompt: int = Field(8, ge=1, le=COUNT_MAX)  # G
    micro_batch_size: int = Field(32, ge=1, le=COUNT_MAX)  # sequences per forward/backward; changes execution only
    reference_samples_per_step: int = Field(128, ge=1, le=SAMPLES_MAX)  # B_ref: the batch at which optim.lr is the tuned value


class OptimConfig(Section):
    name: Literal["adam", "adamw"] = "adamw"
    lr: float = Field(1e-4, gt=0)  # learning rate at the reference batch B_ref
    lr_rule: Union[Literal["sqrt", "linear", "none"], float] = "sqrt"
    betas: tuple[float, float] = Field((0.9, 0.999), strict=False)  # TOML gives a list
    eps: float = Field(1e-8, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(1.0, gt=0)  # None: no clipping (the norm is still logged)
    # training arithmetic (actor, critic, reference): "bfloat16" runs bf16 autocast over float32 master weights and
    # Adam state; "auto" picks it where bf16 matmuls are native (AVX512-BF16/AMX CPU, bf16 GPU), else float32
    compute_dtype: Literal["auto", "float32", "bfloat16"] = "auto"


class CriticConfig(Section):
    """The value model of algorithms that need one (PPO); ignored by the others. Shares optim's Adam settings."""

    lr: float = Field(1e-4, gt=0)  # critic learning rate at the reference batch B_ref
    lr_rule: Union[Literal["sqrt", "linear", "none"], float] = "sqrt"
    max_grad_norm: float | None = Field(1.0, gt=0)  # None: no clipping (the norm is still logged)
    value_clip: float | None = Field(0.2, gt=0)  # new values stay within +-value_clip of the rollout's; None: no clip


class SamplingConfig(Section):
    temperature: float = Field(1.0, ge=TEMPERATURE_MIN)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(6, ge=1, le=MAX_NEW_TOKENS_MAX)


class AlgorithmConfig(Section):
    name: str = "grpo"
    clip_eps: float = Field(0.2, gt=0)
    normalize_std: bool = True  # GRPO: divide group-centred rewards by the group's std
    kl_coef: float = Field(0.0, ge=0)  # KL to the frozen initial policy (k3 estimator); 0 keeps no reference model
    loss_aggregation: Literal["token-mean", "sequence-mean"] = "token-mean"
    # PPO: GAE(gamma, lambda) over response tokens, the outcome reward on the last one, advantages whitened over the
    # batch. gamma = lambda = 1 (verl's defaults) makes A_t = R - V_t: unbiased whatever the critic's error
    gamma: float = Field(1.0, ge=0, le=1)
    gae_lambda: float = Field(1.0, ge=0, le=1)
    whiten_advantages: bool = True
    # Any algorithm: passes over each rollout batch, and optimizer updates per pass (mini-batches of whole prompts).
    # 1 and 1 is the paper's single pass: one update per rollout batch.
    ppo_epochs: int = Field(1, ge=1)
    ppo_mini_batches: int = Field(1, ge=1)
    # asynchronous rollouts: the truncated importance weight min(pi_update / pi_behaviour, is_cap) of stale tokens
    is_cap: float = Field(2.0, gt=0)


class RolloutConfig(Section):
    backend: Literal["engine", "hf"] = "engine"  # "engine": continuous batching + KV cache; "hf": HF generate (reference)
    max_concurrency: int = Field(256, ge=1, le=COUNT_MAX)  # sequences decoding together (engine) / static batch size (hf)
    # engine arithmetic: "auto" decodes a bf16/fp16 model in float32 on a CPU without native bf16 (which would emulate
    # it), a float32 model in bf16 on a bf16 GPU, else in the model's dtype; "model" always uses the model's dtype;
    # "float32" always upcasts
    compute_dtype: Literal["auto", "model", "float32"] = "auto"
    # "sync": generate, then train; "async": a generator process decodes while the trainer updates
    # (train/async_rollouts.py)
    mode: Literal["sync", "async"] = "sync"
    generation_batch: int | None = Field(None, ge=1, le=COUNT_MAX)  # async: responses in flight (B_gen); None: P*G
    max_staleness: int = Field(1, ge=0)  # async: k, policy versions a sample may lag the update that consumes it
    partial: bool = True  # async: an unfinished response continues under new weights (else they wait for it)
    generator_threads: int = Field(1, ge=1, le=THREADS_MAX)  # async: torch threads of the generator process


class RunConfig(Section):
    budget_samples: int = Field(8192, ge=1, le=SAMPLES_MAX)  # cumulative responses to train on
    eval_every_samples: int = Field(1024, ge=1, le=SAMPLES_MAX)
    seed: int = Field(0, ge=0, le=SEED_MAX)
    out_dir: str = "runs/default"
    label: str | None = None  # shared by a configuration's seeds; default derived from algorithm, P, G and lr rule
    threads: int | None = Field(None, ge=1, le=THREADS_MAX)  # torch intra-op threads; None keeps torch's default
    tensorboard: bool = False  # the same as "tensorboard" in `trackers`
    # experiment trackers mirroring every record (telemetry.trackers), each an optional extra
    trackers: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = []
    log_samples: int = Field(4, ge=0)  # (prompt, response, reward) examples each eval writes to samples.jsonl; 0: off
    # where policy, reference, critic, KV cache and update live: "auto" (CUDA when available), "cpu", "cuda", "cuda:N"
    device: str = "auto"
    # Checkpoints (train.checkpointing), for `train --resume`: every this many samples, rounded up to whole steps;
    # 0: none. None (the default): by time, at the first step boundary after each AUTO_CHECKPOINT_S (10 minutes) of
    # the run, so a run shorter than that (the demo's, the tests') writes none and a long one loses at most 10
    # minutes. The newest `keep_checkpoints` are kept.
    checkpoint_every_samples: int | None = Field(None, ge=0)
    keep_checkpoints: int = Field(2, ge=1)
    save_policy: bool = True  # a finished run writes its final policy as a Hugging Face directory, <run>/policy/


class Config(Section):
    model: ModelConfig = ModelConfig()
    task: TaskConfig = TaskConfig()
    batch: BatchConfig = BatchConfig()
    optim: OptimConfig = OptimConfig()
    critic: CriticConfig = CriticConfig()
    sampling: SamplingConfig = SamplingConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    rollout: RolloutConfig = RolloutConfig()
    run: RunConfig = RunConfig()


@dataclass(frozen=True)
class CriticPlan:
    """The critic's learning rate, scaled by its own rule from its own reference value (algorithms with a critic)."""

    lr_rule: str
    lr_exponent: float
    lr_reference: float
    lr: float


@dataclass(frozen=True)
class BatchPlan:
    """Everything derived from the config, computed once. The B_train = P * G responses of a rollout boundary feed
    ppo_epochs * ppo_mini_batches optimizer updates of samples_per_update responses each (one update by default)."""

    prompts_per_step: int
    samples_per_prompt: int
    samples_per_step: int
    micro_batch_size: int
    accumulation_steps: int  # micro-batches per optimizer update
    reference_samples_per_step: int
    lr_rule: str
    lr_exponent: float
    lr_reference: float
    lr: float
    num_steps: int
    budget_samples: int
    label: str
    ppo_epochs: int = 1
    ppo_mini_batches: int = 1
    samples_per_update: int = 0  # responses per optimizer update: samples_per_step / ppo_mini_batches
    critic: CriticPlan | None = None  # None: the algorithm has no critic
    checkpoint_every_steps: int | None = 0  # run.checkpoint_every_samples resolved: 0 none, None by time

    @property
    def updates_per_step(self) -> int:
        return self.ppo_epochs * self.ppo_mini_batches

    def describe(self) -> str:
        updates = (f"{self.ppo_epochs} epoch(s) x {self.ppo_mini_batches} mini-batch(es) of {self.samples_per_update}, "
                   if self.updates_per_step > 1 else "")
        critic = (f", critic lr {self.critic.lr:.3g} ({self.critic.lr_rule} from {self.critic.lr_reference:.3g})"
                  if self.critic else "")
        return (
            f"P={self.prompts_per_step} x G={self.samples_per_prompt} = {self.samples_per_step} samples/step, {updates}"
            f"{self.accumulation_steps} micro-batches of {self.micro_batch_size}, "
            f"lr {self.lr:.3g} ({self.lr_rule} from {self.lr_reference:.3g} at B_ref={self.reference_samples_per_step})"
            f"{critic}, {self.num_steps} steps = {self.num_steps * self.samples_per_step} samples"
        )


def scale_lr(lr_reference: float, samples_per_step: int, reference_samples_per_step: int, exponent: float) -> float:
    """lr = lr_ref * (B / B_ref) ** a: the paper retunes only the learning rate, by square-root scaling for Adam."""
    return lr_reference * (samples_per_step / reference_samples_per_step) ** exponent


def lr_rule_exponent(rule) -> tuple[float, str]:
    """(exponent, display name) of an lr_rule value: a named rule or a number."""
    return (LR_RULE_EXPONENTS[rule], rule) if isinstance(rule, str) else (float(rule), f"a={rule:g}")


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


def async_label(rollout: RolloutConfig, samples_per_step: int) -> str:
    """The default label's suffix of an asynchronous run (a sync run has none): each mode is its own configuration."""
    if rollout.mode != "async":
        return ""
    generation_batch = rollout.generation_batch or samples_per_step
    return f"-async-k{rollout.max_staleness}" + (f"-gen{generation_batch}" if generation_batch != samples_per_step else "")


def derive_plan(cfg: Config) -> BatchPlan:

    b, algo = cfg.batch, cfg.algorithm
    samples_per_step = b.prompts_per_step * b.samples_per_prompt
    samples_per_update = samples_per_step // algo.ppo_mini_batches
    exponent, rule_name = lr_rule_exponent(cfg.optim.lr_rule)
    label = cfg.run.label or f"{algo.name}-P{b.prompts_per_step}-G{b.samples_per_prompt}-{rule_name}" + \
        async_label(cfg.rollout, samples_per_step)
    critic = None
    if get_algorithm_spec(algo.name).needs_critic:
        critic_exponent, critic_rule = lr_rule_exponent(cfg.critic.lr_rule)
        critic = CriticPlan(critic_rule, critic_exponent, cfg.critic.lr,
                            scale_lr(cfg.critic.lr, samples_per_update, b.reference_samples_per_step, critic_exponent))
    return BatchPlan(
        prompts_per_step=b.prompts_per_step,
        samples_per_prompt=b.samples_per_prompt,
        samples_per_step=samples_per_step,
        micro_batch_size=b.micro_batch_size,
        accumulation_steps=samples_per_update // b.micro_batch_size,
        reference_samples_per_step=b.reference_samples_per_step,
        lr_rule=rule_name,
        lr_exponent=exponent,
        lr_reference=cfg.optim.lr,
        lr=scale_lr(cfg.optim.lr, samples_per_update, b.reference_samples_per_step, exponent),
        # ceil: every configuration trains on at least the budget, so curves cover a common sample range
        num_steps=math.ceil(cfg.run.budget_samples / samples_per_step),
        budget_samples=cfg.run.budget_samples,
        label=label,
        ppo_epochs=algo.ppo_epochs,
        ppo_mini_batches=algo.ppo_mini_batches,
        samples_per_update=samples_per_update,
        critic=critic,
        checkpoint_every_steps=checkpoint_every_steps(cfg, samples_per_step),
    )


AUTO_CHECKPOINT_S = 600.0  # run.checkpoint_every_samples = None: a checkpoint once this much training time has passed


def checkpoint_every_steps(cfg: Config, samples_per_step: int) -> int | None:
    """run.checkpoint_every_samples in whole steps (rounded up); 0: none; None: by time (AUTO_CHECKPOINT_S)."""
    every = cfg.run.checkpoint_every_samples
    if every is None:
        return None
    return math.ceil(every / samples_per_step) if every else 0


DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_device_name(name: str, field: str = "run.device") -> None:
    """The spelling of a device; whether this machine has it is `device.resolve_device`'s question (it needs torch)."""
    if not DEVICE_PATTERN.fullmatch(name):
        raise UserError(field, f"got {name!r}: must be 'auto', 'cpu', 'cuda' or 'cuda:N'",
                        f"set {field} to 'auto' (CUDA when available), 'cpu', 'cuda' or e.g. 'cuda:0'")


def check_combinations(cfg: Config, min_samples_per_prompt: int = 1) -> None:
    """Rules that span fields. Raises UserError naming the key, the rule and the fix."""
    b = cfg.batch
    check_device_name(cfg.run.device)
    samples_per_step = b.prompts_per_step * b.samples_per_prompt
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
    check_rollout_mode(cfg.rollout, samples_per_step)
    check_trackers_installed(tracker_names(cfg.run))
    if cfg.run.label is not None and ("/" in cfg.run.label or "__" in cfg.run.label):
        raise UserError("run.label", f"{cfg.run.label!r} must not contain '/' or '__' (run directories are <label>__s<seed>)",
                        "choose a label of letters, digits, '-' and '_'")
    check_label_text(cfg.run.label)
    check_lr_exponents({"optim.lr_rule": cfg.optim.lr_rule, "critic.lr_rule": cfg.critic.lr_rule})
    if cfg.task.name == "arithmetic":
        check_template(cfg.task.template)


def tracker_names(run: RunConfig) -> list[str]:
    """The trackers a run mirrors to, each once: `run.trackers`, with "tensorboard" added by `run.tensorboard`."""
    names = [*run.trackers, *(["tensorboard"] if run.tensorboard else [])]
    return list(dict.fromkeys(names))


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


def parse_override(item: str, field: str = "--set") -> tuple[list[str], Any]:
    """'a.b=value' -> (['a', 'b'], value), the value read as a TOML value when it is one ('64', '1e-4', 'true'),
    else kept as a plain string ('sqrt'). `field`: how an error names where the item came from."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise UserError(field, f"{item!r} is not of the form dotted.key=value", "write e.g. batch.prompts_per_step=64")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError("--set", f"{item!r}: {part} is a value, not a section", "override a leaf key")
        node[path[-1]] = value
    return data


def validate_config(data: dict, min_samples_per_prompt: int = 1) -> Config:
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        raise explain_validation_error(e.errors(), Config) from None
    check_combinations(cfg, min_samples_per_prompt)
    return cfg


def read_toml(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise UserError("CONFIG", f"no config file at {path}", "pass the path of a TOML file, e.g. examples/grpo-tiny.toml")
    try:
        return tomllib.loads(read_text_utf8(path))
    except tomllib.TOMLDecodeError as e:
        raise UserError(str(path), f"is not valid TOML ({e})", "fix the syntax at the line named") from None


def load_config(path: Path | None, overrides: list[str] = (), min_samples_per_prompt: int | None = None) -> Config:
    """Read TOML (or start from defaults), apply --set overrides, validate. No side effects."""
    data = read_toml(path) if path is not None else {}
    data = apply_overrides(data, list(overrides))
    if min_samples_per_prompt is None:
        name = data.get("algorithm", {}).get("name", AlgorithmConfig().name) if isinstance(data.get("algorithm"), dict) else "grpo"
        min_samples_per_prompt = get_algorithm_spec(name).min_samples_per_prompt
    return validate_config(data, min_samples_per_prompt)


def resolved_config(cfg: Config) -> dict:
    """The full config with its derived plan, as saved in the run directory's config.json."""
    return {**cfg.model_dump(mode="json"), "derived": asdict(derive_plan(cfg))}
