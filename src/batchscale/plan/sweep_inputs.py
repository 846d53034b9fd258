"""Read a sweep directory for the plan: N* per label from `analysis.json`, throughput q per label from the runs' own
logs.

Sources (formats in batchscale.rundir):
- `DIR/analysis.json`, written by `batchscale analyze`: the reference, the target, per label P, G, B_train and
  samples_to_target {mean, reached, censored}, and `b_simple` (the critical training batch).
- `DIR/runs/<label>__s<seed>/`, read with `rundir.read_run` (the run log's one reader), grouped by label.
- optionally a generation profile (`batchscale profile generation --json`): its knee gives the critical generation
  batch (B_90 of the fit). Looked up at `--generation-profile`, else `DIR/profiles/generation.json`. A server's profile
  (backend openai) also gives the generation side of q: `plan.make` applies `phase_times.carry_server_generation`,
  which needs each label's tokens per step (median tokens/generated, passed through here).

Throughput estimator (documented choice; the paper asks for "stable end-to-end throughput"): per seed, q_seed =
samples_per_step / median(time/step) over step records after the first (the first step carries warm-up: allocator,
kernel selection, cache growth), with samples_per_step from the run descriptor. The median resists stragglers (a
checkpoint write, a long-response step). q = the geometric mean of q_seed over seeds. A label none of whose runs has a
step after the warm-up step gets its q from the warm-up step, and the row says so (`throughput_warmup_only`) and a
DataWarning is raised: never a silent warm-up q. Eval time is not in time/step, so q is the training loop's
throughput, as the paper's q is. Median time/generate and time/train per step are passed through so the table can show
where the time goes. The same q_seed is each seed's ln q in the test on ln T (plan/log_time.py: the seed is the unit;
steps within a run are not independent draws of q, since load on the machine acts on whole runs).

Realized time-to-target (analysis.json `time_to_target_realized`: time/step summed up to the crossing, warm-up included)
is passed through beside T = N*/q, and so is `stopped` (why a racing sweep stopped the point: it cannot win). The
batch facts the memory check needs, generation_batch and max_concurrency, come from the runs' run.json.

N* is the geometric mean of analysis.json's per-seed N* over the seeds that reached the target (its arithmetic
`mean` for an analysis.json older than the per-seed lists), so that T = N*/q = exp(mean ln T_s), the centre of the
test; rN is recomputed here as a ratio of those (which may differ from analysis.json's own r_n, a ratio of arithmetic
means) so that T/T_ref = rN / (q/q_ref) holds exactly. A seed that did not reach the target enters the test with the
samples it trained (a lower bound). A point's budget is what a racing sweep allowed it (sweep.json race.budgets),
else the most samples a seed of it trained; the points a racing sweep never ran (race.not_run) are passed on, so no
answer excludes them. Every configuration that has runs is feasible (it ran on this machine).
"""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path

from batchscale.errors import DataWarning, UserError
from batchscale.plan.log_time import SeedTime, resolution_variance
from batchscale.plan.rows import ConfigMeasurement
from batchscale.rundir import (ANALYSIS_FILE, GENERATION_PROFILE_FILE, AnalysisDocument, GenerationProfile, LoadedRun,
                               find_run_dirs, read_document, read_run, read_sweep_document)

THROUGHPUT_METHOD = "samples_per_step / median(time/step) over steps after the first, geometric mean over seeds"


@dataclass(frozen=True)
class SweepInputs:
    measurements: list[ConfigMeasurement]
    reference: str
    target: float | None
    critical_training_batch_samples: float | None  # analysis.json b_simple
    critical_generation_batch_samples: float | None  # generation profile knee
    analysis_path: Path
    profile_path: Path | None
    profile: GenerationProfile | None = None
    no_signal: str | None = None  # analysis.json why_no_signal when there is no learning signal
    score: str = "eval"  # analysis.json score: "train-reward" when the curves are the training reward
    not_run: tuple[str, ...] = ()  # points a racing sweep never ran (sweep.json race.not_run)


