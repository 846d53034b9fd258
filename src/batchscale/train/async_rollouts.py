"""Asynchronous streaming rollouts, the trainer's side: B_gen >= B_train, partial rollouts, bounded staleness.

The paper's asynchronous partial rollouts and streaming generation (and verl's one-step-off / fully asynchronous
trainers, AReaL): a generator process (train/async_generator.py) keeps decoding while the trainer updates, so
generation hides behind training and more responses are in flight. `AsyncRollouts`, a rollout source
(train.rollout_source), starts it, feeds it prompts, and hands the training loop (train.loop.run_step) one step's
rollouts at a time:
- the trainer takes exactly P complete groups (P*G responses) per update from a buffer of finished groups, oldest first
  (by the version that started them, then by the order they were sampled); groups are never split;
- a group whose start version lags the version being updated by more than k = `rollout.max_staleness` is dropped
  (logged as `async/dropped_groups`), never trained on; with fewer than P fresh groups the trainer waits
  (`time/wait_for_samples`);
- after each actor update the loop publishes the new weights through shared memory (`publish`); the generator picks
  them up between decode steps;
- prompts are sampled ahead, P at a time with the run's own random generator as the synchronous loop samples them, for
  every group the generator may start before the next take: `async_generator.admission_limit`, the one place the
  admission bound is written.
Accounting is the synchronous loop's: N advances by exactly P*G per update and every response is consumed at most once.

Logged per step: `async/staleness_mean` and `async/staleness_max` (versions between the start of a response and the
update that consumes it), `async/partial_frac` (responses whose tokens span more than one version),
`async/buffer_size` (finished groups waiting when the step took its P, those taken included), `async/dropped_groups`,
`time/wait_for_samples`, `time/generator_idle` and `time/generate` (the generator's idle and decoding seconds since the
previous step), `time/sync_weights` (publishing the step's new weights, the lock wait included), and
`rollout/active_mean` (mean sequences per decode step since the previous step). The loss corrects
stale tokens with a truncated importance weight (algorithms.offpolicy).
"""

from __future__ import annotations

import os
import queue
import time

import torch
import torch.multiprocessing as mp

from batchscale.errors import UserError
from batchscale.rollout.base import Rollouts, StepRollouts
from batchscale.train.async_generator import (Channels, Counters, FinishedGroup, GeneratorDied, GeneratorSettings,
                                               SharedWeights, admission_limit, generator_main)

POLL_S = 0.2  # how often a waiting trainer checks that the generator is alive
STOP_TIMEOUT_S = 10.0


