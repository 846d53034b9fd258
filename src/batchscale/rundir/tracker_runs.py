"""`<run>/trackers.json`: which experiment-tracker runs mirror this run (telemetry.trackers), so that a resumed run
replaces its own tracker runs rather than adding a second copy of its records.

    {"schema_version": 1, "runs": {"mlflow": {"run_id": "...", "tracking_uri": "file:..."},
                                   "trackio": {"project": "...", "run_id": "..."}}}

Every value is a string; anything else is dropped when read (the file is input like any other). A tracker whose files
live inside the run directory (TensorBoard's tensorboard/, W&B offline's wandb/) needs no entry.
"""

from __future__ import annotations

from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import read_json_object, write_json_atomic

TRACKERS_FILE = "trackers.json"
VERSION = 1


def read_tracker_runs(run_dir: Path) -> dict[str, dict[str, str]]:
    """Tracker name -> its run's identifiers (strings only); {} when there is no readable file."""
    path = Path(run_dir) / TRACKERS_FILE
    if not path.is_file():
        return {}
    try:
        runs = read_json_object(path).get("runs")
    except UserError:
        return {}  # a torn or foreign file: the resumed run then starts its tracker runs afresh
    if not isinstance(runs, dict):
        return {}
    return {name: {k: v for k, v in ids.items() if isinstance(k, str) and isinstance(v, str)}
            for name, ids in runs.items() if isinstance(name, str) and isinstance(ids, dict)}


def write_tracker_runs(run_dir: Path, runs: dict[str, dict[str, str]]) -> None:
    write_json_atomic(Path(run_dir) / TRACKERS_FILE, {"schema_version": VERSION, "runs": runs})
