"""Each tracker's files, read back with its library's own reader, hold what metrics.jsonl and samples.jsonl hold: a
sweep of two points with every installed tracker (TensorBoard's EventAccumulator, W&B's `wandb leet inspect --json`
on the offline run's .wandb file, MlflowClient on the file store, trackio's SQLiteStorage on its local store), with
the label as the group, the sweep as the project and the resolved config as the parameters; and a run interrupted
after a checkpoint and resumed, whose tracker runs hold every record exactly once.

A tracker whose library is not installed is skipped, naming the extra that installs it. All stores are in temporary
directories (TRACKIO_DIR and W&B's cache, data and config directories are pointed there), and W&B is offline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from test_resume import interrupted_run, quiet
from test_sweep import write_sweep
from test_trainer import read_records, small_config

from batchscale.telemetry.trackers import TRACKER_LIBRARIES, TRACKER_NAMES, missing_library
from batchscale.telemetry.trackers.base import SAMPLE_COLUMNS, SAMPLES_KEY, flatten_config, param_text, scalars

pytestmark = pytest.mark.slow
INSTALLED = [name for name in TRACKER_NAMES if missing_library(name) is None]
STORES = Path(tempfile.mkdtemp(prefix="batchscale-tracker-stores-"))
ENV = {"TRACKIO_DIR": str(STORES / "trackio"), "WANDB_CACHE_DIR": str(STORES / "wandb-cache"),
       "WANDB_DATA_DIR": str(STORES / "wandb-data"), "WANDB_CONFIG_DIR": str(STORES / "wandb-config"),
       "MLFLOW_ALLOW_FILE_STORE": "true"}
USER_SETTINGS = ("WANDB_MODE", "WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME")


def need(name: str) -> None:
    if name not in INSTALLED:
        pytest.skip(f"{TRACKER_LIBRARIES[name][0]} is not installed: pip install 'batchscale[{name}]'")


@pytest.fixture(scope="module", autouse=True)
def tracker_stores():
    """Every store in a temporary directory, W&B offline; trackio reads TRACKIO_DIR when it is first imported."""
    if "trackio" in sys.modules:
        pytest.skip("trackio was imported before its store could be pointed at a temporary directory")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in ENV.items():
            patch.setenv(key, value)
        for key in USER_SETTINGS:
            patch.delenv(key, raising=False)
        yield


def samples_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "samples.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def series(records: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """key -> [(step, value)] of every record, in order: what a tracker that keeps every value at a step holds."""
    out = defaultdict(list)
    for record in records:
        for key, value in scalars(record).items():
            out[key].append((record["step"], value))
    return dict(out)


def rows_per_step(records: list[dict]) -> dict[int, dict]:
    """step -> the union of its records' numbers, later ones winning: what W&B's one row per step holds."""
    out = defaultdict(dict)
    for record in records:
        out[record["step"]].update(scalars(record))
    return dict(out)


def read_tensorboard(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def read_wandb(run_dir: Path) -> list[dict]:
    """The records of the run's one offline .wandb file, through wandb's own reader."""
    files = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(files[0])],
                         capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def wandb_history(entries: list[dict]) -> dict[int, dict]:
    rows = {}
    for entry in entries:
        if entry["type"] == "history":
            item = entry["history"]["item"]
            rows[item["_step"]] = {k: v for k, v in item.items()
                                   if not k.startswith("_") and not k.startswith(SAMPLES_KEY)}
    return rows


def wandb_tables(run_dir: Path) -> list[dict]:
    """The rows of every eval/examples table the run logged, from the table files W&B wrote beside its log."""
    rows = []
    for path in sorted(run_dir.glob("wandb/offline-run-*/files/media/table/**/*.table.json")):
        table = json.loads(path.read_text())
        rows += [dict(zip(table["columns"], data)) for data in table["data"]]
    return sorted(rows, key=lambda r: (r["step"], r["prompt"]))


def mlflow_client(home: Path):
    from mlflow.tracking import MlflowClient

    uri = (home / "mlruns").absolute().as_uri()
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def read_mlflow(client, run_id: str, keys) -> dict[str, list[tuple[int, float]]]:
    return {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key in keys}


def read_mlflow_table(client, run_id: str) -> list[dict]:
    """The run's eval/examples table, as MLflow stored it (log_table's {"columns", "data"} artifact)."""
    with tempfile.TemporaryDirectory() as tmp:
        table = json.loads(Path(client.download_artifacts(run_id, "eval_examples.json", tmp)).read_text())
    return [dict(zip(table["columns"], data)) for data in table["data"]]


def read_trackio(project: str, run_id: str) -> tuple[list[dict], list[dict]]:
    """(the logged metric rows in order, the rows of every eval/examples table) of one trackio run."""
    from trackio.sqlite_storage import SQLiteStorage

    run = next(run for run in __import__("trackio").Api().runs(project) if run.id == run_id)
    logs = SQLiteStorage.get_logs(project, run.name, run_id=run_id)
    metrics = [{k: v for k, v in log.items() if k not in ("step", "timestamp")} for log in logs
               if SAMPLES_KEY not in log]
    tables = [row for log in logs if SAMPLES_KEY in log for row in log[SAMPLES_KEY]["_value"]]
    return metrics, tables


def tracker_ids(run_dir: Path) -> dict:
    return json.loads((run_dir / "trackers.json").read_text())["runs"]


@pytest.fixture(scope="module")
def sweep(random_model_dir, tmp_path_factory):
    """Two points, one seed each, every installed tracker; run as `batchscale sweep` runs them (a worker process)."""
    from batchscale.sweep.driver import run_sweep
    from batchscale.sweep.spec import load_sweep_spec

    if not INSTALLED:
        pytest.skip("no tracker library is installed")
    root = tmp_path_factory.mktemp("tracked")
    spec = write_sweep(root, random_model_dir, f"""seeds = [0]
