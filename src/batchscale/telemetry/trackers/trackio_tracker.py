"""trackio: one trackio run per batchscale run in trackio's local store (TRACKIO_DIR, by default under the Hugging
Face cache; `trackio show` opens it). Project: the sweep's name; group: the label; name: <label>__s<seed>; config: the
resolved config. No dashboard is launched and no system metrics are logged. Each eval's samples are a trackio.Table
under `eval/examples`.

Resume: the kept records are replayed into a new trackio run. No trackio run is ever deleted (trackers.json is input
and may name a run that is not batchscale's): the interrupted run stays in the project beside the new one.
"""

from __future__ import annotations

import contextlib
import io

from batchscale.rundir.samples import SampleRow
from batchscale.telemetry.trackers.base import SAMPLE_COLUMNS, SAMPLES_KEY, Tracker, TrackedRun, sample_table, scalars


class TrackioTracker(Tracker):
    holds_tables = True

    def __init__(self, run: TrackedRun, resume: bool, previous: dict[str, str]):
        import trackio

        self._trackio = trackio
        self._project = run.project
        with contextlib.redirect_stdout(io.StringIO()):  # trackio prints where it logs and how to open a dashboard
            self._run = trackio.init(project=run.project, name=run.name, group=run.group, config=run.config,
                                     embed=False, auto_log_gpu=False, auto_log_cpu=False)

    def log(self, record: dict) -> None:
        self._run.log(scalars(record), step=record["step"])

    def log_samples(self, step: int, rows: list[SampleRow]) -> None:
        table = self._trackio.Table(columns=list(SAMPLE_COLUMNS), data=sample_table(rows))
        self._run.log({SAMPLES_KEY: table}, step=step)

    def close(self) -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            if self._trackio.context_vars.current_run.get() is self._run:
                self._trackio.finish()  # also forgets the run, which trackio would otherwise finish again at exit
            else:
                self._run.finish()

    @property
    def ids(self) -> dict[str, str]:
        return {"project": self._project, "run_id": str(self._run.id)}
