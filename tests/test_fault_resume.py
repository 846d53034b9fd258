"""Fault injection: a training process killed with SIGKILL (mid-step, mid-checkpoint write, during an eval, or at a
random moment) and resumed gives the uninterrupted run's records, loses at most one checkpoint interval, and never
leaves a checkpoint that loads but is wrong: every checkpoint that passes its checks after the kill holds exactly the
uninterrupted run's files for its step.

The child is a real process (`CHILD`): it trains with a hook that SIGKILLs itself at the chosen point, so a kill
lands where it is meant to, not where a timer happens to fall; the random trials kill from outside after a random
delay."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_resume import timeless
from test_trainer import read_records, small_config

from batchscale.config import derive_plan, resolved_config
from batchscale.rundir.checkpoint import CheckpointProblem, checkpoint_steps, read_checkpoint
from batchscale.train.loop import train
from batchscale.train.resume import resume_config

SRC = str(Path(__file__).resolve().parents[1] / "src")
SETTINGS = ["run.seed=3", "run.budget_samples=96", "run.eval_every_samples=24", "run.checkpoint_every_samples=12",
            "run.save_policy=false"]  # 8 steps of 12 samples, a checkpoint after every step but the last
TENSOR_FILES = ("actor.safetensors", "actor_optimizer.safetensors", "rng.safetensors")

# The child: train the config in argv[1] into argv[2]; BATCHSCALE_TEST_KILL="where:n" kills it at the n-th call of
# that point (1-based): "write" a checkpoint file's fsync, "eval" an evaluation, "step" an actor update.
CHILD = r"""
import json, os, signal, sys
from pathlib import Path
from batchscale.config import validate_config
from batchscale.rundir import checkpoint
from batchscale.train import loop, actor

where, n = (os.environ.get("BATCHSCALE_TEST_KILL") or "none:0").split(":")
calls = {"count": 0}

def killing(real):
    def wrapped(*args, **kwargs):
        calls["count"] += 1
        if calls["count"] == int(n):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return wrapped

if where == "write":
    checkpoint.fsync_path = killing(checkpoint.fsync_path)
elif where == "eval":
    loop.evaluate = killing(loop.evaluate)
elif where == "step":
    actor.Actor.update = killing(actor.Actor.update)
cfg = validate_config({k: v for k, v in json.loads(Path(sys.argv[1]).read_text()).items() if k != "derived"})
loop.train(cfg, Path(sys.argv[2]), log=lambda line: None)
"""


@pytest.fixture(scope="module")
def reference(random_model_dir, tmp_path_factory):
    """The uninterrupted run, keeping every checkpoint."""
    out = tmp_path_factory.mktemp("reference") / "run"
    train(small_config(random_model_dir, *SETTINGS, "run.keep_checkpoints=100"), out, log=lambda line: None)
    return out


def start_child(cfg, out: Path, kill: str | None, tmp_path: Path) -> subprocess.Popen:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(resolved_config(cfg, derive_plan(cfg))))
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("BATCHSCALE_TEST_KILL", None)
    if kill:
        env["BATCHSCALE_TEST_KILL"] = kill
    return subprocess.Popen([sys.executable, "-c", CHILD, str(config), str(out)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def check_after_kill(out: Path, reference: Path) -> int:
    """Every checkpoint that passes its checks is the reference's; returns the newest such step (0: none)."""
    newest = 0
    for step, path in checkpoint_steps(out):
        try:
            read_checkpoint(path)
        except CheckpointProblem:
            continue  # torn: resume skips it
        for name in TENSOR_FILES:
            assert (path / name).read_bytes() == (reference / "checkpoints" / path.name / name).read_bytes(), \
                f"checkpoint {path.name} loads but its {name} is not the uninterrupted run's"
        newest = max(newest, step)
    return newest


def resume_and_compare(out: Path, reference: Path, newest_ok: int) -> None:
    steps_written = [r["step"] for r in read_records(out) if r["kind"] == "step"] if (out / "metrics.jsonl").exists() else []
    lines = []
    train(resume_config(out), out, log=lines.append, resume=True)
    resumed_from = next((int(line.split("step ")[1].split(",")[0]) for line in lines if " from step-" in line), 0)
    assert resumed_from == newest_ok
    assert (max(steps_written, default=0) - resumed_from) <= 1  # at most one checkpoint interval (one step) lost
    assert timeless(read_records(out)) == timeless(read_records(reference))


@pytest.mark.parametrize("kill", ["write:7", "write:14", "eval:2", "step:5"])
def test_a_kill_at_a_chosen_point_resumes_to_the_uninterrupted_records(kill, reference, random_model_dir, tmp_path):
    """A checkpoint fsyncs 5 times (3 tensor files, the manifest, then the directory after the rename): write:7 is
    the 2nd checkpoint's second file, write:14 the 3rd's manifest, before its rename; eval:2 is the eval after step 2
    (evals at 0, 24, 48, ... samples), step:5 the 5th actor update."""
    cfg = small_config(random_model_dir, *SETTINGS)
    out = tmp_path / "run"
    child = start_child(cfg, out, kill, tmp_path)
    _, err = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]
    assert not (out / "summary.json").exists()
    resume_and_compare(out, reference, check_after_kill(out, reference))


@pytest.mark.slow
def test_kills_at_random_moments_resume_to_the_uninterrupted_records(reference, random_model_dir, tmp_path):
    """Kills from outside after a random delay (seeded): some land before the first record, some mid-run."""
    cfg = small_config(random_model_dir, *SETTINGS)
    rng = random.Random(26)
    outcomes = []
    for trial in range(4):
        out = tmp_path / f"run{trial}"
        child = start_child(cfg, out, None, tmp_path)
        time.sleep(rng.uniform(4.5, 8.0))
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        if (out / "summary.json").exists():
            outcomes.append("finished before the kill")
            continue
        newest = check_after_kill(out, reference)
        if not (out / "metrics.jsonl").exists():
            outcomes.append("killed before its first record")
            assert not out.exists() or not any(p.name == "checkpoints" for p in out.iterdir())
            continue
        resume_and_compare(out, reference, newest)
        outcomes.append(f"resumed from step {newest}")
    print("random kill trials:", outcomes)
