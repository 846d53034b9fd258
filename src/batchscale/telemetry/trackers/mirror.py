"""One mirror for a run's trackers: every record and every eval's samples go to each enabled tracker, in the order
metrics.jsonl and samples.jsonl hold them.

A tracker never stops training. One that fails to open, or raises while logging, is warned about once (the warning
also goes into summary.json's warnings) and mirrors nothing more of this run; metrics.jsonl is complete regardless.

Resume: the records kept after the cut back to the checkpoint are replayed into a fresh tracker run that replaces
the interrupted process's one (each tracker says how in its module), so no record appears twice, and none written
after the checkpoint by the process that died survives.
"""

from __future__ import annotations

import importlib
from collections import defaultdict
from typing import Callable

from batchscale.rundir.samples import SampleRow
from batchscale.rundir.tracker_runs import TRACKERS_FILE, read_tracker_runs, write_tracker_runs
from batchscale.telemetry.trackers.base import Tracker, TrackedRun

TRACKER_CLASSES = {  # name -> (module, class), imported only when enabled
    "tensorboard": ("batchscale.telemetry.trackers.tensorboard_tracker", "TensorBoardTracker"),
    "wandb": ("batchscale.telemetry.trackers.wandb_tracker", "WandbTracker"),
    "mlflow": ("batchscale.telemetry.trackers.mlflow_tracker", "MlflowTracker"),
    "trackio": ("batchscale.telemetry.trackers.trackio_tracker", "TrackioTracker"),
}


class TrackerMirror:
    def __init__(self, trackers: dict[str, Tracker], warn: Callable[[str], None]):
        self.trackers = trackers
        self._warn = warn

    def _each(self, what: str, call: Callable[[Tracker], None], tables: bool = False) -> None:
        for name, tracker in list(self.trackers.items()):
            if tables and not tracker.holds_tables:
                continue
            try:
                call(tracker)
            except Exception as e:  # noqa: BLE001 - any failure of a tracker's library; training goes on
                del self.trackers[name]
                self._warn(f"the {name} tracker failed while {what} ({type(e).__name__}: {e}); it mirrors nothing "
                           "more of this run (metrics.jsonl is complete)")

    def log(self, record: dict) -> None:
        self._each(f"logging step {record['step']}", lambda tracker: tracker.log(record))

    def log_samples(self, step: int, rows: list[SampleRow]) -> None:
        if rows:
            self._each(f"logging the samples of step {step}", lambda t: t.log_samples(step, rows), tables=True)

    def replay(self, records: list[dict], samples: list[SampleRow]) -> None:
        """The records (and samples) a resumed run keeps, each eval's samples after its record."""
        by_step = defaultdict(list)
        for row in samples:
            by_step[row.step].append(row)
        for record in records:
            self.log(record)
            if record["kind"] == "eval":
                self.log_samples(record["step"], by_step.pop(record["step"], []))

    def close(self) -> None:
        self._each("closing its run", lambda tracker: tracker.close())

    def where(self) -> str:
        """One line naming where each tracker wrote and how to open it ("" without trackers)."""
        places = [place for tracker in self.trackers.values() if (place := tracker.where())]
        return "trackers: " + "; ".join(places) if places else ""


def open_tracker(name: str, run: TrackedRun, resume: bool, previous: dict[str, str]) -> Tracker:
    module, cls = TRACKER_CLASSES[name]
    return getattr(importlib.import_module(module), cls)(run, resume, previous)


def open_trackers(names: list[str], run: TrackedRun, warn: Callable[[str], None], resume: bool = False,
                  records: list[dict] = (), samples: list[SampleRow] = ()) -> TrackerMirror:
    """Open each named tracker for `run` (a resumed one replaces its earlier tracker runs and replays `records` and
    `samples`, what the run keeps), and record in trackers.json what finds their runs again."""
    previous = read_tracker_runs(run.run_dir) if resume else {}
    trackers = {}
    for name in names:
        try:
            trackers[name] = open_tracker(name, run, resume, previous.get(name, {}))
        except Exception as e:  # noqa: BLE001 - a tracker that cannot start never stops the run
            warn(f"the {name} tracker could not start ({type(e).__name__}: {e}); the run goes on without it "
                 "(metrics.jsonl is complete)")
    for tracker in trackers.values():
        if tracker.warning:
            warn(tracker.warning)
    ids = {name: tracker.ids for name, tracker in trackers.items() if tracker.ids}
    if ids or (run.run_dir / TRACKERS_FILE).is_file():
        write_tracker_runs(run.run_dir, ids)
    mirror = TrackerMirror(trackers, warn)
    mirror.replay(list(records), list(samples))
    return mirror
