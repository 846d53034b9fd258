"""Experiment trackers that mirror a run's records: `run.trackers = ["tensorboard", "wandb", "mlflow", "trackio"]`
(any subset; `run.tensorboard = true` is "tensorboard" in the list). metrics.jsonl stays the record of truth; a
tracker is a view of it in the dashboard a user already opens.

    base.py                  TrackedRun (name, group, project, config), the Tracker interface, what is logged
    mirror.py                open_trackers: one TrackerMirror that fans records out, warns once about a tracker that
                             fails and goes on training without it, and replaces a resumed run's tracker runs
    tensorboard_tracker.py   <run>/tensorboard/ event files (torch's SummaryWriter)
    wandb_tracker.py         a W&B run, offline (<run>/wandb/) unless WANDB_MODE says otherwise
    mlflow_tracker.py        an MLflow run (MLFLOW_TRACKING_URI, else a file store beside the run or its sweep)
    trackio_tracker.py       a trackio run in trackio's local store (TRACKIO_DIR)

This module names them and checks, without importing them, that their libraries are installed: each library is
imported only by its tracker, and only when that tracker is enabled (wandb and mlflow take seconds to import).
"""

from __future__ import annotations

import importlib.util

from batchscale.errors import UserError

# tracker -> (the module its library is imported as, the batchscale extra that installs it)
TRACKER_LIBRARIES = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
    "trackio": ("trackio", "trackio"),
}
TRACKER_NAMES = tuple(TRACKER_LIBRARIES)


def missing_library(name: str) -> str | None:
    """The module tracker `name` needs, when it is not installed; None when it is."""
    module = TRACKER_LIBRARIES[name][0]
    try:
        found = importlib.util.find_spec(module) is not None  # finds without importing
    except (ImportError, ValueError):
        found = False
    return None if found else module


def check_trackers_installed(names: list[str], field: str = "run.trackers") -> None:
    """A UserError naming the extra to install for the first enabled tracker whose library is missing."""
    for name in names:
        if (module := missing_library(name)) is not None:
            extra = TRACKER_LIBRARIES[name][1]
            raise UserError(field, f"the {name} tracker needs the {module} package, which is not installed",
                            f"pip install 'batchscale[{extra}]', or remove {name!r} from {field}")
