"""The catalogue of hostile inputs, round three, part B (issue 39): resume trusts nothing it reads, every bounded
reader is bounded, a full disk from any writer is one line, and what a killed `train` left is cleaned by the next
process that takes the run's lock. Part A (code execution, locks, links, outputs, display) is test_hostile_round3_a.

Each case is an input and its expected outcome. A checkpoint found wanting is skipped with a warning naming why, with
the run's freshly built state untouched (then the previous one is used, or the run starts again); a config.json
edited since the run started, a sweep's staging directory, an oversized, oddly packed or typed file, and a full disk
are one `error:` line, exit 2, no traceback. The bounded readers' cases are in test_hostile_round3_b_readers."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_trainer import read_records, small_config

from batchscale.cli import main
from batchscale.rundir.checkpoint import (MANIFEST, CheckpointProblem, checkpoint_steps, kept_records, read_checkpoint,
                                          usable_checkpoints)
from batchscale.train import loop as training_loop
from batchscale.train.loop import train

CHECKPOINT_EVERY_STEP = ["run.checkpoint_every_samples=1", "run.keep_checkpoints=2", "run.budget_samples=48",
                         "run.save_policy=false"]  # P=4, G=3: 12 samples a step, 4 steps


def refused(capsys, args: list[str], *expected: str) -> str:
    """Exit 2 with exactly one `error:` line holding every `expected` text, and no traceback."""
    code = main([str(a) for a in args])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


class Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def interrupted(random_model_dir, tmp_path_factory):
    """A GRPO run killed at the start of step 4, after checkpoints at steps 2 and 3 (the newest 2 kept)."""
    out = tmp_path_factory.mktemp("round3b") / "run"
    real = training_loop.run_step

    def run_step(step, state, source):
        if step == 4:
            raise Interrupted
        return real(step, state, source)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training_loop, "run_step", run_step)
        with pytest.raises(Interrupted):
            train(small_config(random_model_dir, *CHECKPOINT_EVERY_STEP), out, log=lambda line: None)
    assert [step for step, _ in checkpoint_steps(out)] == [2, 3]
    return out


@pytest.fixture
def run_copy(interrupted, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(interrupted, copy, symlinks=True)
    return copy


@pytest.fixture(scope="module")
def fresh_state(interrupted):
    """A training state freshly built for the interrupted run's config, as `train --resume` builds it."""
    from batchscale.train.resume import resume_config
    from batchscale.train.state import build_training_state

    state = build_training_state(resume_config(interrupted), log=lambda line: None)
    yield state
    state.task.close()


def edit_manifest(checkpoint: Path, change) -> None:
    manifest = json.loads((checkpoint / MANIFEST).read_text())
    change(manifest)
    (checkpoint / MANIFEST).write_text(json.dumps(manifest))


