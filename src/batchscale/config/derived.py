"""What is derived from a config, once per run (and once per sweep point) and passed on: the batch plan, and from it
the run descriptor (run.json) and the resolved config (config.json).

Derived quantities (samples per step, gradient-accumulation steps, the scaled learning rates, the number of steps) are
computed once into a frozen `BatchPlan` and never mutated, so a name never changes units halfway through a run.

Learning-rate scaling follows the paper's retuning rule: lr = lr_ref * (B_train / B_ref) ** a, with a = 1/2 ("sqrt",
the default for Adam), 1 ("linear"), 0 ("none") or any number given directly. B_train is the batch of one optimizer
update: P * G in the single pass, P * G / ppo_mini_batches when a rollout batch is split into mini-batches. The PPO
critic scales its own learning rate by its own rule from its own reference value (`critic.lr`, `critic.lr_rule`),
because the paper finds actor and critic respond differently to batch size.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from batchscale.algorithms.specs import get_algorithm_spec
from batchscale.config.schema import LR_RULE_EXPONENTS, Config, RolloutConfig, RunConfig
from batchscale.rundir.run import RunDescriptor

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


def read_lr_rule(name: str) -> float | None:
    """The exponent a of an lr rule as run.json names it (`lr_rule_exponent`'s display name: "sqrt", "a=0.5") or as
    a bare number ("0.5"); None for anything else (an import's "unknown")."""
    if name in LR_RULE_EXPONENTS:
        return LR_RULE_EXPONENTS[name]
    try:
        exponent = float(name.removeprefix("a="))
    except ValueError:
        return None
    return exponent if math.isfinite(exponent) else None


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


def tracker_names(run: RunConfig) -> list[str]:
    """The trackers a run mirrors to, each once: `run.trackers`, with "tensorboard" added by `run.tensorboard`."""
    names = [*run.trackers, *(["tensorboard"] if run.tensorboard else [])]
    return list(dict.fromkeys(names))


def resolved_config(cfg: Config, plan: BatchPlan) -> dict:
    """The full config with its derived plan (`derive_plan(cfg)`), as saved in the run directory's config.json."""
    return {**cfg.model_dump(mode="json"), "derived": asdict(plan)}


def run_descriptor(cfg: Config, plan: BatchPlan) -> RunDescriptor:
    """The run descriptor (run.json): the flat facts of a run of `cfg`, the batch facts among them from its plan
    (`derive_plan(cfg)`); see rundir.RunDescriptor."""
    return RunDescriptor(
        label=plan.label,
        seed=cfg.run.seed,
        algorithm=cfg.algorithm.name,
        prompts_per_step=plan.prompts_per_step,
        samples_per_prompt=plan.samples_per_prompt,
        samples_per_step=plan.samples_per_step,
        samples_per_update=plan.samples_per_update,
        updates_per_step=plan.updates_per_step,
        lr=plan.lr,
        lr_rule=plan.lr_rule,
        **({"lr_critic": plan.critic.lr, "lr_rule_critic": plan.critic.lr_rule} if plan.critic else {}),
        rollout_mode=cfg.rollout.mode,
        generation_batch=cfg.rollout.generation_batch or plan.samples_per_step,
        **({"max_staleness": cfg.rollout.max_staleness} if cfg.rollout.mode == "async" else {}),
        max_concurrency=cfg.rollout.max_concurrency,
        model=cfg.model.name,
        task=cfg.task.name if cfg.task.name != "reasoning_gym" else f"reasoning_gym:{cfg.task.dataset}",
        source="batchscale",
    )
