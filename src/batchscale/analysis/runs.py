"""Read run directories (DESIGN.md "The run log") and group them by configuration label.

A run directory holds `run.json` (flat descriptor) and `metrics.jsonl` (one record per line, kinds `step` and `eval`).
Accepted inputs: one run directory, a directory of run directories, or a sweep directory with `runs/<label>__s<seed>/`.

Tolerances, and why:
- the last line of metrics.jsonl may be cut off by a crash mid-write: it is dropped with a warning; a broken line anywhere
  else means the file is corrupt and is a UserError;
- a resumed run may log the same (kind, step) twice: the last record wins, so a restart never double-counts;
- sibling directories without run.json (logs, plots) are skipped with a warning.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from batchscale.errors import UserError

REQUIRED_RUN_KEYS = ("label", "seed", "samples_per_step")


class AnalysisWarning(UserWarning):
    """Something the user should know about the input or the result, but that does not stop the analysis."""


@dataclass
class Run:
    """One run: its descriptor and its records, each list sorted by step."""

    path: Path
    meta: dict
    steps: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)

    @property
    def label(self) -> str:
        return str(self.meta["label"])

    @property
    def seed(self) -> int:
        return int(self.meta["seed"])

    @property
    def samples_per_step(self) -> int:
        return int(self.meta["samples_per_step"])


def find_run_dirs(path: Path) -> list[Path]:
    """Run directories under `path`: itself if it holds run.json, else the children of `path/runs` or of `path`."""
    path = Path(path)
    if not path.is_dir():
        raise UserError("path", f"{path} is not a directory", "pass a run directory or a sweep directory")
    if (path / "run.json").is_file():
        return [path]
    parent = path / "runs" if (path / "runs").is_dir() else path
    run_dirs = []
    # hidden directories are not runs: a sweep stages unfinished runs in runs/.<name>.partial/
    for child in sorted(p for p in parent.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (child / "run.json").is_file():
            run_dirs.append(child)
        else:
            warnings.warn(f"skipping {child}: no run.json", AnalysisWarning, stacklevel=2)
    if not run_dirs:
        raise UserError(
            "path",
            f"no run directories (with run.json) found in {parent}",
            "pass a run directory, a directory of run directories, or a sweep directory holding runs/<label>__s<seed>/",
        )
    return run_dirs


def read_metrics(metrics_path: Path) -> list[dict]:
    """Records of metrics.jsonl in file order; a truncated last line is dropped with a warning."""
    if not metrics_path.is_file():
        raise UserError(str(metrics_path), "metrics.jsonl is missing", "point analyze at finished or running run dirs")
    lines = metrics_path.read_text().splitlines()
    last_index = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i == last_index:
                warnings.warn(f"{metrics_path}: dropping truncated last line", AnalysisWarning, stacklevel=2)
                continue
            raise UserError(
                str(metrics_path), f"line {i + 1} is not valid JSON", "repair or remove the run directory"
            ) from None
    return records


def read_run(run_dir: Path) -> Run:
    """Read one run directory; validates the run.json keys analysis needs."""
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except json.JSONDecodeError as e:
        raise UserError(str(run_dir / "run.json"), f"not valid JSON ({e.msg})", "rewrite run.json") from None
    missing = [k for k in REQUIRED_RUN_KEYS if k not in meta]
    if missing:
        raise UserError(
            str(run_dir / "run.json"), f"missing keys {missing}", "write run.json as in DESIGN.md (label, seed, ...)"
        )
    if not (isinstance(meta["samples_per_step"], (int, float)) and meta["samples_per_step"] > 0):
        raise UserError(str(run_dir / "run.json"), "samples_per_step must be a positive number", "fix run.json")
    latest: dict[tuple[str, int], dict] = {}
    for record in read_metrics(run_dir / "metrics.jsonl"):
        if record.get("kind") in ("step", "eval") and "step" in record and "samples" in record:
            latest[(record["kind"], int(record["step"]))] = record  # last record wins (resumed runs)
    steps = sorted((r for (k, _), r in latest.items() if k == "step"), key=lambda r: r["step"])
    evals = sorted((r for (k, _), r in latest.items() if k == "eval"), key=lambda r: (r["samples"], r["step"]))
    return Run(path=run_dir, meta=meta, steps=steps, evals=evals)


def eval_score(record: dict) -> float | None:
    """The primary eval score of a record: `eval/accuracy`, else `eval/score`; None when absent or not finite."""
    for key in ("eval/accuracy", "eval/score"):
        value = record.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
    return None


def load_runs(path: Path) -> dict[str, list[Run]]:
    """All runs under `path` with at least one scored eval, grouped by label, seeds sorted. Raises if none remain."""
    by_label: dict[str, list[Run]] = {}
    for run_dir in find_run_dirs(path):
        run = read_run(run_dir)
        if not any(eval_score(r) is not None for r in run.evals):
            warnings.warn(f"skipping {run_dir}: no eval record with eval/accuracy or eval/score", AnalysisWarning)
            continue
        by_label.setdefault(run.label, []).append(run)
    if not by_label:
        raise UserError("path", f"no run under {path} has a scored eval record", "let runs reach their first eval")
    for label, runs in by_label.items():
        runs.sort(key=lambda r: r.seed)
        seeds = [r.seed for r in runs]
        if len(set(seeds)) != len(seeds):
            raise UserError(f"label {label}", f"seed repeated in {seeds}", "give each run of a label its own seed")
        batch_sizes = {r.samples_per_step for r in runs}
        if len(batch_sizes) != 1:
            raise UserError(
                f"label {label}", f"seeds disagree on samples_per_step {sorted(batch_sizes)}", "one label per config"
            )
    return dict(sorted(by_label.items()))
