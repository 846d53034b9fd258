"""What every training step touches, built once before the first: task, policy, engine, actor, critic, timers.

`build_training_state` reads and checks the task's data (and starts a user reward's worker) before the model loads,
resolves the device (a GPU that is not there fails before anything loads) and the training arithmetic
(`train.precision`), then builds the rollout engine, the actor (`train.actor`: optimizer and reference model) and, for
algorithms that need one, the critic (`train.critic`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from batchscale.algorithms.registry import Algorithm, get_algorithm
from batchscale.config import BatchPlan, Config, derive_plan
from batchscale.device import resolve_device
from batchscale.errors import UserError
from batchscale.policy.load import load_policy
from batchscale.policy.policy import Policy
from batchscale.rollout import build_engine
from batchscale.rollout.base import SamplingParams
from batchscale.tasks import build_task
from batchscale.telemetry.gradnoise import NoiseScaleEMA
from batchscale.telemetry.timers import PhaseTimer
from batchscale.train.actor import Actor, build_actor
from batchscale.train.critic import Critic, build_critic
from batchscale.train.precision import resolve_training_dtype


@dataclass
class TrainingState:
    """What every step touches, built once by `build_training_state`."""

    cfg: Config
    plan: BatchPlan
    algorithm: Algorithm
    policy: Policy
    engine: object
    task: object
    actor: Actor
    critic: Critic | None  # algorithms that need one
    sampling: SamplingParams
    rng: np.random.Generator
    timer: PhaseTimer
    noise_scales: dict[str, NoiseScaleEMA] = field(  # the online B_noise of each network, across steps
        default_factory=lambda: {network: NoiseScaleEMA(network) for network in ("actor", "critic")})


def build_training_state(cfg: Config, log: Callable[[str], None] = print) -> TrainingState:
    """The task (its data read and checked first), policy, engine, actor and critic of a run."""
    plan = derive_plan(cfg)
    algorithm = get_algorithm(cfg.algorithm.name)
    task = build_task(cfg.task, cfg.model.chat_template)
    try:
        return _build(cfg, plan, algorithm, task, log)
    except BaseException:
        task.close()  # a user reward's worker process must not outlive a failed start
        raise


def check_context(cfg: Config, model_config) -> None:
    """A response must fit the model's context with room for its prompt: that bounds the KV cache and the logits a
    rollout allocates by what the model can attend to, before anything is generated."""
    positions = getattr(model_config, "max_position_embeddings", None)
    if isinstance(positions, int) and cfg.sampling.max_new_tokens >= positions:
        raise UserError("sampling.max_new_tokens", f"{cfg.sampling.max_new_tokens} new tokens leave no room for the "
                        f"prompt in the model's context of {positions} positions (max_position_embeddings)",
                        f"set sampling.max_new_tokens below {positions}, less the longest prompt's tokens")


def _build(cfg: Config, plan: BatchPlan, algorithm: Algorithm, task, log: Callable[[str], None]) -> TrainingState:
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    device = resolve_device(cfg.run.device)  # a GPU that is not there fails here, before the model loads
    if cfg.rollout.mode == "async" and device.type != "cpu":
        raise UserError("rollout.mode", f"asynchronous rollouts share weights through CPU shared memory and run on the "
                        f"CPU only, but run.device resolves to {device}",
                        "set run.device = 'cpu' for an asynchronous run, or rollout.mode = 'sync' on a GPU")
    torch.manual_seed(cfg.run.seed)
    policy = load_policy(cfg.model, cfg.task, log, device)  # reference model and critic are copies: same device
    check_context(cfg, policy.model.config)
    compute_dtype = resolve_training_dtype(cfg.optim.compute_dtype, policy.model.dtype, device.type)
    engine = build_engine(cfg.rollout, policy)
    actor = build_actor(policy.model, cfg, plan, compute_dtype)
    state = TrainingState(
        cfg, plan, algorithm, policy, engine, task, actor,
        critic=build_critic(policy.model, cfg, plan, compute_dtype) if algorithm.needs_critic else None,
        sampling=SamplingParams(cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.max_new_tokens),
        rng=np.random.default_rng(cfg.run.seed),
        timer=PhaseTimer(device),
    )
    log(f"{plan.label} seed {cfg.run.seed}: {plan.describe()}; {policy.num_params / 1e6:.2f}M params on {device}; "
        f"training arithmetic {str(compute_dtype).removeprefix('torch.')} (optim.compute_dtype = "
        f"{cfg.optim.compute_dtype!r})")
    return state