class AsyncRollouts:
    """The generator process and the buffer of finished groups: a rollout source, entered around a run's loop."""

    def __init__(self, cfg, plan, policy, task, rng, timer, start_step: int = 0):
        self.cfg, self.policy, self.task, self.rng, self.timer = cfg, policy, task, rng, timer
        # A resumed run's generator starts afresh at the checkpoint's weights: its versions count from there, so the
        # admission bound and the staleness of every group are measured as in a run that started at `start_step`.
        self.start_step = start_step
        rollout = cfg.rollout
        self.P, self.G, self.k = plan.prompts_per_step, plan.samples_per_prompt, rollout.max_staleness
        self.settings = GeneratorSettings(
            self.P, self.G, rollout.generation_batch or plan.samples_per_step, rollout.max_concurrency, self.k,
            rollout.partial, rollout.generator_threads, rollout.compute_dtype, cfg.sampling.temperature,
            cfg.sampling.top_p, cfg.sampling.max_new_tokens)
        self.context = mp.get_context("spawn")
        self.examples: dict[int, object] = {}  # group id -> the task example it answers
        self.buffer: list[FinishedGroup] = []  # finished groups not yet taken
        self.groups_sampled = 0
        self.dropped_ids: list[int] = []  # groups dropped as too stale, in order
        self.last = {"busy_s": 0.0, "idle_s": 0.0, "decoded_rows": 0, "decode_steps": 0}
        self.process = None

    def __enter__(self) -> "AsyncRollouts":
        ctx = self.context
        self.weights = SharedWeights(self.policy.model, ctx)
        self.counters = Counters(ctx)
        self.prompts, self.finished, self.stop = ctx.Queue(), ctx.Queue(), ctx.Event()
        self.supply_prompts(version=0)
        channels = Channels(self.weights, self.counters, self.prompts, self.finished, self.stop)
        self.process = ctx.Process(
            target=generator_main, name="batchscale-generator", daemon=True,
            args=(self.settings, self.cfg.model, self.cfg.task, channels, torch.get_rng_state(), os.getpid()))
        self.process.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.process.join(STOP_TIMEOUT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        for q in (self.prompts, self.finished):
            q.cancel_join_thread()
            q.close()

    def supply_prompts(self, version: int) -> None:
        """Prompts for every group the generator may start while `version` is the newest it can see (the admission
        bound; dropped groups free their places), sampled P at a time as the synchronous loop samples them."""
        groups = admission_limit(version, self.k, self.P) + self.counters.dropped_groups.value
        while self.groups_sampled < groups:
            examples = self.task.sample_train(self.rng, self.P)
            ids = self.policy.tokenizer(self.policy.format_prompts([ex.prompt for ex in examples]))["input_ids"]
            for ex, prompt_ids in zip(examples, ids):
                self.examples[self.groups_sampled] = ex
                self.prompts.put((self.groups_sampled, [list(prompt_ids)] * self.G))
                self.groups_sampled += 1

    def publish(self, model) -> None:
        """Copy the actor's new weights into shared memory, timed as `time/sync_weights` (the copy and the wait for
        the lock the generator holds while it loads them), apart from the update's `time/train`."""
        with self.timer.phase("sync_weights"):
            try:
                self.weights.publish(model, self.process.is_alive)
            except GeneratorDied:
                raise self.died("publishing new weights") from None

    def died(self, when: str) -> UserError:
        return UserError("rollout.mode", f"the generator process died (exit code {self.process.exitcode}) while the "
                         f"trainer was {when}", "see the output above; rerun, or set rollout.mode = 'sync'")

    def take(self, step: int) -> StepRollouts:
        """Exactly P complete groups for the update at version step - 1, oldest first; waits, drops the too stale."""
        version = step - 1 - self.start_step
        self.supply_prompts(version + 1)  # until the next take, the generator sees this step's update at the newest
        dropped_now = 0
        with self.timer.phase("wait_for_samples"):
            while True:
                self.drain()
                fresh = [g for g in self.buffer if version - g.start_version <= self.k]
                if len(fresh) < len(self.buffer):
                    dropped_now += len(self.buffer) - len(fresh)
                    self.counters.add("dropped_groups", len(self.buffer) - len(fresh))
                    for g in self.buffer:
                        if g not in fresh:
                            self.dropped_ids.append(g.group_id)
                            del self.examples[g.group_id]
                    self.buffer = fresh
                if len(self.buffer) >= self.P:
                    break
                self.wait_for_group(step)
        buffered = len(self.buffer)
        self.buffer.sort(key=lambda g: (g.start_version, g.group_id))
        taken, self.buffer = self.buffer[: self.P], self.buffer[self.P:]
        return self.step_rollouts(taken, version, buffered, dropped_now)

    def drain(self) -> None:
        while True:
            try:
                self.buffer.append(self.finished.get_nowait())
            except queue.Empty:
                return

    def wait_for_group(self, step: int) -> None:
        try:
            self.buffer.append(self.finished.get(timeout=POLL_S))
        except queue.Empty:
            if not self.process.is_alive():
                raise self.died(f"waiting for the samples of step {step}") from None

    def step_rollouts(self, groups: list[FinishedGroup], version: int, buffered: int, dropped_now: int) -> StepRollouts:
        flat = {key: [row for g in groups for row in getattr(g, key)]
                for key in ("prompt_ids", "response_ids", "logprobs", "versions")}
        examples = [self.examples.pop(g.group_id) for g in groups]
        now = {name: getattr(self.counters, name).value for name in self.last}
        delta = {name: now[name] - self.last[name] for name in now}
        self.last = now
        staleness = [version - g.start_version for g in groups for _ in range(self.G)]
        partial = [len(set(v)) > 1 for v in flat["versions"]]
        active_mean = delta["decoded_rows"] / delta["decode_steps"] if delta["decode_steps"] else None
        texts = self.policy.tokenizer.batch_decode(flat["response_ids"], skip_special_tokens=True)
        rollouts = Rollouts(flat["prompt_ids"], flat["response_ids"], texts, {"active_mean": active_mean},
                            flat["logprobs"])
        record = {
            "async/staleness_mean": sum(staleness) / len(staleness),
            "async/staleness_max": max(staleness),
            "async/partial_frac": sum(partial) / len(partial),
            "async/buffer_size": buffered,
            "async/dropped_groups": dropped_now,
            "time/generate": delta["busy_s"],
            "time/generator_idle": delta["idle_s"],
        }
        return StepRollouts(examples, rollouts, record, flat["versions"], version, [g.group_id for g in groups])