@dataclass(frozen=True)
class RunThroughput:
    seed: int
    samples_per_s: float
    step_s: float  # median time/step after warm-up
    generate_s: float | None  # median time/generate
    train_s: float | None  # median time/train
    steps_used: int
    warmup_only: bool  # no step after the warm-up step: the warm-up step is all there is
    generation_batch: int | None  # run.json
    max_concurrency: int | None  # run.json
    tokens_per_step: float | None = None  # median tokens/generated


def load_sweep_inputs(sweep_dir: Path, reference: str | None = None, profile_path: Path | None = None) -> SweepInputs:
    """Combine analysis.json and the runs' timings into one measurement per analysed label."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise UserError(f"sweep directory {sweep_dir}", "does not exist", "give the directory `batchscale sweep` wrote")
    analysis_path = sweep_dir / ANALYSIS_FILE
    if not analysis_path.is_file():
        raise UserError(f"{sweep_dir}", "holds no analysis.json",
                        f"run `batchscale analyze {sweep_dir}` first, or plan from --table")
    analysis = read_document(analysis_path, AnalysisDocument)
    reference = reference if reference is not None else analysis.reference
    throughputs = measure_sweep_throughput(sweep_dir)
    sweep = read_sweep_document(sweep_dir)
    race = sweep.race if sweep is not None else None
    budgets = dict(race.budgets) if race is not None else {}
    # small batches first, as in analysis: a table reads along the batch axis
    ordered = sorted(analysis.configs.items(), key=lambda item: (item[1].samples_per_step, item[0]))
    measurements = [_to_measurement(label, cfg, throughputs, sweep_dir, budgets.get(label)) for label, cfg in ordered]
    profile_path = _find_profile(sweep_dir, profile_path)
    profile = read_document(profile_path, GenerationProfile, "--generation-profile") if profile_path else None
    return SweepInputs(
        measurements=measurements,
        reference=reference,
        target=analysis.target,
        critical_training_batch_samples=analysis.b_simple,
        critical_generation_batch_samples=profile.critical_generation_batch if profile else None,
        analysis_path=analysis_path,
        profile_path=profile_path,
        profile=profile,
        no_signal=None if analysis.learning_signal else analysis.why_no_signal,
        score=analysis.score,
        not_run=tuple(race.not_run) if race is not None else (),
    )


def measure_sweep_throughput(sweep_dir: Path) -> dict[str, list[RunThroughput]]:
    """Per label, the throughput of each of its runs (seeds) that has timed step records."""
    by_label: dict[str, list[RunThroughput]] = {}
    try:
        run_dirs = find_run_dirs(sweep_dir)  # a sweep's runs/, a directory of runs, or one run directory
    except UserError:
        return by_label
    for run_dir in run_dirs:
        run = read_run(run_dir)
        measured = measure_run_throughput(run)
        if measured is not None:
            by_label.setdefault(run.label, []).append(measured)
    return by_label


def measure_run_throughput(run: LoadedRun) -> RunThroughput | None:
    """q for one run: samples_per_step / median(time/step), dropping the first (warm-up) step; a run with only that
    step is marked warmup_only. None if nothing is timed."""
    steps = [s for s in run.steps if _is_positive(s.get("time/step"))]
    if not steps:
        return None
    stable = steps[1:] if len(steps) > 1 else steps
    step_s = statistics.median(s["time/step"] for s in stable)
    return RunThroughput(
        seed=run.seed,
        samples_per_s=run.samples_per_step / step_s,
        step_s=step_s,
        generate_s=_median_of(stable, "time/generate"),
        train_s=_median_of(stable, "time/train"),
        steps_used=len(stable),
        warmup_only=len(steps) == 1,
        generation_batch=run.descriptor.generation_batch,
        max_concurrency=run.descriptor.max_concurrency,
        tokens_per_step=_median_of(stable, "tokens/generated"),
    )


def _to_measurement(label, cfg, throughputs, sweep_dir, budget: float | None) -> ConfigMeasurement:
    stt = cfg.samples_to_target
    runs = throughputs.get(label)
    if not runs:
        raise UserError(
            f"label {label!r}",
            f"has no run with timed step records in {sweep_dir}",
            "give the sweep directory that holds this analysis's runs",
        )
    stable = [r for r in runs if not r.warmup_only]
    if not stable:
        warnings.warn(f"{label}: no run has a step after the warm-up step, so its q includes warm-up (the first step "
                      "carries allocation and compilation): run longer to measure it", DataWarning)
    runs = stable or runs
    seed_times = _seed_times(cfg, runs)
    reached = [t.log_samples for t in seed_times if t.reached]
    trained = cfg.samples_trained_per_seed
    return ConfigMeasurement(
        label=label,
        samples_to_target=None if stt.reached == 0 else math.exp(statistics.fmean(reached)) if reached else stt.mean,
        throughput_samples_per_s=math.exp(statistics.fmean(math.log(r.samples_per_s) for r in runs)),
        seed_times=seed_times,
        budget_samples=budget if budget is not None else max(trained) if trained else None,
        generation_batch=_agreed([r.generation_batch for r in runs]),
        max_concurrency=_agreed([r.max_concurrency for r in runs]),
        tokens_per_step=_mean_or_none([r.tokens_per_step for r in runs]),
        seeds_reached=stt.reached,
        seeds_censored=stt.censored,
        prompts_per_step=cfg.prompts_per_step,
        samples_per_prompt=cfg.samples_per_prompt,
        samples_per_step=cfg.samples_per_step,
        extra={
            "throughput_seeds": len(runs),
            "throughput_min_samples_per_s": min(r.samples_per_s for r in runs),
            "throughput_max_samples_per_s": max(r.samples_per_s for r in runs),
            "step_s": statistics.fmean(r.step_s for r in runs),
            "generate_s": _mean_or_none([r.generate_s for r in runs]),
            "train_s": _mean_or_none([r.train_s for r in runs]),
            "time_to_target_realized": cfg.time_to_target_realized,
            "throughput_warmup_only": not stable,
            "stopped": cfg.stopped,
        },
    )


def _seed_times(cfg, runs: list[RunThroughput]) -> tuple[SeedTime, ...]:
    """Every seed's ln N* (or ln of the samples it trained, when censored) and its own ln q, in analysis.json's seed
    order; () when a seed lacks either (an analysis.json older than the per-seed lists, an untimed run, N* = 0)."""
    q_by_seed = {r.seed: r.samples_per_s for r in runs}
    if cfg.n_star_per_seed is None or cfg.samples_trained_per_seed is None:
        return ()
    gaps = cfg.crossing_gap_per_seed or [None] * len(cfg.seeds)
    times = []
    for seed, n_star, trained, gap in zip(cfg.seeds, cfg.n_star_per_seed, cfg.samples_trained_per_seed, gaps):
        value = n_star if n_star is not None else trained
        if seed not in q_by_seed or not value or value <= 0:
            return ()
        times.append(SeedTime(math.log(value), math.log(q_by_seed[seed]), n_star is not None,
                              resolution_variance(gap, n_star)))
    return tuple(times)


def _agreed(values: list[int | None]) -> int | None:
    """The largest of the seeds' values (the memory check must hold for every seed); None if none says."""
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _find_profile(sweep_dir: Path, given: Path | None) -> Path | None:
    if given is not None:
        if not Path(given).is_file():
            raise UserError(f"--generation-profile {given}", "is not a file", "save `profile generation --json` to it")
        return Path(given)
    default = sweep_dir / GENERATION_PROFILE_FILE
    return default if default.is_file() else None


def _is_positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _number_or_none(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _median_of(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if _number_or_none(r.get(key)) is not None]
    return statistics.median(values) if values else None


def _mean_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None
