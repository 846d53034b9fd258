"""The training loop: rollout boundary -> score -> advantages -> one micro-batched update -> log.

Each step samples P prompts, generates G responses for each (prompt-major, so rewards reshape to (P, G)), scores them,
turns rewards into per-token advantages with the configured algorithm, and applies exactly one optimizer update over the
B_train = P * G responses (or ppo_epochs x ppo_mini_batches updates, when configured). Cumulative samples N advance by
exactly B_train per step; every record carries N, the x-axis of every learning curve. Phases are timed with
device-synchronizing timers; evaluation (train.evaluation) is greedy on the task's fixed held-out set and is timed and
logged separately, never inside `time/step`.

GRPO, PPO and ReMax share this loop, which has no per-algorithm branch: it asks the algorithm what it needs. With
`needs_greedy_baseline` it also generates one greedy response per prompt and scores it (timed on its own as
`time/generate_baseline`); with `needs_critic` it holds a `train.critic.Critic`, computes its values before the
advantages and updates it after the actor (both timed as `time/train_critic`, apart from the actor's `time/train`).

Every step also logs the online gradient noise scale of the actor (and the critic): the update's per-half gradient norms
give `gns/grad_sq` and `gns/trace_sigma` (telemetry.gradnoise), and an EMA held in the training state across steps gives
`gns/b_noise`, in samples.

The loop is handed its rollouts by a source (train.rollout_source): the current policy at the rollout boundary, or
with `rollout.mode = "async"` a generator process (train.async_rollouts) whose P complete groups may have been
sampled by older weights, and whose tokens the update weights by a truncated importance ratio (algorithms.offpolicy).
After the actor's update the loop publishes the new weights to the source (an asynchronous source times the copy and
its lock wait as `time/sync_weights`, apart from `time/train`). The loop is otherwise the same.

Health (train.health): a non-finite reward stops the run at its step before the update; a non-finite loss, gradient norm
or score stops it before the record is written, leaving the run unfinished. A reward collapse is a warning in the
console and in summary.json. An earlier run replaced with --overwrite is swapped out only once the new run finishes.

Every record goes out through one `train.recorder.Recorder`: metrics.jsonl, the run's experiment trackers
(`run.trackers`, telemetry.trackers), and for each eval its first `run.log_samples` (prompt, response, reward) examples
in samples.jsonl (rundir.samples) and the trackers that hold tables; a tracker that fails is warned about once and
training goes on.

Long runs: at the step boundaries `run.checkpoint_every_samples` names (by default once per 10 minutes of training),
after that step's eval, the loop writes a checkpoint (train.checkpointing, rundir.checkpoint); `train(...,
resume=True)` continues an unfinished run from its newest complete one (train.resume). A finished run writes its
final policy as a Hugging Face directory, `policy/`, unless `run.save_policy = false`. One process at a time trains
a run directory (rundir.lock.RunLock).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from batchscale.algorithms.advantages import AdvantageInputs
from batchscale.algorithms.offpolicy import off_policy_targets
from batchscale.config import AUTO_CHECKPOINT_S, Config
from batchscale.files import staged_directory, writing
from batchscale.policy.sequences import collate
from batchscale.rundir import StoppedRun, check_out_dir, summarize_run
from batchscale.rundir.checkpoint import write_checkpoint
from batchscale.rundir.lock import RunLock
from batchscale.rundir.staging import run_destination
from batchscale.train.checkpointing import LoopState, capture
from batchscale.train.evaluation import evaluate, greedy_rewards
from batchscale.train.health import check_parameters, check_rewards
from batchscale.train.recorder import Recorder
from batchscale.train.rollout_source import RolloutSource, open_rollout_source
from batchscale.train.run_facts import machine_facts
from batchscale.train.state import TrainingState, build_training_state


StopCheck = Callable[[list[dict]], StoppedRun | None]  # after each eval: the records so far -> why to stop, or None


def train(cfg: Config, out_dir: Path, overwrite: bool = False, on_record: Callable[[dict], None] | None = None,
          log: Callable[[str], None] = print, stop: StopCheck | None = None, resume: bool = False,
          lock: bool = True) -> dict:
    """Run one configuration to its sample budget; returns the summary also written into the run directory.
    `stop` (a racing sweep's rule, sweep.race_rule.StopRule) may end it at an eval boundary: the run is then finished,
    and its summary says where and why it stopped. With `resume`, `out_dir` is an unfinished run that continues from
    its newest complete checkpoint (train.resume; `cfg` checked against the run's by train.resume.resume_config).
    `lock=False` leaves out the run lock where another lock covers the directory (a sweep's staging directories).

    An earlier run at `out_dir` (with `overwrite`) is replaced only when the new one finishes (rundir.staging.run_destination).
    A non-finite reward, loss or gradient norm stops the run at that step with a UserError (train.health)."""
    from batchscale.train.resume import check_resumable, resume_point

    run_dir = Path(out_dir)
    with RunLock(run_dir) if lock else contextlib.nullcontext():  # before any check: a second process is refused
        if resume:
            check_resumable(run_dir, through_sweep=not lock)  # lock=False: a sweep's worker, under its lock
        else:
            check_out_dir(run_dir, overwrite, training_inputs(cfg))
        state = build_training_state(cfg, log)  # the task's data is read and checked, a reward's worker started, first
        try:
            if resume:
                loop = resume_point(run_dir, state, log)
                with open_rollout_source(state, start_step=loop.step if loop else 0) as source:
                    return train_into(run_dir, state, source, on_record or (lambda record: None), log, stop, loop,
                                      resumed=True)
            with run_destination(run_dir, overwrite) as write_dir, open_rollout_source(state) as source:
                return train_into(write_dir, state, source, on_record or (lambda record: None), log, stop)
        finally:
            state.task.close()


def training_inputs(cfg: Config) -> dict[str, Path | None]:
    """The files a run reads (option -> path): --overwrite never replaces a directory holding one of them."""
    model = Path(cfg.model.name)
    return {"task.path": Path(cfg.task.path) if cfg.task.path else None,
            "task.eval_path": Path(cfg.task.eval_path) if cfg.task.eval_path else None,
            "model.name": model if model.exists() else None}


def train_into(run_dir: Path, state: TrainingState, source: RolloutSource, emit: Callable[[dict], None],
               log: Callable[[str], None], stop: StopCheck | None = None, loop: LoopState | None = None,
               resumed: bool = False) -> dict:
    """The loop: eval at 0, then steps (their rollouts taken from `source`) and periodic evals to the budget, or to
    the eval at which `stop` says why to end; summary.json last. `loop` (a resumed run's position, its records
    already in metrics.jsonl) continues after its step instead of starting at 0; `stop` then sees those records
    too, and is asked first at the eval the checkpoint follows, if it follows one. `resumed`: the run directory is
    an interrupted run's (cut back to `loop`, or to nothing), whose tracker runs are replaced."""
    cfg, plan = state.cfg, state.plan
    continuing = loop is not None
    loop = loop or LoopState(next_eval=cfg.run.eval_every_samples)
    recorder = Recorder(run_dir, state, loop, emit, log, resumed)
    last_checkpoint, stopped = time.perf_counter(), None
    try:
        if not continuing:
            eval_into(recorder, state, 0)
            stopped = stop(loop.records) if stop is not None else None  # the target met before any step: N* = 0
        elif stop is not None and loop.records and loop.records[-1]["kind"] == "eval":
            stopped = stop(loop.records)  # resumed after an eval: this process's rule (a rerun's race) on every record
        while stopped is None and loop.step < plan.num_steps:
            loop.step += 1
            step = loop.step
            record = run_step(step, state, source)
            loop.samples += plan.samples_per_step
            record.update(samples=loop.samples, wall_s=recorder.wall_s())
            recorder.write(record)
            check_parameters(step, state.policy.model, plan.lr)  # after the record: its finite numbers are kept
            if (warning := loop.collapse.update(record)) is not None:
                recorder.warn(warning)
            if loop.samples >= loop.next_eval or step == plan.num_steps:
                eval_into(recorder, state, step)
                while loop.next_eval <= loop.samples:
                    loop.next_eval += cfg.run.eval_every_samples
                stopped = stop(loop.records) if stop is not None else None
            if stopped is None and checkpoint_due(plan, step, time.perf_counter() - last_checkpoint):
                loop.wall_s = recorder.wall_s()
                json_state, write_files = capture(state, loop)
                write_checkpoint(run_dir, step, loop.samples, len(loop.records), json_state, write_files,
                                 cfg.run.keep_checkpoints)
                last_checkpoint = time.perf_counter()
        if stopped is not None:
            log(f"stopped at {loop.samples:,} samples: {stopped.message}")
    finally:
        recorder.close()
    if cfg.run.save_policy:
        save_policy(state, run_dir)
    summary = summarize_run(recorder.descriptor, loop.records, finished=True, machine=machine_facts(state),
                            notes=loop.notes, stopped=stopped)
    recorder.finish(summary)
    return summary.model_dump(mode="json")


def eval_into(recorder: Recorder, state: TrainingState, step: int) -> None:
    """Greedy eval on the task's held-out set (train.evaluation), recorded with its examples."""
    cfg, t0 = state.cfg, time.perf_counter()
    metrics, examples = evaluate(state.policy, state.engine, state.task, cfg.sampling.max_new_tokens, step,
                                 cfg.task.reward, cfg.run.log_samples)
    recorder.write({"kind": "eval", "step": step, "samples": recorder.loop.samples, "wall_s": recorder.wall_s(),
                    **metrics, "time/eval": time.perf_counter() - t0})
    recorder.write_samples(step, examples)


def checkpoint_due(plan, step: int, since_checkpoint_s: float) -> bool:
    """Whether `step` ends with a checkpoint (plan: config.BatchPlan): every `checkpoint_every_steps` steps, or by
    time when that is None (AUTO_CHECKPOINT_S of training since the last one); never after the last step."""
    every = plan.checkpoint_every_steps
    if step >= plan.num_steps or every == 0:
        return False
    return since_checkpoint_s >= AUTO_CHECKPOINT_S if every is None else step % every == 0


POLICY_DIR = "policy"


def save_policy(state: TrainingState, run_dir: Path) -> Path:
    """The final policy as a Hugging Face directory, `<run>/policy/` (weights and tokenizer, `save_pretrained`),
    written whole into a hidden sibling first: `model.name = "<run>/policy"` loads it back."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the run's own progress is drawn; a shard-writing bar only adds noise
    with writing(Path(run_dir) / POLICY_DIR), \
            staged_directory(Path(run_dir) / POLICY_DIR, "saving", follow_link=False) as staging:
        state.policy.model.save_pretrained(staging)  # a full disk: safetensors' own error, one line (files.writing)
        state.policy.tokenizer.save_pretrained(staging)
    return Path(run_dir) / POLICY_DIR


def run_step(step: int, state: TrainingState, source: RolloutSource) -> dict:
    """One rollout boundary and its optimizer update(s). Returns the step record (without samples / wall_s)."""
    cfg, plan, algorithm, timer, actor = state.cfg, state.plan, state.algorithm, state.timer, state.actor
    device = actor.model.device
    timer.reset()
    with timer.phase("step"):
        collected = source.take(step)
        examples, rollouts = collected.examples, collected.rollouts
        grouped = [ex for ex in examples for _ in range(plan.samples_per_prompt)]  # prompt-major: (P, G)
        scores = state.task.score(rollouts.texts, grouped)
        check_rewards(step, scores, cfg.task.reward, rollouts.texts, [ex.answer for ex in grouped])
        rewards = torch.tensor(scores, dtype=torch.float32)  # (N,)
        batch = collate(rollouts.prompt_ids, rollouts.response_ids, state.policy.tokenizer.pad_token_id, device)
        off_policy = None if collected.versions is None else off_policy_targets(
            rollouts.prompt_ids, rollouts.logprobs, collected.versions, collected.version, batch.response_mask.shape[1],
            cfg.algorithm.is_cap, device)
        inputs = AdvantageInputs(rewards.to(device), batch.response_mask, plan.samples_per_prompt,
                                 cfg.algorithm.normalize_std, gamma=cfg.algorithm.gamma,
                                 gae_lambda=cfg.algorithm.gae_lambda, whiten=cfg.algorithm.whiten_advantages)
        if algorithm.needs_greedy_baseline:
            with timer.phase("generate_baseline"):
                baseline = greedy_rewards(state.policy, state.engine, state.task, examples, state.sampling, step,
                                          cfg.task.reward)  # (P,)
                inputs.baseline_rewards = baseline.to(device)
        if algorithm.needs_critic:
            with timer.phase("train_critic"):  # the critic's forward at rollout time is critic work too
                inputs.values = state.critic.values(batch)  # (N, L-1)
        advantages = algorithm.compute_advantages(inputs)  # (N, L-1)
        with timer.phase("train"):
            actor_stats = actor.update(batch, advantages, off_policy, step=step)
        source.publish(actor.model)  # an asynchronous generator may decode with the new weights from here on
        critic_stats = {}
        if algorithm.needs_critic:
            with timer.phase("train_critic"):
                critic_stats = state.critic.update(batch, inputs.values, algorithm.compute_value_targets(inputs),
                                                   step=step)
    seconds = timer.reset()
    lengths, groups = np.array([len(r) for r in rollouts.response_ids]), rewards.view(plan.prompts_per_step, -1)
    eos_id = state.policy.tokenizer.eos_token_id
    return {
        "kind": "step",
        "step": step,
        "prompts": plan.prompts_per_step,
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std(unbiased=False)),
        "reward/zero_std_group_frac": float((groups.std(dim=1, unbiased=False) == 0).float().mean()),  # G=1: 1
        **({"reward/baseline_mean": float(baseline.mean())} if algorithm.needs_greedy_baseline else {}),
        "response/length_mean": float(lengths.mean()),
        "response/length_max": int(lengths.max()),
        "response/truncated_frac": float(np.mean([eos_missing(r, eos_id) for r in rollouts.response_ids])),
        "tokens/generated": int(lengths.sum()),
        "rollout/active_mean": rollouts.stats.get("active_mean"),
        # generate, train, step (+ generate_baseline, train_critic; async: sync_weights, wait_for_samples)
        **{f"time/{phase}": phase_s for phase, phase_s in seconds.items()},
        "lr/actor": actor.optimizer.param_groups[0]["lr"],
        **actor_stats,  # grad_norm/actor, loss/policy, actor/clip_frac (+ loss/kl), gns/grad_sq, gns/trace_sigma
        **state.noise_scales["actor"].observe(actor_stats),  # gns/b_noise
        **critic_stats,  # grad_norm/critic, lr/critic, loss/value, critic/explained_variance, gns/critic/...
        **state.noise_scales["critic"].observe(critic_stats),  # gns/critic/b_noise
        **collected.record,  # async: async/*, time/generate (the generator's), time/generator_idle
    }


def eos_missing(response_ids: list[int], eos_id: int) -> bool:
    return not response_ids or response_ids[-1] != eos_id
