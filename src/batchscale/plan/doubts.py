"""Doubts about the measurements a decision rests on (issue 45, Deliver 5): checks that say when a number should not
be trusted as printed, each with what to do. Torch-free: the console (`plan`, `predict`, `profile`) and the report
(its "Doubts" section: `sweep_doubts` with the report's training profile) call the same checks.

Three kinds, each a `Doubt`:
- "throughput_scatter": the seeds of one configuration, or two labels that run the same batch the same way (same P, G,
  generation batch, concurrency and rollout mode), measured throughputs more than `SCATTER_LIMIT` apart (max/min).
  The same work on the same machine should run at the same speed; a wider spread says the machine's load changed
  between runs (other processes, a parallel sweep worker), and q (hence T = N*/q) carries that load, not the batch.
  1.25x is a documented threshold, not a test: q is a median over a run's steps, so the step-to-step noise of one
  run mostly cancels, and a quarter between two such medians is the machine, not the batch.
- "poor_fit": a profile whose fit does not describe its points: the generation knee's or the training cost law's
  R^2 below `R2_FLOOR`, or a training law with a negative fixed cost (seconds per update falling below zero at small
  batches) or a slope at or below zero (no asymptotic rate). The fit is printed either way; its extrapolations are
  what the doubt is about.
- "profile_mismatch": a profile measured in another training arithmetic (`compute_dtype`) or on another number of
  torch threads than the runs it is applied to: its seconds are another machine's seconds. (The training profile's
  `--compute-dtype auto` measures bf16 where bf16 is native, while the examples train in float32.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from batchscale.rundir import (ANALYSIS_FILE, GENERATION_PROFILE_FILE, AnalysisDocument, GenerationProfile,
                               TrainingProfile, find_run_dirs, read_document, read_run)

SCATTER_LIMIT = 1.25  # max/min throughput among measurements of the same work
R2_FLOOR = 0.9  # a fit explaining less of its points' variance is not used without a warning

DoubtKind = Literal["throughput_scatter", "poor_fit", "profile_mismatch"]


@dataclass(frozen=True)
class Doubt:
    """One measurement to doubt: what it is about (a label, a profile), what was found (with the numbers) and what to
    do about it."""

    kind: DoubtKind
    subject: str
    finding: str
    action: str

    def line(self) -> str:
        """The console's one line: "doubt: <finding>: <action>"."""
        return f"doubt: {self.finding}: {self.action}"


def throughput_doubts(measurements: Sequence, rollout_modes: Mapping[str, str] | None = None,
                      limit: float = SCATTER_LIMIT) -> list[Doubt]:
    """Scatter of q between the seeds of each label (`extra` throughput_min/max_samples_per_s, as
    plan.sweep_inputs records them) and between labels that run the same batch the same way (`rollout_modes`: label
    -> "sync"/"async", default sync). `measurements` are plan.rows.ConfigMeasurement."""
    modes = rollout_modes or {}
    doubts = []
    for m in measurements:
        low, high = m.extra.get("throughput_min_samples_per_s"), m.extra.get("throughput_max_samples_per_s")
        seeds = m.extra.get("throughput_seeds") or 0
        if seeds >= 2 and low and high and high / low > limit:
            doubts.append(Doubt(
                "throughput_scatter", m.label,
                f"{m.label}: its {seeds} seeds ran at {low:,.1f} to {high:,.1f} samples/s ({high / low:.2f}x apart) "
                "on the same configuration",
                "the machine's load changed between runs; rerun them on a quiet machine, or with fewer sweep workers "
                "(--workers 1), before trusting its T = N*/q"))
    groups: dict[tuple, list] = {}
    for m in measurements:
        if m.prompts_per_step is None or m.samples_per_prompt is None:
            continue  # a table row that does not say how it batches: nothing to compare it with
        key = (m.prompts_per_step, m.samples_per_prompt, m.generation_batch, m.max_concurrency,
               modes.get(m.label, "sync"))
        groups.setdefault(key, []).append(m)
    for (p, g, *_), members in groups.items():
        if len(members) < 2:
            continue
        slow = min(members, key=lambda m: m.throughput_samples_per_s)
        fast = max(members, key=lambda m: m.throughput_samples_per_s)
        ratio = fast.throughput_samples_per_s / slow.throughput_samples_per_s
        if ratio > limit:
            doubts.append(Doubt(
                "throughput_scatter", f"{slow.label}, {fast.label}",
                f"{slow.label} and {fast.label} run the same batch (P={p}, G={g}) but measured "
                f"{slow.throughput_samples_per_s:,.1f} and {fast.throughput_samples_per_s:,.1f} samples/s "
                f"({ratio:.2f}x apart)",
                "the machine's load changed between them; rerun the slower on a quiet machine (or with --workers 1), "
                "or plan from one q for both (--table)"))
    return doubts


