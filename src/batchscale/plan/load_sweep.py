"""Read a sweep directory for the plan: N* per label from `analysis.json`, throughput q per label from the runs' own logs.

Sources:
- `DIR/analysis.json` (or `DIR/analysis/analysis.json`), written by `batchscale analyze`: the reference, the target, per label
  P, G, B_train and samples_to_target {mean, reached, censored}, and `b_simple` (the critical training batch).
- `DIR/runs/<label>__s<seed>/run.json` + `metrics.jsonl` (the run-log contract in DESIGN.md), grouped by run.json's `label`.
- optionally a generation profile JSON (`batchscale profile generation --json`): its `knee` gives the critical generation
  batch, preferring `b_90`, else `doubling_knee`. Looked up at `--generation-profile`, else `DIR/generation_profile.json`,
  `DIR/profiles/generation.json`, `DIR/profile/generation.json`.

Throughput estimator (documented choice; the paper asks for "stable end-to-end throughput"): per seed,
q_seed = samples_per_step / median(time/step) over step records after the first (the first step carries warm-up: allocator,
kernel selection, cache growth), with samples_per_step from run.json; a run with a single step record uses that step. The
median resists stragglers (a checkpoint write, a long-response step). q = mean of q_seed over seeds. Eval time is not in
time/step, so q is the training loop's throughput, as the paper's q is. Median time/generate and time/train per step are
passed through so the table can show where the time goes.

N* is analysis.json's mean over the seeds that reached the target; rN is recomputed here as a ratio of those means (which may
differ from analysis.json's own r_n if that was computed otherwise) so that T/T_ref = rN / (q/q_ref) holds exactly.
Every configuration that has runs is feasible (it ran on this machine); an analysis.json config may set `"feasible": false`.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import read_json_object
from batchscale.plan.decide import ConfigMeasurement

ANALYSIS_CANDIDATES = ("analysis.json", "analysis/analysis.json")
PROFILE_CANDIDATES = ("generation_profile.json", "profiles/generation.json", "profile/generation.json")
KNEE_KEYS = ("b_90", "doubling_knee")
THROUGHPUT_METHOD = "samples_per_step / median(time/step) over steps after the first, mean over seeds"


@dataclass(frozen=True)
class SweepInputs:
    measurements: list[ConfigMeasurement]
    reference: str
    target: float | None
    critical_training_batch_samples: float | None  # analysis.json b_simple
    critical_generation_batch_samples: float | None  # generation profile knee
    analysis_path: Path
    profile_path: Path | None


@dataclass(frozen=True)
class RunThroughput:
    samples_per_s: float
    step_s: float  # median time/step after warm-up
    generate_s: float | None  # median time/generate
    train_s: float | None  # median time/train
    steps_used: int


def load_sweep(sweep_dir: Path, reference: str | None = None, profile_path: Path | None = None) -> SweepInputs:
    """Combine analysis.json and the runs' timings into one measurement per analysed label."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise UserError(f"sweep directory {sweep_dir}", "does not exist", "give the directory `batchscale sweep` wrote")
    analysis_path = _find_analysis(sweep_dir)
    analysis = read_json_object(analysis_path)
    configs = analysis.get("configs")
    if not isinstance(configs, dict) or not configs:
        raise UserError(f"{analysis_path} configs", "is missing or empty", "rerun `batchscale analyze` on the sweep")
    reference = reference if reference is not None else analysis.get("reference")
    if not isinstance(reference, str):
        raise UserError(f"{analysis_path} reference", "is missing", "pass --reference LABEL")
    throughputs = measure_sweep_throughput(sweep_dir / "runs")
    # small batches first, as in analysis: a table reads along the batch axis
    ordered = sorted(configs.items(), key=lambda item: (item[1].get("samples_per_step") or 0, item[0]))
    measurements = [_to_measurement(label, cfg, throughputs, analysis_path, sweep_dir) for label, cfg in ordered]
    profile_path = _find_profile(sweep_dir, profile_path)
    return SweepInputs(
        measurements=measurements,
        reference=reference,
        target=_number_or_none(analysis.get("target")),
        critical_training_batch_samples=_number_or_none(_unwrap(analysis.get("b_simple"))),
        critical_generation_batch_samples=read_generation_knee(profile_path) if profile_path else None,
        analysis_path=analysis_path,
        profile_path=profile_path,
    )


def measure_sweep_throughput(runs_dir: Path) -> dict[str, list[RunThroughput]]:
    """Per label (from run.json), the throughput of each of its runs (seeds) that has timed step records."""
    by_label: dict[str, list[RunThroughput]] = {}
    if not runs_dir.is_dir():
        return by_label
    for run_json in sorted(runs_dir.glob("*/run.json")):
        descriptor = read_json_object(run_json)
        label = descriptor.get("label")
        measured = measure_run_throughput(run_json.parent, _number_or_none(descriptor.get("samples_per_step")))
        if label is not None and measured is not None:
            by_label.setdefault(str(label), []).append(measured)
    return by_label


