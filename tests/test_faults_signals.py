"""Signals (issue 30): Ctrl-C of a command exits 130 quietly and leaves no process; SIGTERM runs the same cleanup
(exit 143), so a warm start stopped by it leaves no half-built model and a sweep stopped by it reruns at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults import base_config, kill_session, session_processes, staged_lines, wait_for, write_sweep

from batchscale.files import build_once

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to list processes")


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "batchscale.cli", *map(str, args)]


def start(args: list[str], cwd: Path, extra_path: Path | None = None, **env) -> subprocess.Popen:
    path = os.pathsep.join([str(extra_path), os.environ.get("PYTHONPATH", "")]) if extra_path else \
        os.environ.get("PYTHONPATH", "")
    return subprocess.Popen(args, cwd=cwd, env={**os.environ, "PYTHONPATH": path, **env}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_and_collect(process: subprocess.Popen, sig: int) -> tuple[int, str]:
    """Send `sig` to the process's whole group (as a terminal's Ctrl-C does); its exit code and stderr."""
    try:
        os.killpg(process.pid, sig)
        _, err = process.communicate(timeout=120)
        wait_for(lambda: not session_processes(process.pid), timeout_s=30, what="the command's processes to end")
        return process.returncode, err
    finally:
        kill_session(process.pid)


@pytest.fixture
def slow_reward(tmp_path):
    (tmp_path / "signal_rewards.py").write_text(
        "import time\n\ndef slow(response, answer):\n    time.sleep(0.05)\n    return 1.0\n")
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_ctrl_c_of_a_train_with_a_user_reward_exits_130_quietly_leaving_no_process(tmp_path, random_model_dir,
                                                                                   slow_reward, mode):
    config = tmp_path / "run.toml"
    config.write_text(base_config(random_model_dir, budget=4000, task={"reward": "signal_rewards:slow"},
                                  rollout={"mode": mode}))
    out = tmp_path / "out"
    process = start(cli("train", config, "--out", out), tmp_path, slow_reward)
    wait_for(lambda: (out / "metrics.jsonl").is_file() and len((out / "metrics.jsonl").read_text().splitlines()) >= 2,
             what="the run to train")
    assert len(session_processes(process.pid)) >= 2  # the trainer and its reward worker (and generator)
    code, err = stop_and_collect(process, signal.SIGINT)
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert not (tmp_path / ".out.lock").exists()


def test_a_build_left_by_a_killed_process_is_removed_by_the_next(tmp_path):
    target = tmp_path / "tiny-abc"
    (tmp_path / ".tiny-abc.building-999999-deadbeef").mkdir()
    (tmp_path / ".tiny-abc.building-999999-deadbeef" / "model.safetensors").write_bytes(b"half")

    def build(staging: Path) -> None:
        (staging / "config.json").write_text("{}")

    assert build_once(target, build, log=lambda line: None, what="build") == target
    assert (target / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tiny-abc.lock", "tiny-abc"]


@pytest.mark.slow
def test_sigterm_of_a_warm_start_leaves_no_building_directory(tmp_path):
    cache = tmp_path / "cache"
    config = tmp_path / "run.toml"
    config.write_text('[model]\nname = "tiny"\n[run]\nbudget_samples = 128\nthreads = 1\n')
    # BATCHSCALE_TINY_BUILD: the warm start itself (the pinned copy would be copied in well before a signal)
    process = start(cli("train", config, "--out", tmp_path / "out"), tmp_path, BATCHSCALE_CACHE=str(cache),
                    BATCHSCALE_TINY_BUILD="1")

    def building() -> list[Path]:
        return [p for p in cache.rglob(".*.building-*")] if cache.is_dir() else []

    wait_for(lambda: building() or process.poll() is not None, what="the warm start to begin")
    assert process.poll() is None, "the warm start ended before it could be stopped"
    code, err = stop_and_collect(process, signal.SIGTERM)
    assert code == 143, err
    assert "Traceback" not in err, err
    assert not building()


@pytest.mark.slow
def test_a_sweep_stopped_by_sigterm_reruns_at_once(tmp_path, random_model_dir):
    path = write_sweep(tmp_path, random_model_dir, '"batch.prompts_per_step" = [2, 4]', budget=2000)
    out = tmp_path / "out"
    process = start(cli("sweep", path, "--out", out, "--workers", "2"), tmp_path)
    wait_for(lambda: staged_lines(out) >= 2, what="the sweep to train")
    code, err = stop_and_collect(process, signal.SIGTERM)
    assert code == 143, err
    assert "Traceback" not in err, err
    assert not (out / "sweep.lock").exists()
    small = write_sweep(tmp_path, random_model_dir, '"batch.prompts_per_step" = [2, 4]', budget=8)
    rerun = subprocess.run(cli("sweep", small, "--out", out, "--workers", "2"), cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in (out / "runs").iterdir() if not p.name.startswith(".")) == sorted(
        p.name for p in (out / "runs").iterdir() if not p.name.startswith(".") and (p / "summary.json").is_file())
