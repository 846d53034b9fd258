"""Synthetic sweeps with a known winner for the report tests.

Learning side: `analysis.synthetic` (N* grows like 1 + B/2048, no seed-to-seed time-scale noise). Systems side: each step
takes 1 + B/128 seconds, so q = B / (1 + B/128) saturates; T ~ (1 + B/2048)(1 + B/128)/B is smallest at
B = sqrt(2048 * 128) = 512, i.e. P = 64 at G = 8. The fixed-LR control (P = 16, 1.6x slower learner) loses.
"""

from __future__ import annotations

import json
from pathlib import Path

from document_fixtures import write_generation_profile, write_training_profile  # noqa: F401  (re-exported)

from batchscale.analysis.synthetic import write_synthetic_sweep
from batchscale.rundir import read_run, summarize_run

WINNER = "p64_g8_sqrt"
SECONDS_PER_STEP_BASE, SAMPLES_PER_EXTRA_SECOND = 1.0, 128.0
MACHINE = {"cpu": "Synthetic CPU 9000", "machine": "x86_64", "torch_threads": 2, "torch_version": "2.13.0+cpu"}


def retime_run(run_dir: Path) -> None:
    """Rewrite the step records' phase times and wall_s with the saturating step-time model; rewrite the summary."""
    samples_per_step = json.loads((run_dir / "run.json").read_text())["samples_per_step"]
    step_s = SECONDS_PER_STEP_BASE + samples_per_step / SAMPLES_PER_EXTRA_SECOND
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for record in records:
        record["wall_s"] = record["step"] * step_s
        if record["kind"] == "step":
            record.update({"time/step": step_s, "time/generate": 0.6 * step_s, "time/train": 0.4 * step_s})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    descriptor = read_run(run_dir).descriptor
    summary = summarize_run(descriptor, records, finished=True, machine=MACHINE)
    (run_dir / "summary.json").write_text(json.dumps(summary.model_dump(mode="json")))


def make_timed_sweep(sweep_dir: Path) -> Path:
    """Five sqrt-LR batch sizes and a fixed-LR control, two seeds each, with step times (no analysis.json yet)."""
    write_synthetic_sweep(sweep_dir, prompts_per_step=(8, 16, 32, 64, 128), seeds=(0, 1), seed_sd=0.0, eval_sd=0.005)
    for run_json in sorted((sweep_dir / "runs").glob("*/run.json")):
        retime_run(run_json.parent)
    return sweep_dir
