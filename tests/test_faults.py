"""Faults, not typos: a sweep killed with SIGKILL leaves no process behind, two sweeps on one directory never run at
once, a rerun adopts only what it trained, --overwrite never loses the old run, a diverging run stops unfinished, and
a full disk is one line naming the path (on a small tmpfs, where this machine lets the test mount one)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchscale.cli import main
from batchscale.rundir import read_run

TIMING_KEYS = {"wall_s", "time/generate", "time/train", "time/step", "time/eval"}


def base_config(model_dir: Path, budget: int = 4, **extra) -> str:
    run = {"budget_samples": budget, "eval_every_samples": 4, "threads": 1, **extra.pop("run", {})}
    sections = {
        "model": {"name": str(model_dir)},
        "task": {"eval_size": 4, **extra.pop("task", {})},
        "batch": {"prompts_per_step": 2, "samples_per_prompt": 2, "micro_batch_size": 2,
                  "reference_samples_per_step": 4},
        "sampling": {"max_new_tokens": 3},
        "run": run,
        **extra,
    }
    return "".join(f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in body.items())
                   for name, body in sections.items())


def write_sweep(tmp_path: Path, model_dir: Path, grid: str, budget: int, **extra) -> Path:
    (tmp_path / "base.toml").write_text(base_config(model_dir, budget, **extra))
    path = tmp_path / "sweep.toml"
    path.write_text(f'base = "base.toml"\n[grid]\n{grid}\n')
    return path


def sweep_cli(*args) -> list[str]:
    return [sys.executable, "-m", "batchscale.cli", "sweep", *map(str, args)]


def session_processes(session_id: int) -> dict[int, str]:
    """Live (not zombie) processes of a session: pid -> command name."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        state, sid = fields[0], int(fields[3])  # fields after the name: state ppid pgrp session ...
        if sid == session_id and state != "Z":
            found[int(entry.name)] = name
    return found


def kill_session(session_id: int) -> None:
    """SIGKILL whatever is left of a session a test started (its leader's pid), if anything."""
    try:
        os.killpg(session_id, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_for(condition, timeout_s: float = 180.0, what: str = "") -> None:
    deadline = time.time() + timeout_s
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def staged_lines(out: Path) -> int:
    """Lines in the metrics of any point training in a staging directory."""
    return max((len(p.read_text().splitlines()) for p in (out / "runs").glob(".*.partial-*/metrics.jsonl")), default=0)


@pytest.fixture
def reward_module(tmp_path):
    """A user reward, so a sweep worker has a reward worker of its own: the kill must take both."""
    (tmp_path / "fault_rewards.py").write_text("def half(response, answer):\n    return 0.5 if answer in response else 0.25\n")
    return tmp_path


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to list a session's processes")
def test_a_second_sweep_is_refused_and_a_killed_sweep_leaves_no_process(tmp_path, random_model_dir, reward_module):
    path = write_sweep(tmp_path, random_model_dir, '"batch.prompts_per_step" = [2, 4]', budget=4000,
                       task={"reward": "fault_rewards:half"})
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(reward_module), os.environ.get("PYTHONPATH", "")])}
    first = subprocess.Popen(sweep_cli(path, "--out", out, "--workers", "2"), cwd=tmp_path, env=env,
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: staged_lines(out) >= 2, what="the first sweep to train")
        second = subprocess.run(sweep_cli(path, "--out", out), cwd=tmp_path, env=env, capture_output=True, text=True)
        assert second.returncode == 2
        assert second.stderr.count("error:") == 1 and "Traceback" not in second.stderr
        assert f"is in use by another sweep (pid {first.pid} on host {socket.gethostname()}" in second.stderr

        workers = session_processes(first.pid)
        assert len(workers) >= 4, workers  # the sweep, two pool workers, their reward workers (and a tracker)
        os.kill(first.pid, signal.SIGKILL)  # the sweep alone: its workers must follow by themselves
        first.wait()
        wait_for(lambda: not session_processes(first.pid), timeout_s=30, what="the sweep's workers to die")
    finally:
        kill_session(first.pid)
    lines = staged_lines(out)
    time.sleep(2)
    assert staged_lines(out) == lines, "something still writes into the sweep"
    assert not [p for p in (out / "runs").iterdir() if not p.name.startswith(".")], "a run was adopted after the kill"


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_rerun_takes_over_a_stale_lock_and_adopts_nothing_it_did_not_train(tmp_path, random_model_dir):
    from batchscale.sweep.driver import run_sweep
    from batchscale.sweep.spec import load_sweep_spec

    points = load_sweep_spec(write_sweep(tmp_path, random_model_dir, '"batch.prompts_per_step" = [2]', budget=8))
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "sweep.lock").write_text(json.dumps({"pid": dead_pid(), "host": socket.gethostname(), "started": 0}))
    # what an orphan of an earlier sweep could have left: a finished-looking run in a staging directory of its own
    foreign = out / "runs" / f".{points[0].name}.partial-99999-deadbeef"
    foreign.mkdir()
    for name, text in (("run.json", "{}"), ("metrics.jsonl", '{"kind": "eval"}\n'), ("summary.json", "{}")):
        (foreign / name).write_text(text)

    result = run_sweep(points, out, threads=1)
    assert result["ran"] == 1 and result["skipped"] == 0
    run = read_run(out / "runs" / points[0].name)
    assert run.finished and [r["step"] for r in run.steps] == [1, 2]  # trained here, every record once
    assert not foreign.exists() and not (out / "sweep.lock").exists()
    assert sorted(p.name for p in (out / "runs").iterdir()) == [points[0].name]