def measure_run_throughput(run_dir: Path, samples_per_step: float | None) -> RunThroughput | None:
    """q for one run: samples_per_step / median(time/step), dropping the first (warm-up) step. None if nothing is timed."""
    steps = _read_step_records(run_dir / "metrics.jsonl")
    if not steps:
        return None
    if samples_per_step is None:  # fall back to the cumulative-samples column
        samples_per_step = steps[-1]["samples"] / steps[-1]["step"]
    stable = steps[1:] if len(steps) > 1 else steps
    step_s = statistics.median(s["time/step"] for s in stable)
    if not step_s > 0:
        return None
    return RunThroughput(
        samples_per_s=samples_per_step / step_s,
        step_s=step_s,
        generate_s=_median_of(stable, "time/generate"),
        train_s=_median_of(stable, "time/train"),
        steps_used=len(stable),
    )


def read_generation_knee(path: Path) -> float | None:
    """The critical generation batch (samples in flight) from a generation profile's `knee`; None when it has none."""
    knee = read_json_object(path).get("knee")
    if not isinstance(knee, dict):
        return None
    for key in KNEE_KEYS:
        value = _number_or_none(_unwrap(knee.get(key)))
        if value is not None and value > 0:
            return value
    return None


def _to_measurement(label, cfg, throughputs, analysis_path, sweep_dir) -> ConfigMeasurement:
    where = f"{analysis_path} configs[{label!r}]"
    stt = cfg.get("samples_to_target")
    if not isinstance(stt, dict):
        raise UserError(f"{where}.samples_to_target", "is missing", "rerun `batchscale analyze` on the sweep")
    runs = throughputs.get(label)
    if not runs:
        raise UserError(
            f"label {label!r}",
            f"has no run with timed step records under {sweep_dir / 'runs'} (run.json label {label!r}, metrics.jsonl)",
            "give the sweep directory that holds this analysis's runs",
        )
    mean = _number_or_none(stt.get("mean"))
    reached = _int_or_none(stt.get("reached"))
    ci_low, ci_high = _number_or_none(stt.get("ci_low")), _number_or_none(stt.get("ci_high"))
    return ConfigMeasurement(
        label=label,
        samples_to_target=mean if reached != 0 else None,
        throughput_samples_per_s=statistics.fmean(r.samples_per_s for r in runs),
        feasible=bool(cfg.get("feasible", True)),
        seeds_reached=reached,
        seeds_censored=_int_or_none(stt.get("censored")) or 0,
        prompts_per_step=_int_or_none(cfg.get("prompts_per_step")),
        samples_per_prompt=_int_or_none(cfg.get("samples_per_prompt")),
        samples_per_step=_int_or_none(cfg.get("samples_per_step")),
        samples_to_target_ci=(ci_low, ci_high) if ci_low is not None and ci_high is not None else None,
        extra={
            "throughput_seeds": len(runs),
            "throughput_min_samples_per_s": min(r.samples_per_s for r in runs),
            "throughput_max_samples_per_s": max(r.samples_per_s for r in runs),
            "step_s": statistics.fmean(r.step_s for r in runs),
            "generate_s": _mean_or_none([r.generate_s for r in runs]),
            "train_s": _mean_or_none([r.train_s for r in runs]),
        },
    )


def _read_step_records(metrics_path: Path) -> list[dict]:
    """Step records with a positive time/step, one per step (the last record wins if a resumed run repeated a step)."""
    if not metrics_path.is_file():
        return []
    by_step: dict[int, dict] = {}
    for line in metrics_path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line from a killed run
        if isinstance(record, dict) and record.get("kind") == "step" and _is_positive(record.get("time/step")):
            if isinstance(record.get("step"), int) and _is_positive(record.get("samples")):
                by_step[record["step"]] = record
    return [by_step[k] for k in sorted(by_step)]


def _find_analysis(sweep_dir: Path) -> Path:
    for name in ANALYSIS_CANDIDATES:
        if (sweep_dir / name).is_file():
            return sweep_dir / name
    raise UserError(
        f"{sweep_dir}", "holds no analysis.json", f"run `batchscale analyze {sweep_dir}` first, or plan from --table"
    )


def _find_profile(sweep_dir: Path, given: Path | None) -> Path | None:
    if given is not None:
        if not Path(given).is_file():
            raise UserError(f"--generation-profile {given}", "is not a file", "save `profile generation --json` to it")
        return Path(given)
    return next((sweep_dir / n for n in PROFILE_CANDIDATES if (sweep_dir / n).is_file()), None)


def _unwrap(value):
    """Knees and B_simple may come as a bare number or as {"value": x} / {"concurrency": x} / {"b_simple": x}."""
    if isinstance(value, dict):
        for key in ("value", "concurrency", "samples", "b_simple", "estimate"):
            if key in value:
                return value[key]
        return None
    return value


def _is_positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _number_or_none(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _int_or_none(x) -> int | None:
    value = _number_or_none(x)
    return int(value) if value is not None else None


def _median_of(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if _number_or_none(r.get(key)) is not None]
    return statistics.median(values) if values else None


def _mean_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None
