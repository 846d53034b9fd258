"""The training loop: sample accounting, the run directory contract, reproducibility, crash safety, learning."""

from __future__ import annotations

import json

import pytest
from example_checks import assert_example_learns

from batchscale.cli import main
from batchscale.config import load_config
from batchscale.train.loop import train

TIMING_KEYS = {"wall_s", "time/generate", "time/train", "time/step", "time/eval"}


def small_config(model_dir, *extra):
    return load_config(None, [
        f"model.name='{model_dir}'", "batch.prompts_per_step=4", "batch.samples_per_prompt=3", "batch.micro_batch_size=4",
        "batch.reference_samples_per_step=12", "run.budget_samples=60", "run.eval_every_samples=25",
        "task.eval_size=16", "sampling.max_new_tokens=4", "run.threads=1", *extra])


def read_records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def run_dir(random_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    train(small_config(random_model_dir), out, overwrite=True, log=lambda s: None)
    return out


def test_samples_advance_by_exactly_p_times_g(run_dir):
    steps = [r for r in read_records(run_dir) if r["kind"] == "step"]
    assert [r["samples"] for r in steps] == [12 * i for i in range(1, 6)]  # ceil(60 / 12) = 5 steps
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert all(r["prompts"] == 4 for r in steps)
    assert all(r["tokens/generated"] <= 12 * 4 for r in steps)


def test_evals_at_start_on_the_interval_and_at_the_end(run_dir):
    evals = [r for r in read_records(run_dir) if r["kind"] == "eval"]
    # eval every 25 samples: at 0, then the first step at or past 25, 50, and the last step
    assert [r["samples"] for r in evals] == [0, 36, 60]
    assert all(0.0 <= r["eval/accuracy"] <= 1.0 for r in evals)


def test_run_directory_follows_the_contract(run_dir):
    run = json.loads((run_dir / "run.json").read_text())
    assert run == {**run, "prompts_per_step": 4, "samples_per_prompt": 3, "samples_per_step": 12, "algorithm": "grpo",
                   "lr_rule": "sqrt", "source": "batchscale", "seed": 0, "label": "grpo-P4-G3-sqrt"}
    assert run["lr"] == pytest.approx(1e-4)  # B_train = B_ref: the sqrt rule leaves lr unchanged
    config = json.loads((run_dir / "config.json").read_text())
    assert config["derived"]["samples_per_step"] == 12 and config["derived"]["accumulation_steps"] == 3
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] and summary["samples"] == 60 and summary["steps"] == 5
    required = {"kind", "step", "samples", "wall_s", "prompts", "reward/mean", "response/length_mean", "tokens/generated",
                "time/generate", "time/train", "time/step", "grad_norm/actor", "lr/actor"}
    for record in read_records(run_dir):
        if record["kind"] == "step":
            assert required <= record.keys()
            # 4 prompt groups of 3: two halves of 2 groups each, so the noise scale is estimated
            assert {"gns/grad_sq", "gns/trace_sigma", "gns/b_noise"} <= record.keys()
            assert record["time/generate"] + record["time/train"] <= record["time/step"]
        else:
            assert {"kind", "step", "samples", "wall_s", "eval/accuracy"} <= record.keys()


def test_same_config_and_seed_give_the_same_log(run_dir, random_model_dir, tmp_path):
    train(small_config(random_model_dir), tmp_path, overwrite=True, log=lambda s: None)
    strip = lambda records: [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]
    assert strip(read_records(tmp_path)) == strip(read_records(run_dir))


def test_another_seed_gives_another_log(run_dir, random_model_dir, tmp_path):
    train(small_config(random_model_dir, "run.seed=1"), tmp_path, overwrite=True, log=lambda s: None)
    rewards = lambda d: [r.get("response/length_mean") for r in read_records(d) if r["kind"] == "step"]
    assert rewards(tmp_path) != rewards(run_dir)


def test_a_crashed_run_keeps_whole_records_and_no_summary(random_model_dir, tmp_path):
    def crash_on_second_step(record):
        if record["kind"] == "step" and record["step"] == 2:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError):
        train(small_config(random_model_dir), tmp_path, overwrite=True, on_record=crash_on_second_step, log=lambda s: None)
    records = read_records(tmp_path)  # every line parses
    assert [r["kind"] for r in records] == ["eval", "step", "step"]
    assert not (tmp_path / "summary.json").exists()


def test_cli_train_json(random_model_dir, tmp_path, capsys):
    args = ["train", "--out", str(tmp_path / "r"), "--json"]
    for item in [f"model.name='{random_model_dir}'", "batch.prompts_per_step=2", "batch.samples_per_prompt=2",
                 "batch.micro_batch_size=2", "run.budget_samples=4", "task.eval_size=4", "sampling.max_new_tokens=2"]:
        args += ["--set", item]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["run_dir"] == str(tmp_path / "r") and summary["samples"] == 4


@pytest.mark.slow
@pytest.mark.heavy
def test_grpo_example_raises_eval_accuracy(tmp_path):
    """The README's example: the warm-started tiny model learns arithmetic under GRPO (~30 s on 2 cores)."""
    from pathlib import Path

    example = Path(__file__).parents[1] / "examples" / "grpo-tiny.toml"
    summary = train(load_config(example), tmp_path, log=lambda s: None)
    assert_example_learns(summary)
