"""The run configuration's schema: one pydantic model per TOML section, strict and frozen.

A run is described by a TOML file with sections `model`, `task`, `batch`, `optim`, `critic`, `sampling`, `algorithm`,
`rollout` and `run`; `--set dotted.key=value` overrides any leaf (`config.load`). Each field carries its type, default
and range (`config.ranges`); rules that span fields are `config.checks`, and what is derived from a config (the batch
plan, the run descriptor) is `config.derived`, computed once per run.
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from batchscale.config.ranges import (COUNT_MAX, MAX_NEW_TOKENS_MAX, SAMPLES_MAX, SEED_MAX, TEMPERATURE_MIN,
                                      THREADS_MAX)


# The named learning-rate rules, lr ~ B^a with a by name: optim.lr_rule and critic.lr_rule take a name or a itself.
# The one table of them: run.json writes the name (`config.derived.lr_rule_exponent`) and analysis reads it back.
LR_RULE_EXPONENTS = {"sqrt": 0.5, "linear": 1.0, "none": 0.0}
DEFAULT_LR_RULE = "sqrt"  # square-root scaling, the paper's rule for Adam
LrRule = Union[Literal[tuple(LR_RULE_EXPONENTS)], float]


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
    lr_rule: LrRule = DEFAULT_LR_RULE
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
    lr_rule: LrRule = DEFAULT_LR_RULE
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
