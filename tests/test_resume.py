"""Checkpoints and `train --resume`: a run interrupted after a checkpoint and resumed writes the records of the
uninterrupted run (times aside), for GRPO (with a KL term), PPO (epochs x mini-batches, a critic) and ReMax; a torn
checkpoint is skipped for the previous one; a resume with another config is refused naming the keys; a finished run
leaves its policy where AutoModelForCausalLM loads it."""

from __future__ import annotations

import json

import pytest
from test_trainer import read_records, small_config

from batchscale.cli import main
from batchscale.errors import UserError
from batchscale.rundir.checkpoint import MANIFEST, checkpoint_steps, read_checkpoint
from batchscale.train import loop as training_loop
from batchscale.train.loop import train
from batchscale.train.resume import resume_config

TIMES = ("wall_s",)
CHECKPOINT_EVERY_STEP = ["run.checkpoint_every_samples=1", "run.keep_checkpoints=2"]
ALGORITHMS = {  # small_config: P=4, G=3 (12 samples a step), 5 steps, evals at 0, 25, 50 and the last step
    "grpo": ["run.seed=3", "algorithm.kl_coef=0.05"],
    "ppo": ["run.seed=1", "algorithm.name='ppo'", "batch.samples_per_prompt=2", "batch.micro_batch_size=2",
            "batch.reference_samples_per_step=8", "run.budget_samples=40", "run.eval_every_samples=16",
            "algorithm.ppo_epochs=2", "algorithm.ppo_mini_batches=2", "optim.lr=1e-3", "critic.lr=1e-2"],
    "remax": ["run.seed=3", "algorithm.name='remax'"],
}


def timeless(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMES and not k.startswith("time/")} for r in records]


class Interrupted(Exception):
    pass


def interrupt_at(monkeypatch, step: int) -> None:
    """Make the run die at the start of `step`, as a kill would: after the records and checkpoints before it."""
    real = training_loop.run_step

    def run_step(s, state, source):
        if s == step:
            raise Interrupted(f"killed at step {s}")
        return real(s, state, source)

    monkeypatch.setattr(training_loop, "run_step", run_step)


def quiet(line: str) -> None:
    pass


def interrupted_run(monkeypatch, cfg, out, at_step: int = 4):
    """`cfg` trained into `out` until it dies at the start of `at_step` (interrupt_at)."""
    interrupt_at(monkeypatch, at_step)
    with pytest.raises(Interrupted):
        train(cfg, out, log=quiet)
    monkeypatch.undo()
    return out


@pytest.fixture(scope="module")
def uninterrupted(random_model_dir, tmp_path_factory):
    """Each algorithm's run to its budget, checkpointing every step: the records a resumed run must write."""
    runs = {}
    for name, extra in ALGORITHMS.items():
        out = tmp_path_factory.mktemp(f"whole-{name}")
        train(small_config(random_model_dir, *extra, *CHECKPOINT_EVERY_STEP), out, overwrite=True, log=quiet)
        runs[name] = out
    return runs


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_resumed_run_writes_the_uninterrupted_runs_records(name, uninterrupted, random_model_dir, tmp_path,
                                                              monkeypatch):
    cfg = small_config(random_model_dir, *ALGORITHMS[name], *CHECKPOINT_EVERY_STEP)
    out = tmp_path / "run"
    interrupt_at(monkeypatch, 4)
    with pytest.raises(Interrupted):
        train(cfg, out, log=quiet)
    assert not (out / "summary.json").exists() and (out / "metrics.jsonl").is_file()
    assert [step for step, _ in checkpoint_steps(out)] == [2, 3]  # the newest 2 of steps 1-3
    monkeypatch.undo()

    lines = []
    summary = train(resume_config(out), out, log=lines.append, resume=True)
    assert any(line.startswith(f"resuming {out} from step-000000003: step 3") for line in lines)
    whole = uninterrupted[name]
    assert timeless(read_records(out)) == timeless(read_records(whole))
    expected = json.loads((whole / "summary.json").read_text())
    for key in ("final_eval", "best_eval", "samples", "steps", "finished", "notes"):
        assert summary.get(key) == expected.get(key), key
    # the checkpoints the resumed run wrote are the uninterrupted run's, bit for bit
    for step in (3,):
        a, b = out / "checkpoints" / f"step-{step:09d}", whole / "checkpoints" / f"step-{step:09d}"
        assert read_checkpoint(a).state["numpy_rng"] == read_checkpoint(b).state["numpy_rng"]
        for file in ("actor.safetensors", "actor_optimizer.safetensors", "rng.safetensors"):
            assert (a / file).read_bytes() == (b / file).read_bytes(), file