[set]
"run.trackers" = {json.dumps(INSTALLED)}
"run.save_policy" = false
[grid]
"batch.prompts_per_step" = [2, 4]
""", budget=24)
    sweep_dir = root / "tracked-sweep"
    run_sweep(load_sweep_spec(spec), sweep_dir, workers=1, threads=1)
    runs = sorted(p for p in (sweep_dir / "runs").iterdir() if not p.name.startswith("."))
    assert len(runs) == 2
    return sweep_dir, runs


def test_tensorboard_holds_every_record_at_its_step(sweep):
    need("tensorboard")
    for run_dir in sweep[1]:
        expected, found = series(read_records(run_dir)), read_tensorboard(run_dir)
        assert set(found) == set(expected)
        for key, values in expected.items():
            assert [s for s, _ in found[key]] == [s for s, _ in values], key
            assert [v for _, v in found[key]] == pytest.approx([v for _, v in values], rel=1e-6), key  # float32


def test_wandb_offline_run_holds_every_record_the_config_the_group_and_the_samples(sweep):
    need("wandb")
    sweep_dir, runs = sweep
    for run_dir in runs:
        records, config = read_records(run_dir), json.loads((run_dir / "config.json").read_text())
        entries = read_wandb(run_dir)
        header = next(e["run"] for e in entries if e["type"] == "run")
        assert header["run_group"] == config["derived"]["label"] and header["project"] == sweep_dir.name
        assert header["display_name"] == run_dir.name
        assert {k: v for k, v in header["config"]["update"].items() if k != "_wandb"} == config
        expected, found = rows_per_step(records), wandb_history(entries)
        assert sorted(found) == sorted(expected)
        for step, row in expected.items():
            assert found[step] == pytest.approx(row, rel=1e-12), step
        assert wandb_tables(run_dir) == sorted(samples_rows(run_dir), key=lambda r: (r["step"], r["prompt"]))


def test_mlflow_run_holds_every_record_the_params_the_tags_and_the_samples(sweep, monkeypatch):
    need("mlflow")
    sweep_dir, runs = sweep
    client = mlflow_client(sweep_dir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", client.tracking_uri)  # load_table searches the global store

    experiment = client.get_experiment_by_name(sweep_dir.name)
    by_name = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    assert sorted(by_name) == [run_dir.name for run_dir in runs]
    for run_dir in runs:
        run, config = by_name[run_dir.name], json.loads((run_dir / "config.json").read_text())
        assert run.info.run_id == tracker_ids(run_dir)["mlflow"]["run_id"]
        assert run.data.tags["batchscale.label"] == config["derived"]["label"]
        assert run.data.tags["batchscale.sweep"] == sweep_dir.name
        assert run.data.params == {k: param_text(v) for k, v in flatten_config(config).items()}
        expected = series(read_records(run_dir))
        assert set(run.data.metrics) == set(expected)
        assert read_mlflow(client, run.info.run_id, expected) == {k: sorted(v) for k, v in expected.items()}
        table = client.load_table(experiment.experiment_id, "eval_examples.json", run_ids=[run.info.run_id])
        assert len(table) == len(samples_rows(run_dir))  # pandas guesses dtypes ("117" reads as 117): exact below
        assert read_mlflow_table(client, run.info.run_id) == samples_rows(run_dir)


def test_trackio_run_holds_every_record_the_group_and_the_samples(sweep):
    need("trackio")
    import trackio

    sweep_dir, runs = sweep
    found = {run.name: run for run in trackio.Api().runs(sweep_dir.name)}
    assert sorted(found) == [run_dir.name for run_dir in runs]
    for run_dir in runs:
        config = json.loads((run_dir / "config.json").read_text())
        run_id = tracker_ids(run_dir)["trackio"]["run_id"]
        assert found[run_dir.name].config["_Group"] == config["derived"]["label"]
        assert found[run_dir.name].config["batch"] == config["batch"]
        metrics, tables = read_trackio(sweep_dir.name, run_id)
        records = read_records(run_dir)
        assert len(metrics) == len(records)
        for got, record in zip(metrics, records):
            assert got == pytest.approx(scalars(record), rel=1e-12)
        assert tables == samples_rows(run_dir)


@pytest.fixture(scope="module")
def resumed(random_model_dir, tmp_path_factory):
    """A run with every installed tracker, an eval every step and a checkpoint every second one, killed at the start
    of step 4 (step 3's records and samples written and mirrored after the checkpoint at step 2) and resumed."""
    from batchscale.train.loop import train

    if not INSTALLED:
        pytest.skip("no tracker library is installed")
    monkeypatch = pytest.MonkeyPatch()
    cfg = small_config(random_model_dir, f"run.trackers={json.dumps(INSTALLED)}", "run.checkpoint_every_samples=24",
                       "run.eval_every_samples=12", "run.save_policy=false")
    out = tmp_path_factory.mktemp("resumed") / "run"
    interrupted_run(monkeypatch, cfg, out, at_step=4)  # a checkpoint at step 2; step 3 is cut back and redone
    before = tracker_ids(out)
    rows_before = samples_rows(out)
    train(cfg, out, log=quiet, resume=True)
    return out, before, rows_before


def test_a_resumed_runs_samples_are_cut_back_and_written_again(resumed):
    out, _, rows_before = resumed
    rows = samples_rows(out)
    assert [r["step"] for r in rows_before] == [s for s in (0, 1, 2, 3) for _ in range(4)]
    assert [r["step"] for r in rows] == [s for s in (0, 1, 2, 3, 4, 5) for _ in range(4)]  # no eval twice


def test_a_resumed_runs_trackers_hold_each_record_once(resumed):
    out, before, _ = resumed
    records = read_records(out)
    name = json.loads((out / "config.json").read_text())["derived"]["label"] + "__s0"  # label__s<seed>
    expected = series(records)
    assert [r["step"] for r in records if r["kind"] == "step"] == [1, 2, 3, 4, 5]
    if "tensorboard" in INSTALLED:
        found = read_tensorboard(out)
        assert {k: [s for s, _ in v] for k, v in found.items()} == {k: [s for s, _ in v] for k, v in expected.items()}
    if "wandb" in INSTALLED:
        found = wandb_history(read_wandb(out))  # one offline run: the interrupted one was replaced
        assert sorted(found) == sorted(rows_per_step(records))
        assert wandb_tables(out) == sorted(samples_rows(out), key=lambda r: (r["step"], r["prompt"]))
    if "mlflow" in INSTALLED:
        from mlflow.entities import ViewType

        client = mlflow_client(out.parent)
        run_id = tracker_ids(out)["mlflow"]["run_id"]
        assert run_id != before["mlflow"]["run_id"]
        old = client.get_run(before["mlflow"]["run_id"])  # never deleted: ended, pointing at its successor
        assert old.info.lifecycle_stage == "active" and old.info.status == "KILLED"
        assert old.data.tags["batchscale.superseded_by"] == run_id
        experiment = client.get_experiment_by_name("batchscale")
        assert [r.info.run_id for r in client.search_runs([experiment.experiment_id], run_view_type=ViewType.ACTIVE_ONLY)
                if r.info.run_name == name and "batchscale.superseded_by" not in r.data.tags] == [run_id]
        assert read_mlflow(client, run_id, expected) == {k: sorted(v) for k, v in expected.items()}
    if "trackio" in INSTALLED:
        import trackio

        run_id = tracker_ids(out)["trackio"]["run_id"]
        assert run_id in [run.id for run in trackio.Api().runs("batchscale") if run.name == name]  # the old one stays
        metrics, tables = read_trackio("batchscale", run_id)
        assert [m["samples"] for m in metrics] == [r["samples"] for r in records]
        assert tables == samples_rows(out)

