"""A racing sweep on real runs: a stopped run is the prefix of the uninterrupted one, the race's facts are recorded in
sweep.json, a rerun resumes from runs/ and keeps the recorded target, and bad racing flags fail before any run."""

from __future__ import annotations

import json

import pytest

from batchscale.errors import UserError
from batchscale.rundir import StoppedRun, read_run, read_sweep_document
from batchscale.sweep.race import RaceSettings
from batchscale.sweep.spec import load_sweep_spec
from test_sweep import direct_run, records, write_sweep


def test_a_run_stopped_at_an_eval_is_the_prefix_of_the_uninterrupted_run(tmp_path, random_model_dir):
    """Stopping changes where a run ends, never what it computed up to there."""
    from batchscale.config import validate_config
    from batchscale.train.loop import train

    (point,) = load_sweep_spec(write_sweep(tmp_path, random_model_dir, "", budget=32))
    full = direct_run(point, tmp_path)

    def stop_at_16(history):
        last = history[-1]
        return StoppedRun(reason="target", samples=last["samples"], message="test") if last["samples"] >= 16 else None

    data = point.config_data
    data["run"]["threads"] = 1
    summary = train(validate_config(data), tmp_path / "stopped", log=lambda s: None, stop=stop_at_16)
    stopped = records(tmp_path / "stopped")
    assert stopped == full[:len(stopped)]
    assert stopped[-1]["kind"] == "eval" and stopped[-1]["samples"] == 16 < full[-1]["samples"]
    assert summary["stopped"] == {"reason": "target", "samples": 16, "message": "test"}
    assert read_run(tmp_path / "stopped").summary.stopped.samples == 16


def test_a_racing_sweep_records_its_facts_and_resumes(tmp_path, random_model_dir):
    from batchscale.sweep.driver import run_sweep

    spec = write_sweep(tmp_path, random_model_dir, 'seeds = [0, 1, 2]\n[grid]\n"batch.prompts_per_step" = [2, 4]\n')
    points = load_sweep_spec(spec)
    out = tmp_path / "sweep"
    # a target above any score the random model reaches: the reference's first seeds train to their budget, and with
    # no N*_ref no budget can be sized and nothing decided: the other point never starts (issue 38)
    result = run_sweep(points, out, threads=1, race=RaceSettings(2, 3), target=1.01)
    race = result["race"]
    assert race["target"] == 1.01 and race["answer"] == "none"
    assert race["seeds"] == {"grpo-P2-G2-sqrt": 2, "grpo-P4-G2-sqrt": 0}
    assert "did not reach the target" in race["ended"] and race["not_run"] == ["grpo-P4-G2-sqrt"]
    assert race["samples_trained"] == 2 * 24 and race["full_grid_samples"] == 6 * 24
    document = read_sweep_document(out)
    assert document.race.target == 1.01 and document.race.reference == "grpo-P2-G2-sqrt"
    assert document.race.not_run == ["grpo-P4-G2-sqrt"] and document.race.budgets == {"grpo-P2-G2-sqrt": 24.0}
    assert sorted(p.name for p in document.points) == sorted(p.name for p in (out / "runs").iterdir())
    again = run_sweep(points, out, threads=1, race=RaceSettings(2, 3))  # the recorded target is kept
    assert again["skipped"] == 2 and again["ran"] == 0 and again["race"]["target"] == 1.01
    with pytest.raises(UserError, match="stopped at the target 1.01"):
        run_sweep(points, out, threads=1, race=RaceSettings(2, 3), target=0.5)


@pytest.mark.parametrize("args, message", [
    (["--max-seeds", "3"], "add --adaptive"),
    (["--adaptive", "--initial-seeds", "3", "--max-seeds", "2"], "--max-seeds"),
    (["--adaptive", "--time-budget", "-5"], "--time-budget"),
    (["--target", "0.5"], "add --adaptive"),
])
def test_bad_racing_flags_fail_before_any_run(tmp_path, random_model_dir, capsys, args, message):
    from batchscale.cli import main

    spec = write_sweep(tmp_path, random_model_dir, 'seeds = [0, 1]\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "s"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s" / "runs").exists()


def test_the_race_reads_a_finished_run_back(tmp_path, random_model_dir):
    from batchscale.sweep.adaptive import seed_result

    (point,) = load_sweep_spec(write_sweep(tmp_path, random_model_dir, "", budget=32))
    direct_run(point, tmp_path)
    result = seed_result(tmp_path / f"direct-{point.name}", target=1.01)
    assert result.samples == 32 and not result.reached and result.stopped is None
    assert len(result.log_q) == 32 // 4 - 1  # every step after the warm-up step
    assert json.loads((tmp_path / f"direct-{point.name}" / "summary.json").read_text())["stopped"] is None
