"""Synthetic sweeps with a known winner for the report tests.

Learning side: `analysis.synthetic` (N* grows like 1 + B/2048, no seed-to-seed time-scale noise). Systems side: each step
takes 1 + B/128 seconds, so q = B / (1 + B/128) saturates; T ~ (1 + B/2048)(1 + B/128)/B is smallest at
B = sqrt(2048 * 128) = 512, i.e. P = 64 at G = 8. The fixed-LR control (P = 16, 1.6x slower learner) loses.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from batchscale.analysis.synthetic import write_synthetic_sweep
from batchscale.systems.knee import fit_saturating_throughput, fit_training_cost

WINNER = "p64_g8_sqrt"
SECONDS_PER_STEP_BASE, SAMPLES_PER_EXTRA_SECOND = 1.0, 128.0
MACHINE = {"cpu": "Synthetic CPU 9000", "machine": "x86_64", "torch_threads": 2, "torch_version": "2.13.0+cpu"}


def retime_run(run_dir: Path) -> None:
    """Rewrite the step records' phase times and wall_s with the saturating step-time model; add a summary.json."""
    samples_per_step = json.loads((run_dir / "run.json").read_text())["samples_per_step"]
    step_s = SECONDS_PER_STEP_BASE + samples_per_step / SAMPLES_PER_EXTRA_SECOND
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for record in records:
        record["wall_s"] = record["step"] * step_s
        if record["kind"] == "step":
            record.update({"time/step": step_s, "time/generate": 0.6 * step_s, "time/train": 0.4 * step_s})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    last = [r for r in records if r["kind"] == "step"][-1]
    summary = {"finished": True, "steps": last["step"], "samples": last["samples"], "wall_s": last["wall_s"], **MACHINE}
    (run_dir / "summary.json").write_text(json.dumps(summary))


def make_timed_sweep(sweep_dir: Path) -> Path:
    """Five sqrt-LR batch sizes and a fixed-LR control, two seeds each, with step times (no analysis.json yet)."""
    write_synthetic_sweep(sweep_dir, prompts_per_step=(8, 16, 32, 64, 128), seeds=(0, 1), seed_sd=0.0, eval_sd=0.005)
    for run_json in sorted((sweep_dir / "runs").glob("*/run.json")):
        retime_run(run_json.parent)
    return sweep_dir


def write_generation_profile(path: Path) -> Path:
    """tokens/s = 1000 B / (B + 32) over B = 1..256, with the knee fitted as `profile generation` does."""
    levels = [2**i for i in range(9)]
    rows = [{"concurrency": b, "tokens_per_s": 1000.0 * b / (b + 32), "responses_per_s": 100.0 * b / (b + 32),
             "active_mean": float(b), "time_s": 1.0} for b in levels]
    fit = fit_saturating_throughput(levels, [r["tokens_per_s"] for r in rows])
    profile = {"model": "tiny", "dtype": "float32", "backend": "engine", "device": "cpu", "threads": 2, "repeats": 3,
               "rows": rows, "knee": {"metric": "tokens_per_s", **fit.to_dict()}}
    path.write_text(json.dumps(profile))
    return path


def write_training_profile(path: Path) -> Path:
    """`profile training --json`'s shape: rows of batch, tokens, seconds; fit time = a + b * tokens."""
    batches = np.array([8, 16, 32, 64, 128])
    tokens = batches * 40
    seconds = 0.05 + 2e-4 * tokens
    law = fit_training_cost(tokens, seconds)
    rows = [{"batch": int(b), "tokens": int(t), "seconds": float(s), "tokens_per_s": float(t / s),
             "samples_per_s": float(b / s)} for b, t, s in zip(batches, tokens, seconds)]
    profile = {"model": "tiny", "dtype": "float32", "device": "cpu", "threads": 2, "micro_batch_size": 8, "repeats": 3,
               "rows": rows, "fit": {"a": law.a_s, "b": law.b_s_per_token, **law.to_dict()}}
    path.write_text(json.dumps(profile))
    return path
