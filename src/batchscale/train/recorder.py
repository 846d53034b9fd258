"""Where a run's records go: the one object that owns the record's sinks, so the training loop reads straight down.

A record is checked before anything is written (`train.health.check_finite_record`: nothing non-finite reaches a
writer, the run stops unfinished there), then appended to metrics.jsonl (`rundir.RunLog`), kept in the loop's list
(the racing rule and the summary read it), mirrored to the run's experiment trackers (`telemetry.trackers`; a tracker
that fails is warned about once) and handed to the caller's callback (the progress bar). An eval's examples go to
samples.jsonl (`rundir.samples`) and to the trackers that hold tables. Warnings (a tracker's failure, a reward
collapse) are printed and kept as the run's notes for summary.json.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from batchscale.config import Config, resolved_config, run_descriptor, tracker_names
from batchscale.rundir import RunLog, run_dir_name
from batchscale.rundir.run import sweep_of
from batchscale.rundir.samples import SamplesLog, read_samples, sample_rows
from batchscale.telemetry.trackers.base import DEFAULT_PROJECT, TrackedRun
from batchscale.telemetry.trackers.mirror import TrackerMirror, open_trackers
from batchscale.train.checkpointing import LoopState
from batchscale.train.health import check_finite_record
from batchscale.train.state import TrainingState


class Recorder:
    """The sinks of one run's records: run log, samples file, trackers, the caller's callback, the finiteness check.
    `state` gives the config and its plan, derived once (train.state); `loop` (train.checkpointing.LoopState) holds
    the records and notes so far, and the training time before this process (a resumed run's `wall_s` continues from
    it). Close it however the run ends."""

    def __init__(self, run_dir: Path, state: TrainingState, loop: LoopState, emit: Callable[[dict], None],
                 log: Callable[[str], None], resumed: bool = False):
        cfg, plan = state.cfg, state.plan
        self.descriptor, resolved = run_descriptor(cfg, plan), resolved_config(cfg, plan)
        self.lr = plan.lr
        self.loop, self.emit, self.log = loop, emit, log
        self.runlog = RunLog(run_dir, self.descriptor, resolved)
        self.samples_log = SamplesLog(run_dir)
        self.mirror = open_run_trackers(run_dir, cfg, resolved, self.warn, resumed, loop.records)
        self.started = time.perf_counter() - loop.wall_s

    def wall_s(self) -> float:
        """Seconds of training since the run started, the time before a resume included."""
        return time.perf_counter() - self.started

    def warn(self, message: str) -> None:
        self.loop.notes.append(message)
        self.log(f"warning: {message}")

    def write(self, record: dict) -> None:
        check_finite_record(record, self.lr)  # nothing non-finite reaches the writer: the run stops unfinished here
        self.runlog.write(record)
        self.loop.records.append(record)
        self.mirror.log(record)
        self.emit(record)

    def write_samples(self, step: int, examples: list) -> None:
        rows = sample_rows(step, self.loop.samples, examples)
        self.samples_log.write(rows)
        self.mirror.log_samples(step, rows)

    def close(self) -> None:
        """The log keeps what was written; without a summary the run reads as unfinished."""
        self.runlog.close()
        self.samples_log.close()
        self.mirror.close()

    def finish(self, summary) -> None:
        self.runlog.finish(summary)


def open_run_trackers(run_dir: Path, cfg: Config, resolved: dict, warn: Callable[[str], None], resumed: bool,
                      records: list[dict]) -> TrackerMirror:
    """The run's trackers (telemetry.trackers), named after its label and seed and grouped by its sweep, holding its
    resolved config (`config.resolved_config`); a resumed run's replace the interrupted run's tracker runs with the
    records (and samples) kept."""
    sweep, label = sweep_of(run_dir), resolved["derived"]["label"]
    tracked = TrackedRun(run_dir=Path(run_dir), home=sweep or Path(run_dir).absolute().parent,
                         name=run_dir_name(label, cfg.run.seed), group=label,
                         project=sweep.name if sweep else DEFAULT_PROJECT, sweep=sweep.name if sweep else None,
                         config=resolved)
    samples = read_samples(run_dir) if resumed else []
    return open_trackers(tracker_names(cfg.run), tracked, warn, resumed, records, samples)
