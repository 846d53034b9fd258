"""The training loop: rollout boundary -> score -> advantages -> one micro-batched update -> log.

Each step samples P prompts, generates G responses for each (prompt-major, so rewards reshape to (P, G)), scores them,
turns rewards into per-token advantages with the configured algorithm, and applies exactly one optimizer update over
the B_train = P * G responses (or ppo_epochs x ppo_mini_batches updates, when configured). Cumulative samples N
advance by exactly B_train per step; every record carries N, the x-axis of every learning curve. Phases are timed with
device-synchronizing timers; evaluation is greedy on the task's fixed held-out set and is timed and logged separately,
never inside `time/step`.

GRPO, PPO and ReMax share this loop, which has no per-algorithm branch: it asks the algorithm what it needs. With
`needs_greedy_baseline` it also generates one greedy response per prompt and scores it (timed on its own as
`time/generate_baseline`); with `needs_critic` it holds a `critic.Critic`, computes its values before the advantages
and updates it after the actor (both timed as `time/train_critic`, apart from the actor's `time/train`).

Every step also logs the online gradient noise scale of the actor (and the critic): the update's per-half gradient
norms give `gns/grad_sq` and `gns/trace_sigma` (telemetry.gradnoise), and an EMA held here across steps gives
`gns/b_noise`, in samples.

With `rollout.mode = "async"` a step's rollouts come from a generator process instead (async_trainer.py, around the
loop): P complete groups, possibly sampled by older weights, whose tokens the update weights by a truncated importance
ratio (algorithms.offpolicy); the new weights are published after the actor update. The loop is otherwise the same.

Health (health.py): a non-finite reward stops the run at its step before the update; a non-finite loss, gradient norm
or score stops it before the record is written, leaving the run unfinished. A reward collapse is a warning in the
console and in summary.json. An earlier run replaced with --overwrite is swapped out only once the new run finishes.
"""

from __future__ import annotations

import contextlib
import copy
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from batchscale import __version__
from batchscale.algorithms.advantages import AdvantageInputs
from batchscale.algorithms.offpolicy import off_policy_targets
from batchscale.algorithms.registry import Algorithm, get_algorithm
from batchscale.batching import collate
from batchscale.config import BatchPlan, Config, derive_plan, resolved_config
from batchscale.cpu import cpu_model, kernel_flags
from batchscale.critic import Critic, build_critic
from batchscale.device import resolve_device
from batchscale.errors import UserError
from batchscale.health import CollapseWatch, check_parameters, check_record, check_rewards
from batchscale.optimization import build_optimizer
from batchscale.policy.load import Policy, load_policy
from batchscale.precision import resolve_compute_dtype
from batchscale.rollout import build_engine
from batchscale.rollout.base import SamplingParams, StepRollouts
from batchscale.rundir import RunDescriptor, RunLog, check_out_dir, summarize_run
from batchscale.rundir.staging import run_destination
from batchscale.tasks import build_task
from batchscale.telemetry.gradnoise import NoiseScaleEMA
from batchscale.telemetry.tensorboard import TensorBoardMirror
from batchscale.telemetry.timers import PhaseTimer
from batchscale.update import update_policy


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
        task=cfg.task.name,
        source="batchscale",
    )


def evaluate(policy: Policy, engine, task, max_new_tokens: int, step: int = 0, reward_spec: str = "") -> dict:
    examples = task.eval_examples()
    prompts = policy.format_prompts([e.prompt for e in examples])
    rollouts = engine.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, greedy=True))
    answers = [e.answer for e in examples]
    accuracy, scores = task.accuracy(rollouts.texts, examples), task.score(rollouts.texts, examples)
    for what, values in (("eval accuracy", accuracy), ("eval reward", scores)):
        check_rewards(step, values, reward_spec, rollouts.texts, answers, what=what)
    return {"eval/accuracy": float(np.mean(accuracy)), "eval/reward": float(np.mean(scores)),
            "eval/response_length": float(np.mean([len(r) for r in rollouts.response_ids]))}


