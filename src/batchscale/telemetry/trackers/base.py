"""What every tracker logs, and the interface each implements.

A tracker mirrors every record of metrics.jsonl with the same keys: each number of the record (`samples`, the
cumulative responses, among them; `kind` and `step` are not values), at the record's `step`. The paper's axis is
samples, not optimizer steps (a larger batch takes fewer steps for the same samples), so each tracker also plots
against samples, the way it supports: W&B's `define_metric(step_metric="samples")` (every chart's x-axis is samples),
TensorBoard and MLflow a second set of series under `by_samples/<key>` whose step is the record's samples (their x-axis
is always the integer step), trackio none (it plots against step; samples is a logged value). An eval
record and the step record it follows share their step; trackers that keep one row per step (W&B) merge them, the
eval's `wall_s` replacing the step's. The run's resolved config is its parameters, its label (shared by a
configuration's seeds) its group, and a sweep's runs share a project (W&B project, MLflow experiment, trackio
project) named after the sweep's directory. Trackers that hold tables also get each eval's samples (rundir.samples)
under `eval/examples`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from batchscale.rundir.samples import SampleRow

DEFAULT_PROJECT = "batchscale"  # the project of a run outside a sweep
SAMPLES_KEY = "eval/examples"  # the table of an eval's samples
SAMPLE_COLUMNS = ("step", "samples", "prompt", "response", "answer", "reward", "correct")
NOT_VALUES = ("kind", "step")


@dataclass(frozen=True)
class TrackedRun:
    run_dir: Path  # where the run is being written (a sweep's staging directory, until it finishes)
    home: Path  # the directory that holds the run: its sweep's, or the run directory's parent
    name: str  # <label>__s<seed>, the run directory's name once in place
    group: str  # the label
    project: str  # the sweep's directory name, or DEFAULT_PROJECT
    sweep: str | None  # the sweep's directory name, None outside a sweep
    config: dict  # the resolved config (config.json)

    @property
    def final_dir(self) -> Path:
        """Where the run directory will be once finished: a sweep's run moves from its staging directory to
        runs/<name> beside it; any other run is written in place."""
        return self.run_dir if self.sweep is None else self.run_dir.parent / self.name


BY_SAMPLES = "by_samples/"  # TensorBoard's and MLflow's series against samples (module docstring)


def by_samples(record: dict) -> tuple[int, dict[str, float]] | None:
    """(samples, the record's numbers under by_samples/<key>) for the trackers whose x-axis is the step; None for a
    record without cumulative samples."""
    samples = record.get("samples")
    if not isinstance(samples, int) or isinstance(samples, bool):
        return None
    return samples, {BY_SAMPLES + key: value for key, value in scalars(record).items() if key != "samples"}


def scalars(record: dict) -> dict[str, float]:
    """The record's numbers under their own keys (booleans, nulls and strings are not values)."""
    return {key: value for key, value in record.items()
            if key not in NOT_VALUES and isinstance(value, (int, float)) and not isinstance(value, bool)}


def sample_table(rows: list[SampleRow]) -> list[list]:
    """One eval's samples as table rows, in SAMPLE_COLUMNS order."""
    return [[getattr(row, column) for column in SAMPLE_COLUMNS] for row in rows]


def flatten_config(data: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}: the dotted keys `--set` takes."""
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(flatten_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def param_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class Tracker:
    """One tracker's run. The constructor opens it (`resume`: replace the run this run directory had, named by
    `previous`, the ids `ids` returned then); the mirror then replays the records kept so far, so a resumed run's
    tracker run holds each record once."""

    holds_tables = False
    warning: str | None = None  # what the user should know about how the run was opened (said once, at the start)

    def log(self, record: dict) -> None:
        raise NotImplementedError

    def log_samples(self, step: int, rows: list[SampleRow]) -> None:
        """An eval's samples, for trackers that hold tables."""

    def close(self) -> None:
        """Flush and end the tracker's run."""

    def where(self) -> str:
        """Where it wrote and how to open it, for the run's last line ("" when there is nothing to say)."""
        return ""

    @property
    def ids(self) -> dict[str, str]:
        """What finds this tracker's run again on resume (rundir.tracker_runs); {} when its files are the run's."""
        return {}
