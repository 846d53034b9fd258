"""What one sweep point asks of an external engine: the numbers every exporter carries, derived once from the config.

The batch plan (config.derive_plan) is the single source of P, G, the scaled learning rates and the step count, so an
exported launcher trains exactly the configuration `batchscale sweep` would have trained natively. Everything here is
engine-neutral; verl.py and openrlhf.py only spell it in their engine's option names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchscale.sweep.spec import Point


@dataclass(frozen=True)
class PointSettings:
    name: str  # <label>__s<seed>: the run directory the import writes
    label: str
    seed: int
    algorithm: str  # batchscale's name: grpo, ppo, remax
    prompts_per_step: int  # P
    samples_per_prompt: int  # G
    samples_per_step: int  # B_train = P * G
    ppo_epochs: int  # passes over each rollout batch (1 = the paper's single pass)
    ppo_mini_batches: int  # optimizer updates per pass (1 = the single pass)
    samples_per_update: int  # responses per optimizer update: P * G / ppo_mini_batches
    lr: float  # actor, after scaling
    lr_rule: str
    lr_reference: float
    critic_lr: float | None  # PPO only, after scaling
    num_steps: int  # rollout boundaries to reach the budget
    budget_samples: int
    eval_every_steps: int  # rollout boundaries between evaluations
    temperature: float
    top_p: float
    max_new_tokens: int
    clip_eps: float
    kl_coef: float
    normalize_std: bool
    loss_aggregation: str
    gamma: float
    gae_lambda: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    max_grad_norm: float | None
    critic_max_grad_norm: float | None
    value_clip: float | None
    chat_template: bool  # the sweep's model.chat_template: prompts are wrapped in the tokenizer's chat template

    @property
    def prompts_per_update(self) -> int:
        return self.prompts_per_step // self.ppo_mini_batches

    @property
    def is_single_pass(self) -> bool:
        return self.ppo_epochs == 1 and self.ppo_mini_batches == 1


def derive_settings(point: Point) -> PointSettings:
    cfg, plan = point.config, point.plan
    algo = cfg.algorithm
    return PointSettings(
        name=point.name, label=point.label, seed=point.seed, algorithm=algo.name,
        prompts_per_step=plan.prompts_per_step, samples_per_prompt=plan.samples_per_prompt,
        samples_per_step=plan.samples_per_step, ppo_epochs=plan.ppo_epochs, ppo_mini_batches=plan.ppo_mini_batches,
        samples_per_update=plan.samples_per_update, lr=plan.lr, lr_rule=plan.lr_rule, lr_reference=plan.lr_reference,
        critic_lr=plan.critic.lr if plan.critic else None, num_steps=plan.num_steps,
        budget_samples=plan.budget_samples,
        eval_every_steps=max(1, math.ceil(cfg.run.eval_every_samples / plan.samples_per_step)),
        temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p, max_new_tokens=cfg.sampling.max_new_tokens,
        clip_eps=algo.clip_eps, kl_coef=algo.kl_coef, normalize_std=algo.normalize_std,
        loss_aggregation=algo.loss_aggregation, gamma=algo.gamma, gae_lambda=algo.gae_lambda,
        betas=tuple(cfg.optim.betas), eps=cfg.optim.eps, weight_decay=cfg.optim.weight_decay,
        max_grad_norm=cfg.optim.max_grad_norm, critic_max_grad_norm=cfg.critic.max_grad_norm,
        value_clip=cfg.critic.value_clip, chat_template=cfg.model.chat_template,
    )


def describe_settings(s: PointSettings) -> str:
    """One comment-ready line block: the batch, the learning rate and the budget."""
    passes = ("single pass: one optimizer update per rollout batch" if s.is_single_pass else
              f"{s.ppo_epochs} epoch(s) x {s.ppo_mini_batches} mini-batch(es) of {s.samples_per_update} samples")
    critic = f", critic lr {s.critic_lr:.6g}" if s.critic_lr is not None else ""
    return (f"{s.algorithm}: P = {s.prompts_per_step} prompts x G = {s.samples_per_prompt} responses = "
            f"{s.samples_per_step} samples per step ({passes});\n"
            f"lr {s.lr:.6g} ({s.lr_rule} rule from {s.lr_reference:.6g}){critic}; "
            f"{s.num_steps} steps = {s.num_steps * s.samples_per_step} samples (budget {s.budget_samples}); "
            f"eval every {s.eval_every_steps} steps; seed {s.seed}.")