def greedy_rewards(policy: Policy, engine, task, examples, sampling: SamplingParams, step: int = 0,
                   reward_spec: str = "") -> torch.Tensor:
    """(P,) reward of one greedy response per prompt: ReMax's baseline."""
    greedy = SamplingParams(sampling.temperature, sampling.top_p, sampling.max_new_tokens, greedy=True)
    rollouts = engine.generate(policy.format_prompts([ex.prompt for ex in examples]), greedy)
    scores = task.score(rollouts.texts, examples)
    check_rewards(step, scores, reward_spec, rollouts.texts, [ex.answer for ex in examples], what="baseline reward")
    return torch.tensor(scores, dtype=torch.float32)


@dataclass
class Run:
    """What every step touches, built once by `build_run`."""

    cfg: Config
    plan: BatchPlan
    algorithm: Algorithm
    policy: Policy
    engine: object
    task: object
    optimizer: torch.optim.Optimizer
    critic: Critic | None  # algorithms that need one
    ref_model: torch.nn.Module | None  # algorithm.kl_coef > 0
    sampling: SamplingParams
    rng: np.random.Generator
    timer: PhaseTimer
    compute_dtype: torch.dtype = torch.float32  # training arithmetic (precision.resolve_compute_dtype)
    noise_scales: dict[str, NoiseScaleEMA] = field(  # the online B_noise of each network, across steps
        default_factory=lambda: {network: NoiseScaleEMA(network) for network in ("actor", "critic")})
    # rollout.mode = "async" (async_trainer.AsyncRollouts): where a step's rollouts come from, and who hears of updates
    rollout_source: Callable[[int, "Run"], StepRollouts] | None = None
    on_update: Callable[[torch.nn.Module], None] | None = None


def build_run(cfg: Config, log: Callable[[str], None] = print) -> Run:
    """The task (its data read and checked first), policy, engine, optimizer, critic and reference model of a run."""
    plan = derive_plan(cfg)
    algorithm = get_algorithm(cfg.algorithm.name)
    task = build_task(cfg.task)
    try:
        return _build_run(cfg, plan, algorithm, task, log)
    except BaseException:
        task.close()  # a user reward's worker process must not outlive a failed start
        raise


def _build_run(cfg: Config, plan: BatchPlan, algorithm: Algorithm, task, log: Callable[[str], None]) -> Run:
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    device = resolve_device(cfg.run.device)  # a GPU that is not there fails here, before the model loads
    if cfg.rollout.mode == "async" and device.type != "cpu":
        raise UserError("rollout.mode", f"asynchronous rollouts share weights through CPU shared memory and run on the "
                        f"CPU only, but run.device resolves to {device}",
                        "set run.device = 'cpu' for an asynchronous run, or rollout.mode = 'sync' on a GPU")
    torch.manual_seed(cfg.run.seed)
    policy = load_policy(cfg.model, cfg.task, log, device)  # reference model and critic are copies: same device
    compute_dtype = resolve_compute_dtype(cfg.optim.compute_dtype, policy.model.dtype, device.type)
    run = Run(
        cfg, plan, algorithm, policy, build_engine(cfg.rollout, policy), task,
        optimizer=build_optimizer(policy.model.parameters(), cfg.optim, plan.lr),
        critic=build_critic(policy.model, cfg, plan, compute_dtype) if algorithm.needs_critic else None,
        ref_model=copy.deepcopy(policy.model) if cfg.algorithm.kl_coef > 0 else None,
        sampling=SamplingParams(cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.max_new_tokens),
        rng=np.random.default_rng(cfg.run.seed),
        timer=PhaseTimer(device),
        compute_dtype=compute_dtype,
    )
    log(f"{plan.label} seed {cfg.run.seed}: {plan.describe()}; {policy.num_params / 1e6:.2f}M params on {device}; "
        f"training arithmetic {str(compute_dtype).removeprefix('torch.')} (optim.compute_dtype = "
        f"{cfg.optim.compute_dtype!r})")
    return run


