"""Where a step's rollouts come from: a source the training loop is handed, synchronous or asynchronous.

The loop (train.loop) knows one protocol, `RolloutSource`: `take(step)` returns the rollouts the update of `step`
trains on, P complete groups of G responses, prompt-major; `publish(model)` tells the source that the actor's update
of that step is done, so what it generates next may use the new weights. A source is a context manager around the
loop: whatever it runs (a generator process) starts on entry and stops on exit, however the loop ends.

- `SyncRollouts` (`rollout.mode = "sync"`): the current policy generates the step's P x G responses at the rollout
  boundary, timed as `time/generate`; `publish` has nothing to do (the engine reads the model's own weights).
- `train.async_rollouts.AsyncRollouts` (`rollout.mode = "async"`): a generator process streams finished groups,
  possibly sampled by older weights; `publish` copies the new weights into shared memory (`time/sync_weights`).
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import numpy as np

from batchscale.rollout.base import SamplingParams, StepRollouts
from batchscale.telemetry.timers import PhaseTimer
from batchscale.train.async_rollouts import AsyncRollouts


class RolloutSource(Protocol):
    """The rollouts of each step, and the news that new weights exist."""

    def take(self, step: int) -> StepRollouts:
        """The P complete groups (P * G responses, prompt-major) that the update of `step` trains on."""

    def publish(self, model) -> None:
        """The actor's update of the step just taken is done: later rollouts may use `model`'s new weights."""

    def __enter__(self) -> "RolloutSource": ...

    def __exit__(self, *exc) -> None: ...


class SyncRollouts(contextlib.AbstractContextManager):
    """The synchronous rollout boundary: P prompts, G responses each from the current policy (prompt-major)."""

    def __init__(self, policy, engine, task, rng: np.random.Generator, plan, sampling: SamplingParams,
                 timer: PhaseTimer):
        self.policy, self.engine, self.task, self.rng = policy, engine, task, rng
        self.prompts_per_step, self.samples_per_prompt = plan.prompts_per_step, plan.samples_per_prompt
        self.sampling, self.timer = sampling, timer

    def take(self, step: int) -> StepRollouts:
        examples = self.task.sample_train(self.rng, self.prompts_per_step)
        grouped = [ex for ex in examples for _ in range(self.samples_per_prompt)]  # prompt-major: (P, G)
        with self.timer.phase("generate"):
            rollouts = self.engine.generate(self.policy.format_prompts([ex.prompt for ex in grouped]), self.sampling)
        return StepRollouts(examples, rollouts)

    def publish(self, model) -> None:
        """Nothing to do: the engine generates from the model's own weights."""

    def __exit__(self, *exc) -> None:
        """Nothing to stop: no process runs beside the loop."""


def open_rollout_source(state, start_step: int = 0) -> RolloutSource:
    """The source `state`'s (train.state.TrainingState) `rollout.mode` asks for, not yet entered; `start_step`: the
    step a resumed run continues after (an asynchronous generator then starts afresh from the current weights)."""
    if state.cfg.rollout.mode == "async":
        return AsyncRollouts(state.cfg, state.plan, state.policy, state.task, state.rng, state.timer, start_step)
    return SyncRollouts(state.policy, state.engine, state.task, state.rng, state.plan, state.sampling, state.timer)
