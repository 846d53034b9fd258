"""Everything the report shows, gathered once: the plan (through `plan.cli.make_plan`, the same code path as `batchscale
plan`, so the two never disagree), analysis.json, the optional generation and training profiles, and the machine the runs
ran on (from their summary.json files).

Reads JSON files only; imports neither torch nor matplotlib. Profiles are optional: when none is given, the usual names
inside the sweep directory are tried (see `TRAINING_PROFILE_CANDIDATES`; the generation profile is found by `load_sweep`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import read_json_object
from batchscale.plan.cli import make_plan, plan_to_json

TRAINING_PROFILE_CANDIDATES = ("training_profile.json", "profiles/training.json", "profile/training.json")
# summary.json keys that describe where a run ran (trainer.py writes most of them; `cpu` and `device` when present).
MACHINE_KEYS = ("cpu", "machine", "device", "torch_threads", "torch_version", "batchscale_version", "model_params")


@dataclass(frozen=True)
class ReportInputs:
    sweep_dir: Path
    plan: dict  # plan_to_json's document: reference, best, explanation, regime, rows, target, throughput_method, ...
    analysis: dict  # analysis.json
    analysis_path: Path
    generation_profile: dict | None
    generation_profile_path: Path | None
    training_profile: dict | None
    training_profile_path: Path | None
    machine: dict[str, list] = field(default_factory=dict)  # summary.json key -> distinct values over runs
    runs_total: int = 0
    runs_with_summary: int = 0


def gather_inputs(sweep_dir: Path, generation_profile: Path | None, training_profile: Path | None) -> ReportInputs:
    """Plan the sweep and read what the report needs; raises UserError (before anything is written) on bad input."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise UserError(f"sweep directory {sweep_dir}", "does not exist", "give the directory `batchscale sweep` wrote")
    decision, explanation, regime, source = make_plan(path=sweep_dir, generation_profile=generation_profile)
    plan = plan_to_json(decision, explanation, regime, source)
    analysis_path = Path(source["analysis"])
    generation_path = Path(source["generation_profile"]) if source.get("generation_profile") else None
    training_path = find_training_profile(sweep_dir, training_profile)
    machine, total, with_summary = read_machine(sweep_dir / "runs")
    return ReportInputs(
        sweep_dir=sweep_dir,
        plan=plan,
        analysis=read_json_object(analysis_path),
        analysis_path=analysis_path,
        generation_profile=read_profile(generation_path, "--generation-profile") if generation_path else None,
        generation_profile_path=generation_path,
        training_profile=read_profile(training_path, "--training-profile") if training_path else None,
        training_profile_path=training_path,
        machine=machine,
        runs_total=total,
        runs_with_summary=with_summary,
    )


def find_training_profile(sweep_dir: Path, given: Path | None) -> Path | None:
    if given is not None:
        if not Path(given).is_file():
            raise UserError(f"--training-profile {given}", "is not a file", "save `profile training --json` to it")
        return Path(given)
    return next((sweep_dir / n for n in TRAINING_PROFILE_CANDIDATES if (sweep_dir / n).is_file()), None)


def read_profile(path: Path, option: str) -> dict:
    """A profile JSON object with a non-empty `rows` list of objects."""
    profile = read_json_object(path)
    rows = profile.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise UserError(f"{option} {path} rows", "must be a non-empty list of objects", "regenerate it with --json")
    return profile


def read_machine(runs_dir: Path) -> tuple[dict[str, list], int, int]:
    """Distinct values of MACHINE_KEYS over the runs' summary.json files; (values, runs, runs with a summary)."""
    values: dict[str, list] = {}
    run_dirs = sorted(p.parent for p in runs_dir.glob("*/run.json")) if runs_dir.is_dir() else []
    with_summary = 0
    for run_dir in run_dirs:
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue  # unfinished or imported without one: counted, not fatal
        if not isinstance(summary, dict):
            continue
        with_summary += 1
        for key in MACHINE_KEYS:
            if summary.get(key) is not None and summary[key] not in values.setdefault(key, []):
                values[key].append(summary[key])
    return {k: v for k, v in values.items() if v}, len(run_dirs), with_summary
