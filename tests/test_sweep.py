"""Sweeps: grid expansion and validation, resume after a kill, and executors that never change a run's records."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchscale.errors import UserError
from batchscale.sweep.spec import load_sweep_spec

TIMING_KEYS = {"wall_s", "time/generate", "time/train", "time/step", "time/eval"}


def write_sweep(tmp_path, model_dir, body: str, budget: int = 24) -> Path:
    (tmp_path / "base.toml").write_text(f"""
[model]
name = "{model_dir}"
[task]
eval_size = 8
[batch]
prompts_per_step = 2
samples_per_prompt = 2
micro_batch_size = 2
reference_samples_per_step = 4
[sampling]
max_new_tokens = 3
[run]
budget_samples = {budget}
eval_every_samples = 8
""")
    path = tmp_path / "sweep.toml"
    path.write_text('base = "base.toml"\n' + body)
    return path


def records(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_grid_points_and_seeds_expand_with_labels(tmp_path, random_model_dir):
    path = write_sweep(tmp_path, random_model_dir, """
seeds = [0, 1]
[grid]
"batch.prompts_per_step" = [2, 4]
[[points]]
"batch.prompts_per_step" = 4
"optim.lr_rule" = "none"
""")
    points = load_sweep_spec(path)
    assert [p.name for p in points] == [
        "grpo-P2-G2-sqrt__s0", "grpo-P2-G2-sqrt__s1", "grpo-P4-G2-sqrt__s0", "grpo-P4-G2-sqrt__s1",
        "grpo-P4-G2-none__s0", "grpo-P4-G2-none__s1"]
    assert points[2].config.batch.prompts_per_step == 4 and points[2].config.run.seed == 0


def test_a_bad_point_is_named_before_anything_runs(tmp_path, random_model_dir):
    path = write_sweep(tmp_path, random_model_dir, '[grid]\n"batch.prompts_per_step" = [2, 3]\n"batch.micro_batch_size" = [4]\n')
    with pytest.raises(UserError) as info:
        load_sweep_spec(path)
    assert "batch.prompts_per_step=3" in info.value.field and "micro_batch_size" in info.value.field
    assert not (tmp_path / "runs").exists()


def test_duplicate_points_and_unknown_keys_are_errors(tmp_path, random_model_dir):
    with pytest.raises(UserError, match="same run"):
        load_sweep_spec(write_sweep(tmp_path, random_model_dir, '[grid]\n"optim.lr" = [1e-4, 2e-4]\n'))
    with pytest.raises(UserError, match="unknown key"):
        load_sweep_spec(write_sweep(tmp_path, random_model_dir, 'sets = 1\n'))


def sweep_cli(*args):
    return [sys.executable, "-m", "batchscale.cli", "sweep", *map(str, args)]


def test_killed_sweep_resumes_with_every_record_exactly_once(tmp_path, random_model_dir):
    path = write_sweep(tmp_path, random_model_dir, '[grid]\n"batch.prompts_per_step" = [2, 4]\n', budget=200)
    out = tmp_path / "out"
    proc = subprocess.Popen(sweep_cli(path, "--out", out), cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def staged() -> Path | None:  # runs/.<name>.partial-<pid>-<token>/metrics.jsonl, the name unique to the sweep
        found = sorted((out / "runs").glob(".grpo-P2-G2-sqrt__s0.partial-*/metrics.jsonl"))
        return found[0] if found else None

    deadline = time.time() + 120
    while time.time() < deadline and (staged() is None or len(staged().read_text().splitlines()) < 3):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-run: the first point has records, no summary
    proc.wait()
    assert staged() is not None and not (out / "runs" / "grpo-P2-G2-sqrt__s0").exists()

    done = subprocess.run(sweep_cli(path, "--out", out, "--json"), cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ran"] == 2
    for name, samples_per_step in (("grpo-P2-G2-sqrt__s0", 4), ("grpo-P4-G2-sqrt__s0", 8)):
        steps = [r for r in records(out / "runs" / name) if r["kind"] == "step"]
        assert [r["step"] for r in steps] == list(range(1, len(steps) + 1))  # none missing, none twice
        assert steps[-1]["samples"] == 200 and all(r["samples"] == r["step"] * samples_per_step for r in steps)
    assert not any(p.name.startswith(".") for p in (out / "runs").iterdir())

    again = subprocess.run(sweep_cli(path, "--out", out, "--json"), cwd=tmp_path, capture_output=True, text=True)
    assert json.loads(again.stdout)["skipped"] == 2  # finished runs are never redone


def direct_run(point, tmp_path) -> list[dict]:
    from batchscale.config import validate_config
    from batchscale.train.loop import train

    data = point.config_data
    data["run"]["threads"] = 1
    train(validate_config(data), tmp_path / f"direct-{point.name}", log=lambda s: None)
    return records(tmp_path / f"direct-{point.name}")


def test_local_executor_in_parallel_gives_the_records_of_a_direct_run(tmp_path, random_model_dir):
    from batchscale.sweep.driver import run_sweep

    points = load_sweep_spec(write_sweep(tmp_path, random_model_dir, '[grid]\n"batch.prompts_per_step" = [2, 4]\n'))
    run_sweep(points, tmp_path / "sweep", executor="local", workers=2, threads=1)
    for point in points:
        assert records(tmp_path / "sweep" / "runs" / point.name) == direct_run(point, tmp_path)


def interrupted_staging(point, sweep_dir: Path, monkeypatch, at_step: int, threads: int, *extra: str) -> Path:
    """A staging directory of `point` as a sweep killed at the start of `at_step` leaves it, its worker's lock file
    included (`extra`: config overrides of the run in it)."""
    from test_resume import Interrupted, interrupt_at

    from batchscale.config import apply_overrides, validate_config
    from batchscale.rundir.lock import run_lock_path
    from batchscale.rundir.staging import sweep_staging_dir
    from batchscale.sweep.resume import with_threads
    from batchscale.train.loop import train

    staging = sweep_staging_dir(sweep_dir, point.name)
    cfg = validate_config(apply_overrides(with_threads(point.config_data, threads), list(extra)))
    interrupt_at(monkeypatch, at_step)
    with pytest.raises(Interrupted):
        train(cfg, staging, log=lambda line: None)
    monkeypatch.undo()
    run_lock_path(staging).write_text('{"pid": 999999999, "host": "gone"}')
    return staging


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed")
def test_ray_executor_runs_a_two_point_sweep_like_the_local_one(tmp_path, random_model_dir, monkeypatch, capsys):
    """Ray tasks write a direct run's records, the one of a point an interrupted sweep left resumed (the checkpoint
    settings, which may differ on a resume, every step in that run)."""
    import ray

    from batchscale.sweep.driver import run_sweep

    points = load_sweep_spec(write_sweep(tmp_path, random_model_dir, '[grid]\n"batch.prompts_per_step" = [2, 4]\n'))
    interrupted_staging(points[0], tmp_path / "sweep", monkeypatch, 4, 1, "run.checkpoint_every_samples=1")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = run_sweep(points, tmp_path / "sweep", executor="ray", threads=1)
    finally:
        ray.shutdown()
    assert result["ran"] == 2
    assert "grpo-P2-G2-sqrt seed 0: resuming from step 3 (checkpoint, 12 samples)" in capsys.readouterr().err
    for point in points:
        assert records(tmp_path / "sweep" / "runs" / point.name) == direct_run(point, tmp_path)
    assert not any(p.name.startswith(".") for p in (tmp_path / "sweep" / "runs").iterdir())


def test_a_racing_sweep_chooses_the_reference_analysis_would_choose():
    """One rule (analysis.analyze.choose_reference_label) on the points' plans before any run: the smallest batch among
    the sqrt-rule labels, however its rule is spelled; a synchronous one before an asynchronous one of its batch."""
    from batchscale.analysis.analyze import ReferenceFacts, choose_reference_label
    from batchscale.config import load_config
    from batchscale.sweep.adaptive import reference_of
    from batchscale.sweep.spec import Point

    grid = [[], ["batch.prompts_per_step=4", "optim.lr_rule=none"], ["batch.prompts_per_step=8", "optim.lr_rule=0.5"],
            ["batch.prompts_per_step=8", "rollout.mode='async'"], ["batch.prompts_per_step=32"]]
    points = {p.label: p for p in (Point.of(load_config(None, overrides)) for overrides in grid)}
    assert reference_of(points) == "grpo-P8-G8-a=0.5"
    runs = {label: ReferenceFacts(p.plan.lr_rule, p.plan.samples_per_step, p.config.rollout.mode, p.plan.prompts_per_step)
            for label, p in points.items() if label != "grpo-P8-G8-a=0.5"}
    assert choose_reference_label(runs) == "grpo-P8-G8-sqrt-async-k1"  # the only sqrt label of 64 left