def test_a_checkpoint_holds_the_config_it_trained_with(uninterrupted):
    out = uninterrupted["ppo"]
    saved = json.loads((out / "config.json").read_text())
    saved.pop("derived")
    assert read_checkpoint(checkpoint_steps(out)[-1][1]).state["config"] == saved


def test_a_torn_checkpoint_is_skipped_for_the_previous_one(uninterrupted, random_model_dir, tmp_path, monkeypatch):
    out = interrupted_run(monkeypatch, small_config(random_model_dir, *ALGORITHMS["grpo"], *CHECKPOINT_EVERY_STEP), tmp_path / "run", 4)
    (out / "checkpoints" / "step-000000003" / MANIFEST).unlink()  # the write was cut before its manifest
    lines = []
    train(resume_config(out), out, log=lines.append, resume=True)
    assert any("skipping checkpoint" in line and "step-000000003" in line and "torn" in line for line in lines)
    assert any("from step-000000002: step 2" in line for line in lines)
    assert timeless(read_records(out)) == timeless(read_records(uninterrupted["grpo"]))


def test_an_altered_checkpoint_file_is_skipped(random_model_dir, tmp_path, monkeypatch):
    out = interrupted_run(monkeypatch, small_config(random_model_dir, *ALGORITHMS["grpo"], *CHECKPOINT_EVERY_STEP), tmp_path / "run", 4)
    weights = out / "checkpoints" / "step-000000003" / "actor.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x40
    weights.write_bytes(bytes(data))
    with pytest.raises(Exception) as error:
        read_checkpoint(weights.parent)
    assert "does not match the size and sha256" in str(error.value)
    manifest = out / "checkpoints" / "step-000000002" / MANIFEST  # another schema version: skipped too
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "version": 99}))
    lines = []
    train(resume_config(out), out, log=lines.append, resume=True)
    assert any("step-000000003" in line and "does not match the size and sha256" in line for line in lines)
    assert any("step-000000002" in line and "its schema version is 99; this batchscale reads 1" in line
               for line in lines)
    assert any("no usable checkpoint" in line for line in lines)  # keep_checkpoints = 2: nothing older is left


def test_without_a_checkpoint_the_run_starts_again(uninterrupted, random_model_dir, tmp_path, monkeypatch):
    cfg = small_config(random_model_dir, *ALGORITHMS["grpo"])  # the default: by time, so none in a short run
    out = tmp_path / "run"
    interrupt_at(monkeypatch, 4)
    with pytest.raises(Interrupted):
        train(cfg, out, log=quiet)
    monkeypatch.undo()
    assert not (out / "checkpoints").exists()
    lines = []
    train(resume_config(out), out, log=lines.append, resume=True)
    assert any("no usable checkpoint, so the run starts again from its first step" in line for line in lines)
    assert timeless(read_records(out)) == timeless(read_records(uninterrupted["grpo"]))


def test_a_resume_refuses_another_config_a_smaller_budget_and_a_finished_run(uninterrupted, random_model_dir,
                                                                               tmp_path, monkeypatch):
    out = tmp_path / "run"
    interrupt_at(monkeypatch, 3)
    with pytest.raises(Interrupted):
        train(small_config(random_model_dir, *ALGORITHMS["grpo"], *CHECKPOINT_EVERY_STEP), out, log=quiet)
    monkeypatch.undo()
    with pytest.raises(UserError, match=r"differs from the run's in batch.prompts_per_step, optim.lr \("):
        resume_config(out, overrides=["batch.prompts_per_step=8", "optim.lr=0.5"])
    with pytest.raises(UserError, match="run.budget_samples: may only grow"):
        resume_config(out, overrides=["run.budget_samples=24"])
    grown = resume_config(out, overrides=["run.budget_samples=72", "run.keep_checkpoints=1"])  # allowed to differ
    assert grown.run.budget_samples == 72
    with pytest.raises(UserError, match="holds a finished run"):
        resume_config(uninterrupted["grpo"])
    with pytest.raises(UserError, match="is not a batchscale run directory"):
        resume_config(tmp_path)