def replace_file(checkpoint: Path, name: str, data: bytes) -> None:
    """Write `data` as the checkpoint's file `name` and give the manifest its true size and sha256, as a hostile
    editor would, so only the content checks stand between it and the run."""
    (checkpoint / name).write_bytes(data)
    edit_manifest(checkpoint, lambda m: m["files"].__setitem__(name, {
        "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}))


def safetensors_bytes(tensors: dict) -> bytes:
    from safetensors.torch import save

    return save(tensors)


def huge_header(checkpoint: Path) -> None:
    """rng.safetensors whose header claims a 1 TiB tensor."""
    data = (checkpoint / "rng.safetensors").read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    header["torch"].update(shape=[2**40], data_offsets=[0, 2**40])
    text = json.dumps(header).encode()
    replace_file(checkpoint, "rng.safetensors", struct.pack("<Q", len(text)) + text + data[8 + size:])


def short_torch_rng(checkpoint: Path) -> None:
    import torch

    replace_file(checkpoint, "rng.safetensors", safetensors_bytes({"torch": torch.zeros(10, dtype=torch.uint8)}))


def reshaped_weights(checkpoint: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(checkpoint / "actor.safetensors")
    key = sorted(tensors)[0]
    tensors[key] = tensors[key].flatten()[:-1].contiguous()
    replace_file(checkpoint, "actor.safetensors", safetensors_bytes(tensors))


def state_edit(change):
    return lambda checkpoint: edit_manifest(checkpoint, lambda m: change(m["state"]))


# (name, how the newest checkpoint is altered, what prepare_restore says): each skipped, nothing of it restored
CONTENT_CASES = [
    ("loop step past its own", state_edit(lambda s: s["loop"].update(step=5)), "its loop is at step 5, its manifest at step 3"),
    ("loop samples", state_edit(lambda s: s["loop"].update(samples=48)), "its loop is at 48 samples"),
    ("next eval", state_edit(lambda s: s["loop"].update(next_eval=7)), "its next eval at 7 samples"),
    ("wall clock", state_edit(lambda s: s["loop"].update(wall_s=-1)), "wall-clock time -1"),
    ("optimizer lr", state_edit(lambda s: s["optimizers"]["actor"]["param_groups"][0].update(lr=0.05)),
     "its actor optimizer's lr is 0.05, but the run's config gives 0.0001"),
    ("optimizer betas", state_edit(lambda s: s["optimizers"]["actor"]["param_groups"][0].update(betas=[0.5, 0.5])),
     "its actor optimizer's betas is [0.5, 0.5]"),
    ("another network", state_edit(lambda s: s["optimizers"].update(critic=s["optimizers"]["actor"])),
     "it holds the optimizers of ['actor', 'critic']"),
    ("empty state", lambda c: edit_manifest(c, lambda m: m.update(state={})), "its state has no loop"),
    ("python rng wrong size", state_edit(lambda s: s["python_random"][1].pop()),
     "its Python random state cannot be restored (state vector is the wrong size)"),
    ("numpy rng of another generator", state_edit(lambda s: s["numpy_rng"].update(bit_generator="MT19937")),
     "its numpy generator state cannot be restored"),
    ("noise scale text", state_edit(lambda s: s["noise_scales"]["actor"].update(grad_sq="0.1")),
     "its noise scale 'actor'"),
    ("trained with another config", state_edit(lambda s: s["config"]["batch"].update(prompts_per_step=8)),
     "it was trained with another config (batch.prompts_per_step: 8 in it, 4 in the run)"),
    ("safetensors header claiming 1 TiB", huge_header, "rng.safetensors is not a readable safetensors file"),
    ("torch rng of the wrong size", short_torch_rng, "its torch generator state is (10,) torch.uint8, not 5056 bytes"),
    ("weights of another shape", reshaped_weights, "actor.safetensors holds"),
]


def parameters(state) -> list:
    return [p.detach().clone() for p in state.actor.model.parameters()]


@pytest.mark.parametrize("name, alter, says", CONTENT_CASES, ids=[c[0] for c in CONTENT_CASES])
def test_a_wanting_checkpoint_is_refused_before_anything_is_restored(name, alter, says, run_copy, fresh_state):
    import random

    import torch

    from batchscale.train.checkpointing import prepare_restore
    from batchscale.train.resume import MAY_DIFFER

    newest = run_copy / "checkpoints" / "step-000000003"
    alter(newest)
    checkpoint = read_checkpoint(newest)  # the files are the manifest's: only the content checks catch it
    before = (parameters(fresh_state), torch.get_rng_state(), random.getstate(), fresh_state.rng.bit_generator.state,
              fresh_state.actor.optimizer.param_groups[0]["lr"])
    with pytest.raises(CheckpointProblem) as problem:
        prepare_restore(fresh_state, checkpoint, MAY_DIFFER)
    assert says in str(problem.value)
    after = (parameters(fresh_state), torch.get_rng_state(), random.getstate(), fresh_state.rng.bit_generator.state,
             fresh_state.actor.optimizer.param_groups[0]["lr"])
    assert all(torch.equal(a, b) for a, b in zip(before[0], after[0])) and torch.equal(before[1], after[1])
    assert before[2:] == after[2:]


def test_the_unaltered_checkpoint_passes_every_check(interrupted, fresh_state):
    from batchscale.train.checkpointing import prepare_restore
    from batchscale.train.resume import MAY_DIFFER

    prepared = prepare_restore(fresh_state, read_checkpoint(interrupted / "checkpoints" / "step-000000003"), MAY_DIFFER)
    assert prepared.checkpoint.step == 3 and set(prepared.weights) == {"actor"}


def outside_link(checkpoint: Path) -> None:
    outside = checkpoint.parents[2] / "outside.safetensors"
    shutil.copy(checkpoint / "rng.safetensors", outside)
    (checkpoint / "rng.safetensors").unlink()
    (checkpoint / "rng.safetensors").symlink_to(outside)


def linked_checkpoint(checkpoint: Path) -> None:
    moved = checkpoint.parents[2] / "elsewhere"
    checkpoint.rename(moved)
    checkpoint.symlink_to(moved)


def giant_manifest(checkpoint: Path) -> None:
    with open(checkpoint / MANIFEST, "r+b") as f:
        f.truncate(2**40)  # sparse: 1 TiB that is never read


# (name, alteration, what read_checkpoint / kept_records say)
FORM_CASES = [
    ("file linking out of the run", outside_link, "rng.safetensors is a link (to"),
    ("checkpoint directory that is a link", linked_checkpoint, "it is a link (to"),
    ("5,000-digit step", lambda c: (c / MANIFEST).write_text((c / MANIFEST).read_text().replace(
        '"step": 3', '"step": 1' + "0" * 5000)), "checkpoint.json is unreadable"),
    ("manifest of 1 TiB", giant_manifest, "more than the 67,108,864 this reads"),
    ("samples against its last record", lambda c: edit_manifest(c, lambda m: m.update(samples=40)),
     "it says 40 samples, but its last record in metrics.jsonl 36"),
    ("manifest naming itself", lambda c: edit_manifest(c, lambda m: m["files"].update({MANIFEST: {}})),
     "names a file 'checkpoint.json'"),
]


@pytest.mark.parametrize("name, alter, says", FORM_CASES, ids=[c[0] for c in FORM_CASES])
def test_a_checkpoint_of_the_wrong_form_is_skipped_with_a_warning(name, alter, says, run_copy):
    newest = run_copy / "checkpoints" / "step-000000003"
    alter(newest)
    warnings = []
    found = list(usable_checkpoints(run_copy, warn=warnings.append))
    assert [checkpoint.step for checkpoint, _ in found] == [2]  # the previous one is still used
    assert len(warnings) == 1 and "skipping checkpoint" in warnings[0] and says in warnings[0], warnings


def test_checkpoints_that_are_a_link_are_not_read(run_copy):
    (run_copy / "checkpoints").rename(run_copy.parent / "elsewhere")
    (run_copy / "checkpoints").symlink_to(run_copy.parent / "elsewhere")
    warnings = []
    assert list(usable_checkpoints(run_copy, warn=warnings.append)) == []
    assert "it is a link" in warnings[0]


def test_kept_records_must_end_at_the_checkpoint(run_copy):
    checkpoint = read_checkpoint(run_copy / "checkpoints" / "step-000000003")
    assert kept_records(run_copy, checkpoint)[-1] == {**kept_records(run_copy, checkpoint)[-1], "step": 3,
                                                        "samples": 36}


@pytest.mark.slow  # two resumes of the tiny model: ~20 s on 2 cores
def test_a_resume_past_a_wanting_checkpoint_trains_from_the_previous_one(run_copy, capsys):
    """The loop step past its own (before: resumed at step 5, steps 4 and 5 never trained) and an optimizer lr of
    0.05 (before: trained at it, logged against run.json's 1e-4): skipped with a warning, and the run resumes from
    the checkpoint before, every step trained once at the config's lr."""
    edit_manifest(run_copy / "checkpoints" / "step-000000003", lambda m: m["state"]["loop"].update(step=5))
    edit_manifest(run_copy / "checkpoints" / "step-000000002",
                  lambda m: m["state"]["optimizers"]["actor"]["param_groups"][0].update(lr=0.05))
    assert main(["train", "--resume", str(run_copy)]) == 0
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and "its loop is at step 5, its manifest at step 3" in err
    assert "its actor optimizer's lr is 0.05, but the run's config gives 0.0001" in err
    assert "no usable checkpoint, so the run starts again from its first step" in err
    steps = [r for r in read_records(run_copy) if r["kind"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4] and {r["lr/actor"] for r in steps} == {1e-4}


def test_a_config_edited_to_another_batch_is_refused_naming_the_keys(run_copy, capsys):
    """Before: resumed at P = 8 and rewrote run.json over records trained at P = 4."""
    config = json.loads((run_copy / "config.json").read_text())
    config["batch"]["prompts_per_step"] = 8
    (run_copy / "config.json").write_text(json.dumps(config))
    before = {p.relative_to(run_copy): p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
    refused(capsys, ["train", "--resume", run_copy], "config.json no longer describes the run",
            "prompts_per_step: 4 in run.json, 8 from config.json",
            "batch.prompts_per_step: 4 at checkpoint step 3, 8 in config.json")
    assert {p.relative_to(run_copy): p.read_bytes() for p in run_copy.rglob("*") if p.is_file()} == before


def test_a_sweeps_staging_directory_is_resumed_only_by_the_sweep(interrupted, tmp_path, capsys):
    """Before: `train --resume` trained inside a live sweep's staging directory, a second writer beside its
    worker."""
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    staging = sweep / "runs" / ".grpo-P4-G3-sqrt__s0.partial-4242-0badcafe"
    shutil.copytree(interrupted, staging)
    refused(capsys, ["train", "--resume", staging], "is a staging directory of the sweep",
            f"rerun the sweep (batchscale sweep SWEEP_FILE --out {sweep})")
    from batchscale.train.resume import check_resumable

    check_resumable(staging, through_sweep=True)  # the sweep's own worker may


def small_config_overrides() -> list[str]:
    return ["batch.prompts_per_step=2", "batch.samples_per_prompt=2", "batch.micro_batch_size=2",
            "batch.reference_samples_per_step=4", "run.budget_samples=4", "task.eval_size=2",
            "sampling.max_new_tokens=2", "run.threads=1"]


# --- a full disk from any writer ------------------------------------------------------------------------------------

FILE_SIZE_LIMIT = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as a full disk does
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
"""


def under_file_size_limit(limit: int, code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `code` in a child process whose files may not grow past `limit` bytes (RLIMIT_FSIZE): every write past
    it fails with EFBIG, whatever library does it (safetensors' Rust writer included)."""
    import batchscale

    return subprocess.run([sys.executable, "-c", FILE_SIZE_LIMIT.format(limit=limit) + code], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(Path(batchscale.__file__).parents[1])})


def test_safetensors_full_disk_during_a_checkpoint_is_one_line_and_removes_it(tmp_path):
    """safetensors raises its own SafetensorError, not OSError: before, a traceback."""
    done = under_file_size_limit(100_000, """
import numpy as np
from safetensors.numpy import save_file
from batchscale.errors import UserError
from batchscale.rundir.checkpoint import write_checkpoint
try:
    write_checkpoint("run", 1, 4, 2, {}, lambda d: save_file({"w": np.zeros(100_000, np.float32)}, str(d / "actor.safetensors")), 2)
except UserError as e:
    print(e)
""", tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "run/checkpoints/step-000000001: cannot be written: no space left on the device" in done.stdout
    assert list((tmp_path / "run" / "checkpoints").iterdir()) == []  # the hidden staging directory is gone


def test_a_full_disk_mid_line_cuts_the_half_line_back_off(tmp_path):
    done = under_file_size_limit(3_000, """
from batchscale.errors import UserError
from batchscale.rundir.run import RunDescriptor, RunLog
log = RunLog("run", RunDescriptor(label="a", seed=0, samples_per_step=4, samples_per_update=4))
try:
    for step in range(1, 1000):
        log.write({"kind": "eval", "step": step, "samples": 4 * step, "wall_s": 1.0, "eval/accuracy": 0.123456789})
except UserError as e:
    print(e)
""", tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "metrics.jsonl: cannot be written: no space left on the device (the write needed" in done.stdout
    text = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    assert text.endswith(b"\n") and all(json.loads(line) for line in text.splitlines())


@pytest.mark.slow  # two tiny trainings in child processes: ~30 s on 2 cores
@pytest.mark.parametrize("writer, overrides", [
    ("checkpoints/step-000000001", ["run.checkpoint_every_samples=4", "run.save_policy=false"]),
    ("policy", []),
])
def test_a_full_disk_in_train_is_one_line_and_leaves_nothing_half_written(writer, overrides, random_model_dir,
                                                                          tmp_path):
    """The model's 320 kB of weights pass a 200 kB limit neither as a checkpoint nor as the saved policy."""
    args = ["train", "--out", "run", f"--set=model.name='{random_model_dir}'",
            *(f"--set={o}" for o in [*small_config_overrides(), "run.budget_samples=8", *overrides])]
    done = under_file_size_limit(200_000, f"from batchscale.cli import main\nsys.exit(main({args!r}))", tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(errors) == 1, done.stderr
    assert f"run/{writer}: cannot be written: no space left on the device" in errors[0]
    leftovers = [p.name for p in (tmp_path / "run").rglob("*") if p.name.startswith(".") and p.name != ".batchscale"]
    assert leftovers == [] and not (tmp_path / "run" / "policy").exists()


# --- what a killed train left is cleaned by the next lock holder ----------------------------------------------------

def test_the_next_lock_holder_removes_a_dead_writers_staging_and_keeps_a_live_ones(tmp_path):
    import os

    from batchscale.rundir.lock import RunLock

    run = tmp_path / "kill"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    dead = [tmp_path / ".kill.training-999999999-deadbeef", tmp_path / ".kill.writing-999999999-0badf00d",
            tmp_path / ".kill.replaced-999999999-00c0ffee"]
    live = tmp_path / f".kill.training-{os.getpid()}-12345678"
    others = [tmp_path / ".other.training-999999999-deadbeef", tmp_path / ".kill.training-mine"]
    for path in [*dead, live, *others]:
        path.mkdir()
        (path / "metrics.jsonl").write_text("{}\n")
    (tmp_path / ".kill.lock").write_text(json.dumps({"pid": 999999999, "host": __import__("socket").gethostname()}))
    with RunLock(run) as lock:
        assert sorted(lock.cleared) == sorted(dead)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["kill", live.name, *(p.name for p in others)])


def test_an_earlier_run_a_kill_caught_mid_swap_is_put_back(tmp_path):
    from batchscale.rundir.lock import RunLock

    replaced = tmp_path / ".kill.replaced-999999999-deadbeef"
    replaced.mkdir()
    (replaced / "summary.json").write_text("{}")
    with RunLock(tmp_path / "kill"):
        pass
    assert (tmp_path / "kill" / "summary.json").is_file() and not replaced.exists()


@pytest.mark.slow  # a real SIGKILL of `train --overwrite`, then a second train: ~40 s on 2 cores
def test_after_sigkill_of_train_overwrite_the_next_train_leaves_no_kill_files(random_model_dir, tmp_path):
    import os
    import signal

    args = [f"--set=model.name='{random_model_dir}'", *(f"--set={o}" for o in small_config_overrides())]
    assert main(["train", "--out", str(tmp_path / "kill"), *args]) == 0
    old = (tmp_path / "kill" / "metrics.jsonl").read_bytes()
    child = subprocess.Popen([sys.executable, "-m", "batchscale.cli", "train", "--out", "kill", "--overwrite", *args,
                              "--set=run.budget_samples=40000"], cwd=tmp_path, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(tmp_path.glob(".kill.training-*/metrics.jsonl")):
            time.sleep(0.05)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert list(tmp_path.glob(".kill.training-*")) and (tmp_path / ".kill.lock").exists()  # what the kill left
    assert (tmp_path / "kill" / "metrics.jsonl").read_bytes() == old  # the old run is intact
    assert main(["train", "--out", str(tmp_path / "kill"), "--overwrite", *args]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kill"]
