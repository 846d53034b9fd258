"""Sweeps resume mid-point: a sweep killed (SIGKILL) while a point trains, once it has a checkpoint, and rerun finishes
with the uninterrupted sweep's records, times aside, and says that it resumed; a staging directory without a usable
checkpoint, or whose config the sweep file no longer gives, starts its point again; of several staging directories
of a point the newest checkpoint wins; only names batchscale made are removed; a racing sweep resumes its seeds, and
a resumed run's stop rule sees every record from the run's first."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_resume import Interrupted, interrupt_at, timeless
from test_sweep import interrupted_staging, sweep_cli, write_sweep
from test_trainer import read_records, small_config

from batchscale.rundir.checkpoint import MANIFEST, checkpoint_steps
from batchscale.rundir.staging import STAGING_LOCK_NAME, STAGING_NAME
from batchscale.sweep.runner import available_cores, prepare_sweep_dir
from batchscale.sweep.spec import load_sweep_spec
from batchscale.train.loop import train

# every step checkpoints (the newest 2 kept), no policy saved: P2 (4 samples a step) and P4 (8), one seed each
SWEEP = ('[set]\n"run.checkpoint_every_samples" = 1\n"run.save_policy" = false\n'
         '[grid]\n"batch.prompts_per_step" = [2, 4]\n')
BUDGET = 32  # P2: 8 steps of a few tenths of a second: time to be killed between its first checkpoint and its end
THREADS = available_cores()  # what `batchscale sweep` gives each run with one worker


def quiet(line: str) -> None:
    pass


def this_code() -> dict:
    """The environment of a `batchscale sweep` subprocess that runs the batchscale this test imported (a relative
    PYTHONPATH would not reach it from the subprocess's working directory)."""
    import batchscale

    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(batchscale.__file__).parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}


def staging_names(sweep_dir: Path) -> list[str]:
    runs = sweep_dir / "runs"
    return sorted(p.name for p in runs.iterdir() if STAGING_NAME.fullmatch(p.name) or
                  STAGING_LOCK_NAME.fullmatch(p.name)) if runs.is_dir() else []


@pytest.fixture(scope="module")
def uninterrupted(random_model_dir, tmp_path_factory):
    """The sweep run to its end without a kill: the records every resumed sweep must write."""
    from batchscale.sweep.driver import run_sweep

    root = tmp_path_factory.mktemp("sweep-resume")
    spec = write_sweep(root, random_model_dir, SWEEP, budget=BUDGET)
    points = load_sweep_spec(spec)
    run_sweep(points, root / "whole", workers=1, threads=THREADS)
    return spec, points, root / "whole"


