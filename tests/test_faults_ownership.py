"""Faults of ownership (issue 30): what --overwrite replaces, links kept, cleanup by name, and one writer per run.
Refusals of single command lines live in tests/test_bad_inputs_round2.py; these need a sequence of steps, a second
process or an injected failure."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults import base_config, kill_session, wait_for
from test_ingest_verl import write_verl_log

from batchscale.cli import main
from batchscale.errors import UserError
from batchscale.files import removing_created
from batchscale.rundir import read_run
from batchscale.rundir.ownership import MARKER_FILE, check_replaceable, directory_kind, read_marker

BATCH = ["--prompts-per-step", "4", "--samples-per-prompt", "2"]


def import_cli(log: Path, out: Path, *extra: str) -> list[str]:
    return ["import", "verl", str(log), "--out", str(out), *BATCH, *extra]


def test_every_directory_batchscale_writes_is_marked_with_its_kind(tmp_path):
    log = write_verl_log(tmp_path / "verl.jsonl")
    assert main(import_cli(log, tmp_path / "run")) == 0
    sweep = tmp_path / "sweep.toml"
    (tmp_path / "base.toml").write_text("[run]\nbudget_samples = 64\n")
    sweep.write_text('base = "base.toml"\n[grid]\n"batch.prompts_per_step" = [4]\n')
    assert main(["export", "verl", str(sweep), "--out", str(tmp_path / "export")]) == 0
    assert main(["analyze", str(tmp_path / "run"), "--out", str(tmp_path / "analysis")]) == 0
    assert [read_marker(tmp_path / name) for name in ("run", "export", "analysis")] == ["run", "export", "analysis"]


def test_overwrite_replaces_a_marked_run_and_a_strictly_recognised_premarker_one(tmp_path, capsys):
    log = write_verl_log(tmp_path / "verl.jsonl")
    run = tmp_path / "run"
    assert main(import_cli(log, run)) == 0
    assert main(import_cli(log, run, "--overwrite", "--label", "second")) == 0
    assert read_run(run).label == "second"
    (run / MARKER_FILE).unlink()  # a run written before the marker: every entry is one a run holds
    assert directory_kind(run) == "run"
    assert main(import_cli(log, run, "--overwrite", "--label", "third")) == 0
    assert read_run(run).label == "third" and read_marker(run) == "run"
    (run / MARKER_FILE).unlink()
    (run / "todo.txt").write_text("mine\n")  # ... and one file of the user's makes it the user's
    assert directory_kind(run) is None
    capsys.readouterr()
    assert main(import_cli(log, run, "--overwrite")) == 2
    assert "without a run batchscale wrote" in capsys.readouterr().err
    assert (run / "todo.txt").read_text() == "mine\n" and read_run(run).label == "third"


def test_overwrite_through_a_link_replaces_the_target_and_keeps_the_link(tmp_path):
    log = write_verl_log(tmp_path / "verl.jsonl")
    target, link = tmp_path / "real_run", tmp_path / "link"
    assert main(import_cli(log, target)) == 0
    link.symlink_to(target)
    assert main(import_cli(log, link, "--overwrite", "--label", "through-link")) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert read_run(target).label == "through-link"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "staging or lock files left behind"


def test_the_log_being_imported_is_never_deleted(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(import_cli(write_verl_log(tmp_path / "verl.jsonl"), run)) == 0
    log = run / "metrics.jsonl"  # a verl log that happens to bear the run's file name, inside the run
    write_verl_log(log)
    text = log.read_text()
    assert main(import_cli(log, run, "--overwrite")) == 2
    assert "holds the input PATH" in capsys.readouterr().err
    assert log.read_text() == text


def test_a_kind_is_never_replaced_by_another(tmp_path):
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "sweep.json").write_text("{}")
    (tmp_path / "sweep" / "runs").mkdir()
    assert directory_kind(tmp_path / "sweep") == "sweep"
    with pytest.raises(UserError, match="is a sweep directory, not a run directory"):
        check_replaceable(tmp_path / "sweep", "run")
    (tmp_path / "sweep" / "sweep.toml").write_text("# my sweep\n")  # a user's sweep.toml is no demo's
    assert directory_kind(tmp_path / "sweep") is None


def test_a_failed_cleanup_removes_only_what_this_process_created(tmp_path):
    (tmp_path / "analysis.json").write_text("earlier\n")
    with pytest.raises(UserError, match="no space left"):
        with removing_created(tmp_path, ("analysis.json", "report.md", "curves.png")):
            (tmp_path / "report.md").write_text("ours\n")
            (tmp_path / "analysis.json").write_text("ours too\n")
            (tmp_path / "theirs.txt").write_text("another process's\n")  # not ours: stays
            raise OSError(errno.ENOSPC, "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["analysis.json", "theirs.txt"]


def test_a_failed_analyze_leaves_files_another_process_wrote(tmp_path, monkeypatch, capsys):
    from batchscale.analysis import report as analysis_report
    from batchscale.analysis.synthetic import write_synthetic_sweep

    sweep = write_synthetic_sweep(tmp_path / "sweep", prompts_per_step=(4, 8), seeds=(0, 1))

    def render_then_fail(result, details, out_dir):
        (Path(out_dir) / "theirs.txt").write_text("written meanwhile\n")
        (Path(out_dir) / "runs" / "late_run").mkdir()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(analysis_report, "render_outputs", render_then_fail)
    assert main(["analyze", str(sweep)]) == 2
    assert "no space left" in capsys.readouterr().err
    assert (sweep / "theirs.txt").is_file() and (sweep / "runs" / "late_run").is_dir()
    assert not (sweep / "analysis.json").exists() and not list(sweep.glob(".*.tmp"))


def test_a_failed_train_start_removes_its_own_files_only(tmp_path):
    from batchscale.rundir.staging import run_destination

    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(RuntimeError):
        with run_destination(out, overwrite=False) as write_dir:
            (write_dir / "run.json").write_text("{}")
            (write_dir / "metrics.jsonl").write_text("")
            (write_dir / "theirs.txt").write_text("mine\n")
            raise RuntimeError("failed before the first record")
    assert [p.name for p in out.iterdir()] == ["theirs.txt"]


@pytest.fixture
def slow_reward(tmp_path):
    (tmp_path / "slow_rewards.py").write_text(
        "import time\n\ndef slow(response, answer):\n    time.sleep(0.2)\n    return 1.0\n")
    return tmp_path


def test_two_trains_on_one_out_the_second_is_refused_naming_the_first(tmp_path, random_model_dir, slow_reward,
                                                                       capsys):
    config = tmp_path / "run.toml"
    config.write_text(base_config(random_model_dir, budget=400, task={"reward": "slow_rewards:slow"}))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(slow_reward), os.environ.get("PYTHONPATH", "")])}
    first = subprocess.Popen([sys.executable, "-m", "batchscale.cli", "train", str(config), "--out", str(out)],
                             cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").stat().st_size > 0,
                 what="the first train to write a record")
        records = (out / "metrics.jsonl").read_text()
        for second in (["train", str(config), "--out", str(out)], import_cli(write_verl_log(tmp_path / "v.jsonl"), out),
                       ["train", str(config), "--out", str(out), "--overwrite"]):
            assert main(second) == 2
            err = capsys.readouterr().err
            assert err.count("error:") == 1 and "Traceback" not in err
            assert f"is in use by another run (pid {first.pid} on host {socket.gethostname()}" in err
        assert (out / "metrics.jsonl").read_text().startswith(records)  # the first run's log untouched
    finally:
        kill_session(first.pid)
        first.wait()