def fit_doubts(name: str, generation_knee=None, training_fit=None, floor: float = R2_FLOOR) -> list[Doubt]:
    """A poor generation knee (rundir.SaturatingKnee: .r2) or training cost law (rundir.TrainingCostFit or
    systems.knee.LinearCostFit: .r2, .seconds_fixed, .seconds_per_token) of the profile called `name`."""
    doubts = []
    if generation_knee is not None and generation_knee.r2 < floor:
        doubts.append(Doubt(
            "poor_fit", name,
            f"{name}: the knee q(B) = q_max * B / (B + B_half) explains R^2 {generation_knee.r2:.2f} of the measured "
            f"throughputs (below {floor})",
            "its knee and extrapolations are unreliable; profile more concurrency levels, with more --repeats, on a "
            "quiet machine"))
    if training_fit is not None:
        problems = []
        if training_fit.r2 < floor:
            problems.append(f"R^2 {training_fit.r2:.2f} (below {floor})")
        if training_fit.seconds_fixed < 0:
            problems.append(f"a negative fixed cost ({training_fit.seconds_fixed:.3g} s per update)")
        if training_fit.seconds_per_token <= 0:
            problems.append(f"a slope of {training_fit.seconds_per_token:.3g} s/token (no asymptotic rate)")
        if problems:
            doubts.append(Doubt(
                "poor_fit", name,
                f"{name}: the training cost law seconds = a + b * tokens has {' and '.join(problems)}",
                "its times at other batches are unreliable; profile more batch sizes (--batches), with more "
                "--repeats, on a quiet machine"))
    return doubts


def mismatch_doubts(name: str, profile_dtype: str | None, profile_threads: int | None,
                    runs: Iterable[Mapping]) -> list[Doubt]:
    """A profile (its compute dtype and torch threads) against the runs it is applied to (each run's summary
    `machine`: train_compute_dtype, torch_threads; a key a run lacks, e.g. an import's, is not compared)."""
    runs = list(runs)
    doubts = []
    run_dtypes = sorted({r["train_compute_dtype"] for r in runs if r.get("train_compute_dtype")})
    if profile_dtype and run_dtypes and run_dtypes != [profile_dtype]:
        doubts.append(Doubt(
            "profile_mismatch", name,
            f"{name} measured {profile_dtype} training arithmetic, the runs trained in {', '.join(run_dtypes)}",
            f"its seconds are not the runs' seconds; profile again with --compute-dtype {run_dtypes[0]}"))
    run_threads = sorted({r["torch_threads"] for r in runs if isinstance(r.get("torch_threads"), int)})
    if profile_threads and run_threads and run_threads != [profile_threads]:
        doubts.append(Doubt(
            "profile_mismatch", name,
            f"{name} measured on {profile_threads} torch thread{'s' if profile_threads != 1 else ''}, the runs ran "
            f"on {', '.join(map(str, run_threads))}",
            f"its seconds are not the runs' seconds; profile again with --threads {run_threads[0]}"))
    return doubts


def sweep_doubts(sweep_dir: Path, measurements: Sequence, generation_profile: Path | None = None,
                 training_profile: Path | None = None) -> list[Doubt]:
    """What `batchscale plan DIR` doubts: q's scatter (rollout modes from analysis.json) and the generation profile's
    fit (`generation_profile`, else DIR/profiles/generation.json, as the plan finds it); with `training_profile` (the
    report's), that profile's fit and its arithmetic and threads against every run's summary."""
    sweep_dir = Path(sweep_dir)
    analysis = read_document(sweep_dir / ANALYSIS_FILE, AnalysisDocument)
    doubts = throughput_doubts(measurements, {label: c.rollout_mode for label, c in analysis.configs.items()})
    path = Path(generation_profile) if generation_profile else sweep_dir / GENERATION_PROFILE_FILE
    if path.is_file():
        doubts += fit_doubts(path.name, generation_knee=read_document(path, GenerationProfile).knee)
    if training_profile is not None:
        runs = map(read_run, find_run_dirs(sweep_dir))
        doubts += training_profile_doubts(training_profile, [r.summary.machine for r in runs if r.summary is not None])
    return doubts


def training_profile_doubts(training_profile: Path, machines: list[Mapping]) -> list[Doubt]:
    """A training profile's fit, and its arithmetic and threads against the runs' summary `machine` facts."""
    profile = read_document(training_profile, TrainingProfile)
    name = Path(training_profile).name
    return (fit_doubts(name, training_fit=profile.fit)
            + mismatch_doubts(name, profile.compute_dtype, profile.threads, machines))


def run_doubts(run_dir: Path, training_profile: Path | None, generation_profile: Path | None = None) -> list[Doubt]:
    """What `batchscale predict RUN_DIR` doubts: the profiles' fits, and the training profile against the run's own
    arithmetic and threads (its summary.json `machine`)."""
    doubts = []
    if generation_profile is not None:
        doubts += fit_doubts(Path(generation_profile).name,
                             generation_knee=read_document(generation_profile, GenerationProfile).knee)
    if training_profile is not None:
        run = read_run(run_dir)
        doubts += training_profile_doubts(training_profile, [run.summary.machine] if run.summary is not None else [])
    return doubts


def echo_doubts(doubts: Iterable[Doubt]) -> None:
    """Each doubt's line on stderr (stdout may be --json)."""
    import sys

    for doubt in doubts:
        print(doubt.line(), file=sys.stderr)
