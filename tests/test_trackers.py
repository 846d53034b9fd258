"""Trackers (telemetry.trackers): the config names them and refuses a missing library naming its extra, before any
compute; the mirror fans every record out, replays a resumed run's kept records with each eval's samples after its
record, and a tracker that raises is warned about once and dropped while training goes on to the same records.
Each library's own files are read back in tests/test_trackers_readback.py."""

from __future__ import annotations

import json

import pytest
from test_trainer import read_records, small_config

from batchscale.cli import main
from batchscale.config import load_config, tracker_names
from batchscale.errors import UserError
from batchscale.rundir.samples import SampleRow
from batchscale.telemetry import trackers
from batchscale.telemetry.trackers import TRACKER_LIBRARIES, TRACKER_NAMES
from batchscale.telemetry.trackers.base import Tracker, TrackedRun, by_samples, scalars
from batchscale.telemetry.trackers.mirror import TRACKER_CLASSES, TrackerMirror
from batchscale.train.loop import train


def test_every_tracker_the_config_accepts_has_a_library_and_a_class():
    from typing import get_args

    from batchscale.config import RunConfig

    accepted = get_args(get_args(RunConfig.model_fields["trackers"].annotation)[0])
    assert set(accepted) == set(TRACKER_NAMES) == set(TRACKER_CLASSES)


def test_the_tensorboard_flag_is_tensorboard_in_the_list():
    assert tracker_names(load_config(None, ["run.tensorboard=true"]).run) == ["tensorboard"]
    assert tracker_names(load_config(None, ['run.trackers=["tensorboard"]', "run.tensorboard=true"]).run) == \
        ["tensorboard"]
    assert tracker_names(load_config(None).run) == []


