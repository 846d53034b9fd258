"""Synthetic run directories with known answers, for tests and for trying `analyze` without training anything.

Learning curve (saturating exponential on the sample axis, with the McCandlish et al. 2018 sample-efficiency penalty):

    J(N) = J_final - (J_final - J_initial) * exp(-N / (samples_scale * (1 + B / noise_scale) * slowdown * seed_factor))

so larger batches need (1 + B/noise_scale) times the samples of a tiny batch: curves with B << noise_scale align, larger ones
lag. The gradient-norm proxy follows |g|^2 = a + b/B with b/a = noise_scale, i.e. B_simple = noise_scale by construction,
and the online estimates log gns/grad_sq = a, gns/trace_sigma = b and gns/b_noise = noise_scale, each times a lognormal
factor of sd `gns_sd` (0: exact) drawn from a generator of its own, so the other records do not depend on it.
`slowdown` models a mistuned control (e.g. a fixed LR); seed noise is a per-seed factor on the time scale plus per-eval
Gaussian noise on the score. Records follow DESIGN.md's run-log contract; eval records include one at samples = 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchscale.rundir import RunDescriptor, run_dir_name, summarize_run, sweep_runs_dir, write_run
from batchscale.rundir.ownership import mark_directory


def compute_synthetic_score(samples, samples_per_step, noise_scale, samples_scale, slowdown=1.0, initial=0.1, final=0.8):
    """Noise-free J(N) of the synthetic model."""
    scale = samples_scale * (1.0 + samples_per_step / noise_scale) * slowdown
    return final - (final - initial) * np.exp(-np.asarray(samples, dtype=float) / scale)


def write_synthetic_run(
    run_dir: Path,
    label: str,
    seed: int,
    prompts_per_step: int,
    samples_per_prompt: int = 8,
    lr_rule: str = "sqrt",
    lr: float = 1e-6,
    total_samples: int = 16384,
    eval_every_samples: int = 1024,
    noise_scale: float = 2048.0,
    samples_scale: float = 2000.0,
    slowdown: float = 1.0,
    seed_sd: float = 0.05,
    eval_sd: float = 0.01,
    grad_floor: float = 1e-4,
    with_critic: bool = False,
    gns_sd: float = 0.05,
    max_staleness: int | None = None,
) -> Path:
    """Write one synthetic run directory (a finished run); returns run_dir. With `max_staleness` k it is an
    asynchronous run whose updates consume samples k/2 policy versions old on average (async/staleness_mean)."""
    rng = np.random.default_rng([seed, prompts_per_step, int(slowdown * 1000)])
    gns_rng = np.random.default_rng([seed, prompts_per_step, int(slowdown * 1000), 16])
    samples_per_step = prompts_per_step * samples_per_prompt
    seed_factor = float(np.exp(seed_sd * rng.standard_normal()))
    steps = max(1, total_samples // samples_per_step)
    eval_every_steps = max(1, eval_every_samples // samples_per_step)
    descriptor = RunDescriptor(
        label=label, seed=seed, algorithm="grpo", prompts_per_step=prompts_per_step,
        samples_per_prompt=samples_per_prompt, samples_per_step=samples_per_step, lr=lr, lr_rule=lr_rule,
        model="synthetic", task="synthetic", source="synthetic",
        **({} if max_staleness is None else {"rollout_mode": "async", "max_staleness": max_staleness,
                                             "generation_batch": 2 * samples_per_step}),
    )

    def score(samples: int) -> float:
        clean = compute_synthetic_score(samples, samples_per_step, noise_scale, samples_scale, slowdown * seed_factor)
        return float(clean + eval_sd * rng.standard_normal())

    records = [{"kind": "eval", "step": 0, "samples": 0, "wall_s": 0.0, "eval/accuracy": score(0)}]
    a = grad_floor
    b = a * noise_scale
    for step in range(1, steps + 1):
        samples = step * samples_per_step
        grad_norm = float(np.sqrt(a + b / samples_per_step) * np.exp(0.02 * rng.standard_normal()))
        record = {
            "kind": "step", "step": step, "samples": samples, "wall_s": step * 1.0, "prompts": prompts_per_step,
            "reward/mean": score(samples), "response/length_mean": 32.0, "tokens/generated": 32 * samples_per_step,
            "time/generate": 0.5, "time/train": 0.5, "time/step": 1.0, "grad_norm/actor": grad_norm, "lr/actor": lr,
        }
        factors = np.exp(gns_sd * gns_rng.standard_normal(3))
        record.update({"gns/grad_sq": float(a * factors[0]), "gns/trace_sigma": float(b * factors[1]),
                       "gns/b_noise": float(noise_scale * factors[2])})
        if max_staleness is not None:
            record.update({"async/staleness_mean": max_staleness / 2, "async/staleness_max": max_staleness})
        if with_critic:
            record.update({"grad_norm/critic": 2.0 * grad_norm ** 0.2, "lr/critic": lr, "time/train_critic": 0.1})
        records.append(record)
        if step % eval_every_steps == 0 or step == steps:
            records.append({"kind": "eval", "step": step, "samples": samples, "wall_s": step * 1.0,
                            "eval/accuracy": score(samples)})
    return write_run(run_dir, descriptor, records, summarize_run(descriptor, records, finished=True))


def write_synthetic_sweep(
    sweep_dir: Path,
    prompts_per_step: tuple[int, ...] = (8, 16, 32, 64, 128),
    seeds: tuple[int, ...] = (0, 1, 2),
    samples_per_prompt: int = 8,
    control_prompts_per_step: int | None = 16,
    control_slowdown: float = 1.6,
    **run_kwargs,
) -> Path:
    """A sweep dir `runs/<label>__s<seed>/` over P with sqrt-LR, plus an optional fixed-LR control that learns slower."""
    base_lr = 1e-6
    for prompts in prompts_per_step:
        lr = base_lr * np.sqrt(prompts / prompts_per_step[0])
        for seed in seeds:
            label = f"p{prompts}_g{samples_per_prompt}_sqrt"
            write_synthetic_run(sweep_runs_dir(sweep_dir) / run_dir_name(label, seed), label, seed, prompts,
                                samples_per_prompt, "sqrt", float(lr), **run_kwargs)
    if control_prompts_per_step is not None:
        for seed in seeds:
            label = f"p{control_prompts_per_step}_g{samples_per_prompt}_fixed"
            write_synthetic_run(sweep_runs_dir(sweep_dir) / run_dir_name(label, seed), label, seed,
                                control_prompts_per_step, samples_per_prompt, "none", base_lr,
                                slowdown=control_slowdown, **run_kwargs)
    mark_directory(sweep_dir, "sweep")
    return sweep_dir