def train(cfg: Config, out_dir: Path, overwrite: bool = False, on_record: Callable[[dict], None] | None = None,
          log: Callable[[str], None] = print) -> dict:
    """Run one configuration to its sample budget; returns the summary also written into the run directory.

    An earlier run at `out_dir` (with `overwrite`) is replaced only when the new one finishes (rundir.run_destination).
    A non-finite reward, loss or gradient norm stops the run at that step with a UserError (health.py)."""
    run_dir = Path(out_dir)
    check_out_dir(run_dir, overwrite)
    run = build_run(cfg, log)  # the task's data is read and checked, a user reward's worker started, before compute
    try:
        with run_destination(run_dir, overwrite) as write_dir, stream_rollouts(run):
            return train_into(write_dir, run, on_record or (lambda record: None), log)
    finally:
        run.task.close()


def train_into(run_dir: Path, run: Run, emit: Callable[[dict], None], log: Callable[[str], None]) -> dict:
    """The loop: eval at 0, then steps and periodic evals to the budget; summary.json last."""
    cfg, plan = run.cfg, run.plan
    descriptor = run_descriptor(cfg)
    runlog = RunLog(run_dir, descriptor, resolved_config(cfg))
    mirror = TensorBoardMirror(run_dir) if cfg.run.tensorboard else None
    start = time.perf_counter()
    records, notes, collapse = [], [], CollapseWatch()

    def write(record: dict) -> None:
        check_record(record, plan.lr)  # nothing non-finite reaches the writer: the run stops unfinished here
        runlog.write(record)
        records.append(record)
        if mirror is not None:
            mirror.write(record)
        emit(record)

    samples, next_eval = 0, 0

    def eval_now(step: int) -> dict:
        t0 = time.perf_counter()
        metrics = evaluate(run.policy, run.engine, run.task, cfg.sampling.max_new_tokens, step, cfg.task.reward)
        record = {"kind": "eval", "step": step, "samples": samples, "wall_s": time.perf_counter() - start,
                  **metrics, "time/eval": time.perf_counter() - t0}
        write(record)
        return record

    try:
        eval_now(0)
        next_eval = cfg.run.eval_every_samples
        for step in range(1, plan.num_steps + 1):
            record = run_step(step, run)
            samples += plan.samples_per_step
            record.update(samples=samples, wall_s=time.perf_counter() - start)
            write(record)
            check_parameters(step, run.policy.model, plan.lr)  # after the record: its finite numbers are kept
            if (warning := collapse.update(record)) is not None:
                notes.append(warning)
                log(f"warning: {warning}")
            if samples >= next_eval or step == plan.num_steps:
                eval_now(step)
                while next_eval <= samples:
                    next_eval += cfg.run.eval_every_samples
    finally:
        runlog.close()  # the log keeps what was written; without a summary the run reads as unfinished
        if mirror is not None:
            mirror.close()
    summary = summarize_run(descriptor, records, finished=True, machine=machine_facts(run), notes=notes)
    runlog.finish(summary)
    return summary.model_dump(mode="json")


def stream_rollouts(run: Run):
    """rollout.mode = "async": the generator process around the loop (async_trainer.py); sync: nothing."""
    if run.cfg.rollout.mode == "sync":
        return contextlib.nullcontext()
    from batchscale.async_trainer import AsyncRollouts

    return AsyncRollouts(run)


def generate_rollouts(step: int, run: Run) -> StepRollouts:
    """The synchronous rollout boundary: P prompts, G responses each from the current policy (prompt-major)."""
    examples = run.task.sample_train(run.rng, run.plan.prompts_per_step)
    grouped = [ex for ex in examples for _ in range(run.plan.samples_per_prompt)]  # prompt-major: (P, G)
    with run.timer.phase("generate"):
        rollouts = run.engine.generate(run.policy.format_prompts([ex.prompt for ex in grouped]), run.sampling)
    return StepRollouts(examples, rollouts)


