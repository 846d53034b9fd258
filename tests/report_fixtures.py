"""Synthetic sweeps with a known winner for the report tests.

Learning side: `analysis.synthetic` (N* grows like 1 + B/2048, no seed-to-seed time-scale noise). Systems side: each step
takes 1 + B/128 seconds, so q = B / (1 + B/128) saturates; T ~ (1 + B/2048)(1 + B/128)/B is smallest at
B = sqrt(2048 * 128) = 512, i.e. P = 64 at G = 8. The fixed-LR control (P = 16, 1.6x slower learner) loses.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from document_fixtures import write_generation_profile, write_training_profile  # noqa: F401  (re-exported)

from batchscale.analysis.analyze import analyze
from batchscale.analysis.synthetic import compute_synthetic_score, write_synthetic_run, write_synthetic_sweep
from batchscale.rundir import read_run, summarize_run
from batchscale.rundir.samples import SamplesLog, sample_rows

WINNER = "p64_g8_sqrt"
SECONDS_PER_STEP_BASE, SAMPLES_PER_EXTRA_SECOND = 1.0, 128.0
MACHINE = {"cpu": "Synthetic CPU 9000", "machine": "x86_64", "torch_threads": 2, "torch_version": "2.13.0+cpu",
           "train_compute_dtype": "float32"}


def retime_run(run_dir: Path, step_s: float | None = None) -> None:
    """Rewrite the step records' phase times and wall_s with `step_s` seconds a step (default: the saturating
    step-time model); rewrite the summary."""
    samples_per_step = json.loads((run_dir / "run.json").read_text())["samples_per_step"]
    if step_s is None:
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


# The kinds of answer (plan/answer.py), each a sweep designed to give it: label -> (P, T/T_ref designed, slowdown of
# its learning curve; a large slowdown never reaches the target: censored), seeds, seed_sd (of ln N*), the target.
ANSWER_SWEEPS = {
    "winner": ({"p8": (8, 1.0, 1.0), "p16": (16, 0.8, 1.0), "p32": (32, 0.55, 1.0), "p64": (64, 0.75, 1.0)},
               (0, 1, 2), 0.01),
    "tie": ({"p8": (8, 1.0, 1.0), "p16": (16, 0.8, 1.0), "p32": (32, 0.6, 1.0), "p64": (64, 0.6, 1.0)},
            (0, 1, 2, 3), 0.005),
    "near_optimal": ({"p8": (8, 1.0, 1.0), "p16": (16, 0.9, 1.0), "p32": (32, 0.6, 1.0), "p64": (64, 0.65, 1.0)},
                     (0, 1, 2), 0.06),
    "unresolved": ({"p8": (8, 1.0, 1.0), "p16": (16, 0.85, 1.0), "p32": (32, 0.8, 1.0), "p64": (64, 0.95, 1.0)},
                   (0, 1), 0.2),
    "reference_only": ({"p8": (8, 1.0, 1.0), "p32": (32, None, 12.0), "p64": (64, None, 12.0)}, (0, 1), 0.02),
}
ANSWER_TARGET = 0.6
EVAL_EVERY_SAMPLES = 128


def make_answer_sweep(sweep_dir: Path, kind: str) -> Path:
    """A sweep whose plan gives the answer `kind` (ANSWER_SWEEPS), analysed: each label's step time is set after a
    first analysis so that its T/T_ref = N* step_s / B over the reference's is the designed one (a censored label
    keeps the step-time model); every run gets samples.jsonl (write_answer_samples)."""
    labels, seeds, seed_sd = ANSWER_SWEEPS[kind]
    runs = {}
    for label, (prompts, _, slowdown) in labels.items():
        for seed in seeds:
            runs[label, seed] = write_synthetic_run(
                sweep_dir / "runs" / f"{label}__s{seed}", label, seed, prompts, slowdown=slowdown, seed_sd=seed_sd,
                eval_sd=0.002, eval_every_samples=EVAL_EVERY_SAMPLES, total_samples=8192)
    first = analyze(sweep_dir, target=ANSWER_TARGET)
    n_star = {label: math.exp(np.mean(np.log([n for n in first["configs"][label]["n_star_per_seed"] if n])))
              for label, (_, ratio, _) in labels.items() if ratio is not None}
    reference = first["reference"]
    reference_b = labels[reference][0] * 8
    reference_t = n_star[reference] * (SECONDS_PER_STEP_BASE + reference_b / SAMPLES_PER_EXTRA_SECOND) / reference_b
    for (label, seed), run_dir in runs.items():
        prompts, ratio, _ = labels[label]
        step_s = None if ratio is None else ratio * reference_t * prompts * 8 / n_star[label]
        retime_run(run_dir, step_s)
        write_answer_samples(run_dir, label, seed)
    analyze(sweep_dir, target=ANSWER_TARGET)
    return sweep_dir


ANSWER_PROMPTS = 32


def answer_truth(label: str, seed: int) -> tuple[list[bool], list[bool]]:
    """Which of ANSWER_PROMPTS stored prompts a run answers right at its first and at its last eval: the first
    round(32 * J(0)) right at the start, and at the end the first round(32 * J(end)) right but for the run's
    `broken` ones (prompt 0 and, at odd seeds, prompt 1), so both kinds of change occur and the counts are known."""
    first = [i < 4 for i in range(ANSWER_PROMPTS)]
    last = [i < 20 for i in range(ANSWER_PROMPTS)]
    for broken in ((0, 1) if seed % 2 else (0,)):
        last[broken] = False
    return first, last


def write_answer_samples(run_dir: Path, label: str, seed: int) -> None:
    """samples.jsonl of a synthetic run: its first and last eval's ANSWER_PROMPTS examples, right and wrong as
    `answer_truth` says (a right response is the answer, a wrong one the answer plus one)."""
    run = read_run(run_dir)
    log = SamplesLog(run_dir)
    for eval_record, right in zip((run.evals[0], run.evals[-1]), answer_truth(label, seed)):
        examples = [(f"{i}+{i}=", str(2 * i) if ok else str(2 * i + 1), str(2 * i), 1.0 if ok else 0.0, ok)
                    for i, ok in enumerate(right)]
        log.write(sample_rows(eval_record["step"], eval_record["samples"], examples))
    log.close()
