"""The facts a run writes about itself: the flat run descriptor (run.json) and the machine it ran on (summary.json)."""

from __future__ import annotations

import platform

import torch

from batchscale import __version__
from batchscale.config import Config, derive_plan
from batchscale.cpu import cpu_model, kernel_flags
from batchscale.rundir import RunDescriptor


def run_descriptor(cfg: Config) -> RunDescriptor:
    """The run descriptor: the flat facts of this run, the batch facts among them (see rundir.RunDescriptor)."""
    plan = derive_plan(cfg)
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


def machine_facts(state) -> dict:
    """Where the run of `state` (train.state.TrainingState) ran, for the summary: results must say which CPU (and kernel
    flags), and GPU, produced them."""
    policy = state.policy
    return {
        "cpu": cpu_model(),
        "cpu_flags": kernel_flags(),
        "machine": platform.machine(),
        "device": str(policy.model.device),
        **({"gpu": torch.cuda.get_device_name(policy.model.device)} if policy.model.device.type == "cuda" else {}),
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "batchscale_version": __version__,
        "model_params": policy.num_params,
        "train_compute_dtype": str(state.actor.compute_dtype).removeprefix("torch."),
    }