def test_an_unknown_tracker_is_refused_naming_the_field(capsys):
    assert main(["train", "--set", 'run.trackers=["neptune"]', "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run.trackers") and "neptune" in err and "Traceback" not in err


def test_a_missing_library_is_refused_naming_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"pip install 'batchscale\[wandb\]'"):
        load_config(None, ['run.trackers=["wandb"]'])
    out = tmp_path / "run"
    assert main(["train", "--set", 'run.trackers=["mlflow"]', "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") <= 2 and "run.trackers" in err and "batchscale[mlflow]" in err
    assert not out.exists()  # refused before anything is written


def test_no_tracker_library_is_imported_until_its_tracker_is_enabled():
    import subprocess
    import sys

    code = ("import sys; import batchscale.train.loop, batchscale.config; "
            "print([m for m in ('wandb', 'mlflow', 'trackio', 'tensorboard') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class Recorder(Tracker):
    holds_tables = True

    def __init__(self, fail_at: int | None = None):
        self.calls, self.fail_at = [], fail_at

    def log(self, record):
        if record["step"] == self.fail_at:
            raise RuntimeError("the tracker's server went away")
        self.calls.append(("log", record["kind"], record["step"]))

    def log_samples(self, step, rows):
        self.calls.append(("samples", step, len(rows)))


def row(step: int) -> SampleRow:
    return SampleRow(step=step, samples=step * 4, prompt="1+1=", response="2", answer="2", reward=1.0)


RECORDS = [{"kind": "eval", "step": 0, "samples": 0, "wall_s": 0.1, "eval/accuracy": 0.25},
           {"kind": "step", "step": 1, "samples": 4, "wall_s": 0.2, "reward/mean": 0.5},
           {"kind": "eval", "step": 1, "samples": 4, "wall_s": 0.3, "eval/accuracy": 0.5}]


def test_replay_logs_each_evals_samples_after_its_record():
    recorder = Recorder()
    TrackerMirror({"r": recorder}, warn=pytest.fail).replay(RECORDS, [row(0), row(0), row(1)])
    assert recorder.calls == [("log", "eval", 0), ("samples", 0, 2), ("log", "step", 1), ("log", "eval", 1),
                              ("samples", 1, 1)]


def test_a_failing_tracker_is_warned_about_once_and_the_others_go_on():
    failing, healthy, warnings = Recorder(fail_at=1), Recorder(), []
    mirror = TrackerMirror({"failing": failing, "healthy": healthy}, warn=warnings.append)
    mirror.replay(RECORDS, [])
    mirror.log({"kind": "step", "step": 2, "samples": 8, "wall_s": 0.4})
    mirror.close()
    assert len(warnings) == 1 and "failing tracker failed while logging step 1" in warnings[0]
    assert failing.calls == [("log", "eval", 0)]
    assert [call[2] for call in healthy.calls] == [0, 1, 1, 2]


def test_scalars_are_the_records_numbers_with_samples_and_without_kind_and_step():
    record = {"kind": "step", "step": 3, "samples": 12, "wall_s": 1.5, "reward/mean": 0.25, "flag": True,
              "rollout/active_mean": None, "note": "x"}
    assert scalars(record) == {"samples": 12, "wall_s": 1.5, "reward/mean": 0.25}


def test_the_samples_axis_is_every_number_but_samples_at_the_records_samples():
    assert by_samples(RECORDS[1]) == (4, {"by_samples/wall_s": 0.2, "by_samples/reward/mean": 0.5})
    assert by_samples({"kind": "step", "step": 1, "wall_s": 0.2}) is None  # no cumulative samples: nothing to plot


class Placed(Tracker):
    def __init__(self, place):
        self.place = place

    def where(self):
        return self.place


def test_the_last_line_names_where_each_tracker_wrote(tmp_path):
    mlflow = Placed("mlflow: MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri file:///m")
    mirror = TrackerMirror({"a": Placed("tensorboard --logdir x/tensorboard"), "b": Placed(""), "c": mlflow},
                           warn=pytest.fail)
    assert mirror.where() == ("trackers: tensorboard --logdir x/tensorboard; mlflow: MLFLOW_ALLOW_FILE_STORE=true "
                              "mlflow ui --backend-store-uri file:///m")
    assert TrackerMirror({}, warn=pytest.fail).where() == ""
    staged = TrackedRun(run_dir=tmp_path / "runs" / ".p4__s0.staging", home=tmp_path, name="p4__s0", group="p4",
                        project="sw", sweep="sw", config={})
    assert staged.final_dir == tmp_path / "runs" / "p4__s0"  # a sweep's run is named where it will be, not staged
    single = TrackedRun(run_dir=tmp_path / "my-run", home=tmp_path, name="p4__s0", group="p4", project="batchscale",
                        sweep=None, config={})
    assert single.final_dir == tmp_path / "my-run"


@pytest.mark.slow
def test_a_run_with_tensorboard_ends_with_the_line_to_open_it(random_model_dir, tmp_path):
    pytest.importorskip("tensorboard")
    lines = []
    train(small_config(random_model_dir, 'run.trackers=["tensorboard"]', "run.save_policy=false"), tmp_path / "r",
          log=lines.append)
    assert lines[-1] == f"trackers: tensorboard --logdir {tmp_path / 'r' / 'tensorboard'}"


class RaisingTracker(Tracker):
    """Opens, then raises on its second record: a tracker whose library fails mid-run."""

    def __init__(self, run, resume, previous):
        self.logged = 0

    def log(self, record):
        self.logged += 1
        if self.logged == 2:
            raise ConnectionError("tracker down")


@pytest.mark.slow
def test_a_tracker_that_raises_mid_run_never_stops_training(random_model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(TRACKER_CLASSES, "tensorboard", (__name__, "RaisingTracker"))
    monkeypatch.setitem(TRACKER_LIBRARIES, "tensorboard", ("json", "tensorboard"))  # "installed": a stdlib module
    lines = []
    summary = train(small_config(random_model_dir, "run.tensorboard=true", "run.save_policy=false"),
                    tmp_path / "run", log=lines.append)
    warned = [line for line in lines if "tensorboard tracker failed" in line]
    assert len(warned) == 1 and "ConnectionError: tracker down" in warned[0]
    assert summary["finished"] and [r["step"] for r in read_records(tmp_path / "run") if r["kind"] == "step"] == \
        [1, 2, 3, 4, 5]
    assert any("tensorboard tracker failed" in note for note in summary["warnings"])


@pytest.mark.slow
def test_an_eval_writes_its_first_log_samples_examples(random_model_dir, tmp_path):
    train(small_config(random_model_dir, "run.log_samples=3", "run.save_policy=false"), tmp_path / "run",
          log=lambda line: None)
    evals = [r for r in read_records(tmp_path / "run") if r["kind"] == "eval"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert [(r["step"], r["samples"]) for r in rows] == [(e["step"], e["samples"]) for e in evals for _ in range(3)]
    assert len({r["prompt"] for r in rows}) == 3  # the eval set is fixed: the same three prompts every time
    assert all(set(r) == {"step", "samples", "prompt", "response", "answer", "reward", "correct"} for r in rows)


@pytest.mark.slow
def test_log_samples_zero_writes_no_samples_file(random_model_dir, tmp_path):
    train(small_config(random_model_dir, "run.log_samples=0", "run.save_policy=false"), tmp_path / "run",
          log=lambda line: None)
    assert not (tmp_path / "run" / "samples.jsonl").exists()
