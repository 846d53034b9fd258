"""Weights & Biases: one W&B run per batchscale run, offline unless the user configured otherwise (WANDB_MODE), in
`<run>/wandb/` (`wandb sync <run>/wandb/offline-run-*` uploads it later). Project: WANDB_PROJECT, else the sweep's
name; group: the label; name: <label>__s<seed>; tags: the sweep; config: the resolved config. W&B keeps one row per
step, so an eval joins the row of the step it follows; every chart's x-axis is `samples` (define_metric), the step
stays W&B's own step. Each eval's samples are a wandb.Table under `eval/examples`.

Resume: an offline run's files are the run directory's own, so they are removed and the kept records replayed into
a new offline run. An online run cannot be taken back: the resumed run is a new W&B run in the same group, replayed
from the kept records, and a warning says that the interrupted one stays.
"""

from __future__ import annotations

import os
import shutil

from batchscale.rundir.samples import SampleRow
from batchscale.telemetry.trackers.base import SAMPLE_COLUMNS, SAMPLES_KEY, Tracker, TrackedRun, sample_table, scalars

WANDB_DIR = "wandb"
OFFLINE_MODES = ("offline", "dryrun")
MAX_TAG_LENGTH = 64  # W&B refuses longer tags


class WandbTracker(Tracker):
    holds_tables = True

    def __init__(self, run: TrackedRun, resume: bool, previous: dict[str, str]):
        import wandb

        user_mode = os.environ.get("WANDB_MODE")
        wandb_dir = run.run_dir / WANDB_DIR
        if resume and (user_mode or "offline") in OFFLINE_MODES:
            shutil.rmtree(wandb_dir, ignore_errors=True)
        wandb_dir.mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or run.project, group=run.group, name=run.name,
            tags=[run.sweep[:MAX_TAG_LENGTH]] if run.sweep else None, config=run.config, dir=str(run.run_dir),
            mode=None if user_mode else "offline",  # None: wandb reads WANDB_MODE itself
            reinit="create_new",  # a sweep's worker trains runs one after another in one process
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))
        self.mode = self._run.settings.mode
        self._offline_dir = run.final_dir / WANDB_DIR
        self._run.define_metric("samples")
        self._run.define_metric("*", step_metric="samples")  # the paper's axis (base.py)
        if resume and self.mode not in OFFLINE_MODES and previous.get("id"):
            self.warning = (f"W&B is {self.mode}: the interrupted run's W&B run {previous['id']} stays; the resumed "
                            f"run is the new W&B run {self._run.id}")

    def log(self, record: dict) -> None:
        self._run.log(scalars(record), step=record["step"])

    def log_samples(self, step: int, rows: list[SampleRow]) -> None:
        table = self._wandb.Table(columns=list(SAMPLE_COLUMNS), data=sample_table(rows))
        self._run.log({SAMPLES_KEY: table}, step=step)

    def close(self) -> None:
        self._run.finish()

    def where(self) -> str:
        if self.mode in OFFLINE_MODES:
            return f"wandb offline: `wandb sync {self._offline_dir}/offline-run-*` uploads it"
        return f"wandb: {self._run.url or self._run.id}"

    @property
    def ids(self) -> dict[str, str]:
        return {"id": self._run.id, "mode": str(self.mode)}