def test_a_sweep_killed_mid_point_and_rerun_writes_the_uninterrupted_records(uninterrupted, tmp_path):
    spec, points, whole = uninterrupted
    out, first = tmp_path / "out", points[0].name
    proc = subprocess.Popen(sweep_cli(spec, "--out", out), cwd=tmp_path, env=this_code(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def checkpointed() -> list[Path]:
        return sorted((out / "runs").glob(f".{first}.partial-*/checkpoints/step-*/{MANIFEST}"))

    try:
        deadline = time.time() + 120
        while time.time() < deadline and not checkpointed() and proc.poll() is None:
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep, its worker, everything in its session
        proc.wait()
    (staging,) = {path.parents[2] for path in checkpointed()}
    assert not (staging / "summary.json").exists() and not (out / "runs" / first).exists()  # killed mid-point
    step = checkpoint_steps(staging)[-1][0]

    done = subprocess.run(sweep_cli(spec, "--out", out), cwd=tmp_path, env=this_code(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())  # the console wraps long lines
    assert f"grpo-P2-G2-sqrt seed 0: resuming from step {step} (checkpoint, {4 * step:,} samples)" in said
    assert "2 to run (1 from a checkpoint)" in said
    for point in points:
        assert timeless(read_records(out / "runs" / point.name)) == timeless(read_records(whole / "runs" / point.name))
    assert not any(p.name.startswith(".") for p in (out / "runs").iterdir())  # no staging directory, no lock file


def test_without_a_usable_checkpoint_or_with_another_config_a_point_starts_again(uninterrupted, tmp_path,
                                                                                   monkeypatch, capsys):
    from batchscale.sweep.driver import run_sweep

    _, points, whole = uninterrupted
    out = tmp_path / "out"
    torn = interrupted_staging(points[0], out, monkeypatch, 4, THREADS)
    for _, path in checkpoint_steps(torn):  # every checkpoint's write cut before its manifest
        (path / MANIFEST).unlink()
    other = interrupted_staging(points[1], out, monkeypatch, 3, THREADS, "run.eval_every_samples=16")
    foreign = [out / "runs" / ".notes.partial-mine", out / "runs" / ".keep"]
    foreign[0].mkdir()
    foreign[1].write_text("a user's file")

    run_sweep(points, out, workers=1, threads=THREADS)
    said = " ".join(capsys.readouterr().err.split())
    assert "grpo-P2-G2-sqrt seed 0: not resuming its interrupted run (no usable checkpoint): it starts again" in said
    assert ("grpo-P4-G2-sqrt seed 0: not resuming its interrupted run from step 2: its config differs from the "
            "point's in run.eval_every_samples (run.eval_every_samples: 16 in the run, 8 now); it starts again") in said
    assert ": resuming from step" not in said and "from a checkpoint" not in said
    for point in points:
        assert timeless(read_records(out / "runs" / point.name)) == timeless(read_records(whole / "runs" / point.name))
    assert not torn.exists() and not other.exists() and staging_names(out) == []
    assert all(path.exists() for path in foreign)  # only names batchscale made are removed


def test_the_newest_checkpoint_wins_and_a_grown_budget_still_resumes(uninterrupted, tmp_path, monkeypatch):
    _, points, _ = uninterrupted
    out = tmp_path / "out"
    older = interrupted_staging(points[0], out, monkeypatch, 3, THREADS)
    newer = interrupted_staging(points[0], out, monkeypatch, 6, THREADS)
    smaller = interrupted_staging(points[1], out, monkeypatch, 3, THREADS, f"run.budget_samples={BUDGET - 8}")
    state = prepare_sweep_dir(points, out, THREADS, log=quiet)
    assert [p.name for p in state.todo] == [p.name for p in points]
    assert set(state.resumable) == {p.name for p in points}  # P4: the point's budget is larger than its run's
    claimed = state.resumable[points[0].name]
    assert claimed.step == 5 and claimed.samples == 20 and not older.exists() and not newer.exists()
    assert STAGING_NAME.fullmatch(claimed.staging.name) and f".partial-{os.getpid()}-" in claimed.staging.name
    assert state.resumable[points[1].name].step == 2 and not smaller.exists()
    assert staging_names(out) == sorted(r.staging.name for r in state.resumable.values())  # no lock file left
    lines = []
    assert state.staging_for(points[0], out, log=lines.append) == (claimed.staging, True)
    assert lines == ["grpo-P2-G2-sqrt seed 0: resuming from step 5 (checkpoint, 20 samples)"]
    fresh, resume = state.staging_for(points[0], out, log=lines.append)  # claimed once only
    assert not resume and fresh != claimed.staging and not fresh.exists()


def test_a_changed_thread_count_starts_the_point_again(uninterrupted, tmp_path, monkeypatch):
    """run.threads is not one of the keys that may differ on a resume: another --workers restarts the point."""
    _, points, _ = uninterrupted
    out = tmp_path / "out"
    interrupted_staging(points[0], out, monkeypatch, 3, THREADS)
    lines = []
    state = prepare_sweep_dir(points, out, THREADS + 1, log=lines.append)
    assert state.resumable == {} and staging_names(out) == []
    assert any("its config differs from the point's in run.threads" in line for line in lines)


def test_a_racing_sweep_resumes_its_seeds(uninterrupted, tmp_path, monkeypatch, capsys):
    from batchscale.sweep.adaptive import point_for_seed
    from batchscale.sweep.driver import run_sweep
    from batchscale.sweep.race import RaceSettings

    _, points, whole = uninterrupted
    out = tmp_path / "out"
    interrupted_staging(points[0], out, monkeypatch, 4, THREADS)  # the reference P2's seed 0
    unused = interrupted_staging(point_for_seed(points[1], 0), out, monkeypatch, 3, THREADS)
    # a target no run reaches: the reference's first seed trains to its budget, and since no other point's budget can
    # be sized from the reference's N* (issue 38), the race ends there: P4 never starts
    result = run_sweep(points, out, workers=1, threads=THREADS, race=RaceSettings(1, 2), target=1.01)
    assert result["race"]["seeds"] == {"grpo-P2-G2-sqrt": 1, "grpo-P4-G2-sqrt": 0}
    said = " ".join(capsys.readouterr().err.split())
    assert "grpo-P2-G2-sqrt seed 0: resuming from step 3 (checkpoint, 12 samples)" in said
    assert "grpo-P4-G2-sqrt seed 0: resuming" not in said
    assert timeless(read_records(out / "runs" / points[0].name)) == \
        timeless(read_records(whole / "runs" / points[0].name))
    assert not unused.exists() and staging_names(out) == []  # claimed for P4's seed 0, which the race did not run


def test_a_resumed_runs_stop_rule_sees_every_record(random_model_dir, tmp_path, monkeypatch):
    cfg = small_config(random_model_dir, "run.checkpoint_every_samples=1", "run.save_policy=false")
    whole = tmp_path / "whole"
    train(cfg, whole, log=quiet)
    out = tmp_path / "run"
    interrupt_at(monkeypatch, 4)  # checkpoints at steps 2 and 3; step 3 (36 samples) follows an eval
    with pytest.raises(Interrupted):
        train(cfg, out, log=quiet)
    monkeypatch.undo()
    seen: list[list[dict]] = []

    def stop(records: list[dict]):
        seen.append(list(records))
        return None

    train(cfg, out, log=quiet, stop=stop, resume=True)
    expected = timeless(read_records(whole))
    assert timeless(read_records(out)) == expected
    evals = [i for i, r in enumerate(expected) if r["kind"] == "eval" and r["step"] >= 3]
    assert [timeless(records) for records in seen] == [expected[:i + 1] for i in evals]
