"""MLflow: one MLflow run per batchscale run, through MlflowClient (no global active run, so a process may train
several runs). Tracking URI: MLFLOW_TRACKING_URI, else a file store `file:<home>/mlruns` beside the run (in its
sweep's directory for a sweep: one store, one experiment per sweep). Experiment: MLFLOW_EXPERIMENT_NAME, else the
sweep's name; run name <label>__s<seed>; tags `batchscale.label` (the group) and `batchscale.sweep`; the resolved
config as params under its dotted keys. Each eval's samples join the table `eval_examples.json`, written whole in
`log_table`'s format (`{"columns", "data"}`, tagged as a table: `load_table` and the UI read it). log_table itself
is not used: it appends through pandas, which turns an answer like "117" into the number 117.

Resume: the kept records are replayed into a new MLflow run. No MLflow run is ever deleted: trackers.json is input
like any other and may name a run that is not batchscale's. The interrupted run is found again only if it is the one
batchscale created for this run: it carries the tag `batchscale.token` with the random token trackers.json stores
beside its id. That run alone is tagged `batchscale.superseded_by` (the new run's id) and ended as KILLED; any other
run trackers.json names is left untouched.
"""

from __future__ import annotations

import json
import os
import secrets
import time

from batchscale.rundir.samples import SampleRow
from batchscale.telemetry.trackers.base import (SAMPLE_COLUMNS, Tracker, TrackedRun, flatten_config, param_text,
                                                sample_table, scalars)

STORE_DIR = "mlruns"
TABLE_FILE = "eval_examples.json"
LOGGED_ARTIFACTS_TAG = "mlflow.loggedArtifacts"  # where log_table lists a run's tables
MAX_PARAMS_PER_BATCH = 100  # MLflow's log_batch limit
MAX_PARAM_LENGTH = 6000
TOKEN_TAG = "batchscale.token"  # what proves a run is the one batchscale created for this run
SUPERSEDED_TAG = "batchscale.superseded_by"


def tracking_uri(run: TrackedRun) -> str:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # log_table reads its table back: no bars
    if uri := os.environ.get("MLFLOW_TRACKING_URI"):
        return uri
    # MLflow 3 refuses a file store unless told it is wanted: it is, as the default that needs no database
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return (run.home / STORE_DIR).absolute().as_uri()


def experiment_id(client, name: str) -> str:
    from mlflow.exceptions import MlflowException

    if (found := client.get_experiment_by_name(name)) is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except MlflowException:  # another worker of the sweep created it first
        return client.get_experiment_by_name(name).experiment_id


class MlflowTracker(Tracker):
    holds_tables = True

    def __init__(self, run: TrackedRun, resume: bool, previous: dict[str, str]):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self._uri = tracking_uri(run)
        self._client = MlflowClient(tracking_uri=self._uri, registry_uri=self._uri)
        experiment = experiment_id(self._client, os.environ.get("MLFLOW_EXPERIMENT_NAME") or run.project)
        self._token = secrets.token_hex(16)
        tags = {"batchscale.label": run.group, TOKEN_TAG: self._token,
                **({"batchscale.sweep": run.sweep} if run.sweep else {})}
        self._run_id = self._client.create_run(experiment, run_name=run.name, tags=tags).info.run_id
        if resume and previous.get("run_id") and previous.get("token"):
            supersede(previous, self._uri, self._run_id)
        self._table: list[list] = []
        params = [Param(key, param_text(value)[:MAX_PARAM_LENGTH]) for key, value in flatten_config(run.config).items()]
        for start in range(0, len(params), MAX_PARAMS_PER_BATCH):
            self._client.log_batch(self._run_id, params=params[start:start + MAX_PARAMS_PER_BATCH])

    def log(self, record: dict) -> None:
        from mlflow.entities import Metric

        timestamp_ms = int(time.time() * 1000)
        metrics = [Metric(key, float(value), timestamp_ms, record["step"]) for key, value in scalars(record).items()]
        self._client.log_batch(self._run_id, metrics=metrics)

    def log_samples(self, step: int, rows: list[SampleRow]) -> None:
        if not self._table:
            self._client.set_tag(self._run_id, LOGGED_ARTIFACTS_TAG, json.dumps([{"path": TABLE_FILE, "type": "table"}]))
        self._table += sample_table(rows)
        self._client.log_dict(self._run_id, {"columns": list(SAMPLE_COLUMNS), "data": self._table}, TABLE_FILE)

    def close(self) -> None:
        self._client.set_terminated(self._run_id)

    @property
    def ids(self) -> dict[str, str]:
        return {"run_id": self._run_id, "tracking_uri": self._uri, "token": self._token}


def supersede(previous: dict[str, str], default_uri: str, new_run_id: str) -> None:
    """End the interrupted run and point it at its successor, only if it is batchscale's own (module docstring)."""
    from mlflow.tracking import MlflowClient

    try:
        uri = previous.get("tracking_uri", default_uri)
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        found = client.get_run(previous["run_id"])
        if found.data.tags.get(TOKEN_TAG) != previous["token"]:
            return  # not the run batchscale created for this run: never touched
        client.set_tag(previous["run_id"], SUPERSEDED_TAG, new_run_id)
        client.set_terminated(previous["run_id"], status="KILLED")
    except Exception:  # noqa: BLE001 - already gone, or another store: the new run is all that matters
        pass