def test_a_lock_held_by_another_host_or_a_live_pid_is_never_taken_over(tmp_path):
    from batchscale.errors import UserError
    from batchscale.rundir.lock import SweepLock

    (tmp_path / "sweep.lock").write_text(json.dumps({"pid": 12345, "host": "elsewhere", "started": 0}))
    with pytest.raises(UserError, match="pid 12345 on host elsewhere"):
        SweepLock(tmp_path).acquire()
    (tmp_path / "sweep.lock").write_text(json.dumps({"pid": 1, "host": socket.gethostname()}))
    with pytest.raises(UserError, match="cannot show to be gone"):
        SweepLock(tmp_path).acquire()
    (tmp_path / "sweep.lock").unlink()
    with SweepLock(tmp_path):
        holder = json.loads((tmp_path / "sweep.lock").read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        with pytest.raises(UserError, match=f"in use by another sweep \\(pid {os.getpid()}"):
            SweepLock(tmp_path).acquire()  # a second open file: its flock is refused, as another process's would be
    assert not (tmp_path / "sweep.lock").exists()


# --- --overwrite and divergence ---------------------------------------------------------------------------------

def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def finished_run(tmp_path, random_model_dir):
    """A finished one-step run at tmp_path/run, and its config."""
    config = tmp_path / "run.toml"
    config.write_text(base_config(random_model_dir))
    assert main(["train", str(config), "--out", str(tmp_path / "run")]) == 0
    return tmp_path / "run", config


def test_overwrite_swaps_in_the_new_run_only_when_it_finishes(finished_run, reward_module, capsys, monkeypatch):
    run_dir, config = finished_run
    old = (run_dir / "metrics.jsonl").read_bytes()
    monkeypatch.syspath_prepend(str(reward_module))
    (reward_module / "nan_reward.py").write_text("def at_step_one(response, answer):\n"
                                                 "    import os\n"
                                                 "    return float('nan') if os.environ.get('NAN_NOW') else 0.5\n")
    capsys.readouterr()
    # a failed start (a bad value) and a run that fails mid-way (a NaN reward at its first step) keep the old run
    assert main(["train", str(config), "--out", str(run_dir), "--overwrite", "--set", "optim.lr=inf"]) == 2
    monkeypatch.setenv("NAN_NOW", "1")
    assert main(["train", str(config), "--out", str(run_dir), "--overwrite",
                 "--set", "task.reward='nan_reward:at_step_one'"]) == 2
    assert "returned nan for input 0" in capsys.readouterr().err
    assert (run_dir / "metrics.jsonl").read_bytes() == old and (run_dir / "summary.json").is_file()
    assert [p.name for p in run_dir.parent.iterdir() if p.name.startswith(".")] == []  # no staging left behind
    # a run that finishes replaces it
    monkeypatch.delenv("NAN_NOW")
    assert main(["train", str(config), "--out", str(run_dir), "--overwrite", "--set", "run.seed=7"]) == 0
    assert read_run(run_dir).seed == 7 and read_run(run_dir).finished


def test_a_diverging_run_stops_at_its_step_unfinished(tmp_path, random_model_dir, reward_module, capsys,
                                                    monkeypatch):
    """lr = 1e30 overflows the next forward pass: the run stops naming the step and the quantity, nothing non-finite
    is written, and the run is unfinished."""
    monkeypatch.syspath_prepend(str(reward_module))
    (reward_module / "coin_reward.py").write_text("def coin(response, answer):\n    return float(len(response) % 2)\n")
    config = tmp_path / "run.toml"
    config.write_text(base_config(random_model_dir, budget=80, optim={"lr": 1e30, "max_grad_norm": 1e30},
                                  task={"reward": "coin_reward:coin"}))
    assert main(["train", str(config), "--out", str(tmp_path / "run")]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "(not finite): training diverged" in error[0], error
    step = int(error[0].split("error: step ")[1].split(":")[0])
    assert step >= 2 and not (tmp_path / "run" / "summary.json").exists()
    assert max(r["step"] for r in records(tmp_path / "run")) == step - 1  # every step before it, nothing of it
    assert "NaN" not in (tmp_path / "run" / "metrics.jsonl").read_text()


def test_reward_collapse_is_a_warning_in_the_summary():
    from batchscale.train.health import CollapseWatch

    watch = CollapseWatch(steps=3)
    rewards = [0.0, 0.5, 0.4, 0.0, 0.0, 0.0, 0.0]  # zero at the start is not a collapse; after being positive it is
    warnings = [watch.update({"step": i + 1, "reward/mean": r, "grad_norm/actor": 1.0 if r else 0.0})
                for i, r in enumerate(rewards)]
    assert warnings[:5] == [None] * 5 and "since step 4 (3 consecutive steps)" in warnings[5] and warnings[6] is None


def test_the_trainer_puts_a_collapse_warning_into_the_summary(tmp_path, random_model_dir, monkeypatch):
    from batchscale.config import load_config
    from batchscale.train.health import CollapseWatch
    from batchscale.train.loop import train

    monkeypatch.setattr(CollapseWatch, "update", lambda self, record: "reward collapse: test" if record["step"] == 1
                        else None)
    config = tmp_path / "run.toml"
    config.write_text(base_config(random_model_dir))
    lines = []
    summary = train(load_config(config), tmp_path / "run", log=lines.append)
    assert summary["warnings"] == ["reward collapse: test"] and "warning: reward collapse: test" in lines
    assert read_run(tmp_path / "run").summary.warnings == ["reward collapse: test"]


# --- a full disk ------------------------------------------------------------------------------------------------

@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs, filled to the last bytes; skipped where this process may not mount one."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path, leave_bytes: int = 0) -> None:
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(disk / "filler", "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))
    try:
        with open(disk / "filler", "ab") as f:  # the last partial block
            while True:
                f.write(b"\0" * 512)
                f.flush()
    except OSError:
        pass
    if leave_bytes:
        os.truncate(disk / "filler", os.path.getsize(disk / "filler") - leave_bytes)


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_a_full_disk_is_one_line_naming_the_path(full_disk, tmp_path, random_model_dir, capsys):
    """Every command that writes, on a full disk: exit 2, one line naming where it wrote, nothing left behind."""
    from batchscale.analysis.synthetic import write_synthetic_sweep

    config = tmp_path / "run.toml"
    config.write_text(base_config(random_model_dir))
    sweep = write_synthetic_sweep(tmp_path / "sweep", prompts_per_step=(4, 8), seeds=(0, 1),
                                  control_prompts_per_step=None, total_samples=1024, eval_every_samples=128)
    lines = [{"step": 0, "data": {"val-core/openai/gsm8k/reward/mean@1": 0.1}}] + [
        {"step": s, "data": {"training/global_step": s, "timing_s/step": 3.0, "actor/grad_norm": 1.0,
                             "critic/score/mean": 0.1 * s, "val-core/openai/gsm8k/reward/mean@1": 0.1 * s}}
        for s in range(1, 4)]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    examples = Path(__file__).parents[1] / "examples"
    shutil.copytree(sweep, full_disk / "sweep")  # report writes into the sweep directory itself
    fill(full_disk)
    before = sorted(p.relative_to(full_disk) for p in full_disk.rglob("*"))

    commands = {
        "train": ["train", str(config), "--out", str(full_disk / "run")],
        "import": ["import", "verl", str(tmp_path / "log.jsonl"), "--out", str(full_disk / "imported"),
                   "--prompts-per-step", "2", "--samples-per-prompt", "2"],
        "analyze": ["analyze", str(sweep), "--out", str(full_disk / "analysis")],
        "report": ["report", str(full_disk / "sweep")],
        "export": ["export", "verl", str(examples / "sweep-tiny.toml"), "--out", str(full_disk / "export")],
    }
    for command, args in commands.items():
        assert main(args) == 2, command
        line = error_line(capsys)
        assert "no space left on the device" in line and str(full_disk) in line, (command, line)
        assert sorted(p.relative_to(full_disk) for p in full_disk.rglob("*")) == before, f"{command} left files"


def test_a_disk_that_fills_mid_run_keeps_the_old_run_under_overwrite(full_disk, tmp_path, random_model_dir, capsys):
    config = tmp_path / "run.toml"
    config.write_text(base_config(random_model_dir, budget=400))
    short = tmp_path / "short.toml"
    short.write_text(base_config(random_model_dir))
    assert main(["train", str(short), "--out", str(full_disk / "run")]) == 0
    old = (full_disk / "run" / "metrics.jsonl").read_bytes()
    fill(full_disk, leave_bytes=20_000)  # room for the new run's first records, not for 100 steps
    capsys.readouterr()
    assert main(["train", str(config), "--out", str(full_disk / "run"), "--overwrite"]) == 2
    line = error_line(capsys)
    assert "no space left on the device" in line and "needed" in line
    assert (full_disk / "run" / "metrics.jsonl").read_bytes() == old and (full_disk / "run" / "summary.json").is_file()
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "run"]