def test_a_grown_budget_continues_past_the_old_one(random_model_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    interrupt_at(monkeypatch, 4)
    with pytest.raises(Interrupted):
        train(small_config(random_model_dir, *ALGORITHMS["grpo"], *CHECKPOINT_EVERY_STEP), out, log=quiet)
    monkeypatch.undo()
    summary = train(resume_config(out, overrides=["run.budget_samples=96"]), out, log=quiet, resume=True)
    steps = [r["step"] for r in read_records(out) if r["kind"] == "step"]
    assert steps == list(range(1, 9)) and summary["samples"] == 96
    assert json.loads((out / "config.json").read_text())["run"]["budget_samples"] == 96


def test_the_cli_resumes_and_refuses_out_with_resume(random_model_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    interrupt_at(monkeypatch, 4)
    with pytest.raises(Interrupted):
        train(small_config(random_model_dir, *ALGORITHMS["remax"], *CHECKPOINT_EVERY_STEP), out, log=quiet)
    monkeypatch.undo()
    assert main(["train", "--resume", str(out), "--out", str(tmp_path / "x")]) == 2
    assert "--out and --overwrite do not apply" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["finished"] is True
    assert (out / "summary.json").is_file()


def test_a_finished_run_saves_a_policy_that_loads_and_generates(uninterrupted):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy = uninterrupted["grpo"] / "policy"
    model, tokenizer = AutoModelForCausalLM.from_pretrained(policy), AutoTokenizer.from_pretrained(policy)
    ids = tokenizer("12+34=", return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=3, do_sample=False, min_new_tokens=3)
    assert out.shape == (1, ids.shape[1] + 3)
    # the trained weights, not the starting model's
    start = AutoModelForCausalLM.from_pretrained(json.loads((uninterrupted["grpo"] / "config.json").read_text())
                                                 ["model"]["name"])
    moved = [not torch.equal(a, b) for a, b in zip(model.state_dict().values(), start.state_dict().values())]
    assert any(moved)


def test_save_policy_false_writes_none(random_model_dir, tmp_path):
    out = tmp_path / "run"
    train(small_config(random_model_dir, "run.save_policy=false", "run.budget_samples=12"), out, log=quiet)
    assert not (out / "policy").exists() and (out / "summary.json").is_file()


def test_the_policy_loads_back_as_model_name(uninterrupted, tmp_path):
    out = tmp_path / "again"
    policy = uninterrupted["grpo"] / "policy"
    train(small_config(policy, "run.budget_samples=12", "run.save_policy=false"), out, log=quiet)
    first = read_records(out)[0]
    assert first["kind"] == "eval" and first["step"] == 0


def test_an_asynchronous_run_resumes_with_its_staleness_bound_held(random_model_dir, tmp_path, monkeypatch):
    cfg = small_config(random_model_dir, "run.seed=3", "rollout.mode='async'", "rollout.max_staleness=1",
                       *CHECKPOINT_EVERY_STEP)
    out = tmp_path / "run"
    interrupt_at(monkeypatch, 4)
    with pytest.raises(Interrupted):
        train(cfg, out, log=quiet)
    monkeypatch.undo()
    lines = []
    train(resume_config(out), out, log=lines.append, resume=True)
    assert any(line.startswith("note: asynchronous resume: the generator restarts") for line in lines)
    steps = [r for r in read_records(out) if r["kind"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5] and [r["samples"] for r in steps] == [12 * i for i in range(1, 6)]
    assert all(r["async/staleness_max"] <= 1 for r in steps)