def run_step(step: int, run: Run) -> dict:
    """One rollout boundary and its optimizer update(s). Returns the step record (without samples / wall_s)."""
    cfg, plan, algorithm, timer = run.cfg, run.plan, run.algorithm, run.timer
    device = run.policy.model.device
    timer.reset()
    with timer.phase("step"):
        collected = (run.rollout_source or generate_rollouts)(step, run)
        examples, rollouts = collected.examples, collected.rollouts
        grouped = [ex for ex in examples for _ in range(plan.samples_per_prompt)]  # prompt-major: (P, G)
        scores = run.task.score(rollouts.texts, grouped)
        check_rewards(step, scores, cfg.task.reward, rollouts.texts, [ex.answer for ex in grouped])
        rewards = torch.tensor(scores, dtype=torch.float32)  # (N,)
        batch = collate(rollouts.prompt_ids, rollouts.response_ids, run.policy.tokenizer.pad_token_id, device)
        off_policy = None if collected.versions is None else off_policy_targets(
            rollouts.prompt_ids, rollouts.logprobs, collected.versions, collected.version, batch.response_mask.shape[1],
            cfg.algorithm.is_cap, device)
        inputs = AdvantageInputs(rewards.to(device), batch.response_mask, plan.samples_per_prompt,
                                 cfg.algorithm.normalize_std, gamma=cfg.algorithm.gamma,
                                 gae_lambda=cfg.algorithm.gae_lambda, whiten=cfg.algorithm.whiten_advantages)
        if algorithm.needs_greedy_baseline:
            with timer.phase("generate_baseline"):
                baseline = greedy_rewards(run.policy, run.engine, run.task, examples, run.sampling, step,
                                          cfg.task.reward)  # (P,)
                inputs.baseline_rewards = baseline.to(device)
        if algorithm.needs_critic:
            with timer.phase("train_critic"):  # the critic's forward at rollout time is critic work too
                inputs.values = run.critic.values(batch)  # (N, L-1)
        advantages = algorithm.compute_advantages(inputs)  # (N, L-1)
        with timer.phase("train"):
            actor_stats = update_policy(run.policy.model, run.optimizer, batch, advantages, plan, cfg.algorithm,
                                        cfg.optim.max_grad_norm, run.ref_model, run.compute_dtype, off_policy)
            if run.on_update is not None:
                run.on_update(run.policy.model)  # the generator may decode with the new weights from here on
        critic_stats = {}
        if algorithm.needs_critic:
            with timer.phase("train_critic"):
                critic_stats = run.critic.update(batch, inputs.values, algorithm.compute_value_targets(inputs))
    seconds = timer.reset()
    lengths = np.array([len(r) for r in rollouts.response_ids])
    groups = rewards.view(plan.prompts_per_step, plan.samples_per_prompt)
    eos_id = run.policy.tokenizer.eos_token_id
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
        # generate, train, step (+ generate_baseline, train_critic)
        **{f"time/{phase}": phase_s for phase, phase_s in seconds.items()},
        "lr/actor": run.optimizer.param_groups[0]["lr"],
        **actor_stats,  # grad_norm/actor, loss/policy, actor/clip_frac (+ loss/kl), gns/grad_sq, gns/trace_sigma
        **run.noise_scales["actor"].observe(actor_stats),  # gns/b_noise
        **critic_stats,  # grad_norm/critic, lr/critic, loss/value, critic/explained_variance, gns/critic/...
        **run.noise_scales["critic"].observe(critic_stats),  # gns/critic/b_noise
        **collected.record,  # async: async/*, time/generate (the generator's), time/generator_idle
    }


def eos_missing(response_ids: list[int], eos_id: int) -> bool:
    return not response_ids or response_ids[-1] != eos_id


def machine_facts(run: Run) -> dict:
    """Where the run ran, for the summary: results must say which CPU (and kernel flags), and GPU, produced them."""
    policy = run.policy
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
        "train_compute_dtype": str(run.compute_dtype).removeprefix("torch."),
    }
