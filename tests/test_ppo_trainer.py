"""PPO on the shared training loop: its run-log additions, the critic's own learning rate in the run directory, G = 1,
config errors for its keys, and (slow) the example raising eval accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from example_checks import assert_example_learns

from batchscale.config import derive_plan, load_config
from batchscale.errors import UserError
from batchscale.train.loop import train

EXAMPLE = Path(__file__).parents[1] / "examples" / "ppo-tiny.toml"


def ppo_config(model_dir, *extra):
    return load_config(None, [
        f"model.name='{model_dir}'", "algorithm.name=ppo", "batch.prompts_per_step=4", "batch.samples_per_prompt=1",
        "batch.micro_batch_size=2", "batch.reference_samples_per_step=8", "run.budget_samples=12",
        "run.eval_every_samples=8", "task.eval_size=8", "sampling.max_new_tokens=4", "run.threads=1",
        "critic.lr=1e-3", "critic.lr_rule=linear", *extra])


def read_records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def run_dir(random_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("ppo")
    train(ppo_config(random_model_dir, "algorithm.ppo_epochs=2", "algorithm.ppo_mini_batches=2"), out,
          overwrite=True, log=lambda s: None)
    return out


def test_ppo_step_records_carry_actor_and_critic_metrics(run_dir):
    steps = [r for r in read_records(run_dir) if r["kind"] == "step"]
    assert [r["samples"] for r in steps] == [4, 8, 12]  # G = 1: B_train = P
    for r in steps:
        for key in ("grad_norm/actor", "lr/actor", "grad_norm/critic", "lr/critic", "time/train_critic", "loss/value",
                    "critic/explained_variance"):
            assert key in r, key
        assert r["lr/critic"] == pytest.approx(1e-3 * (2 / 8))  # linear rule on the mini-batch of 2 samples
        assert r["lr/actor"] == pytest.approx(1e-4 * (2 / 8) ** 0.5)  # the actor keeps its own (sqrt) rule
        assert r["grad_norm/critic"] > 0 and r["loss/value"] > 0
        assert r["time/generate"] + r["time/train"] + r["time/train_critic"] <= r["time/step"]
        assert "time/generate_baseline" not in r
        assert "reward/zero_std_group_frac" not in r  # G = 1: a "group" of one has no spread to speak of
        for network in ("gns/", "gns/critic/"):  # each update of 2 samples (G = 1) compares 2 chunks of 1 with it
            assert {network + "grad_sq", network + "trace_sigma", network + "b_noise"} <= r.keys(), network


def test_run_directory_records_the_critic_plan(run_dir):
    run = json.loads((run_dir / "run.json").read_text())
    assert run["algorithm"] == "ppo" and run["samples_per_prompt"] == 1
    assert run["lr_critic"] == pytest.approx(2.5e-4) and run["lr_rule_critic"] == "linear"
    derived = json.loads((run_dir / "config.json").read_text())["derived"]
    assert derived["critic"]["lr"] == pytest.approx(2.5e-4) and derived["samples_per_update"] == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert 0 < summary["time_shares"]["train_critic"] < 1


def test_grpo_plan_has_no_critic():
    assert derive_plan(load_config(None)).critic is None


@pytest.mark.parametrize("overrides, field, phrase", [
    (["critic.lr=0"], "critic.lr", "greater than 0"),
    (["critic.lr_rule=cubic"], "critic.lr_rule", "sqrt"),
    (["critic.value_clip=-0.1"], "critic.value_clip", "greater than 0"),
    (["critic.lr_scale=2"], "critic.lr_scale", "valid keys here"),
    (["algorithm.gae_lambda=1.5"], "algorithm.gae_lambda", "less than or equal to 1"),
    (["algorithm.ppo_epochs=0"], "algorithm.ppo_epochs", "greater than or equal to 1"),
    (["algorithm.ppo_mini_batches=3"], "algorithm.ppo_mini_batches", "divisor of 16"),
    (["algorithm.ppo_mini_batches=4", "batch.micro_batch_size=64"], "batch.micro_batch_size", "divisor of 32"),
    (["algorithm.name=grpo", "batch.samples_per_prompt=1"], "batch.samples_per_prompt", "at least 2"),
])
def test_bad_ppo_config_is_one_clear_error(overrides, field, phrase):
    with pytest.raises(UserError) as info:
        load_config(None, ["algorithm.name=ppo", *overrides])
    assert info.value.field == field and phrase in str(info.value) and "\n" not in str(info.value)


def test_ppo_and_remax_accept_one_sample_per_prompt():
    for name in ("ppo", "remax"):
        assert load_config(None, [f"algorithm.name={name}", "batch.samples_per_prompt=1",
                                                   "batch.micro_batch_size=16"]).batch.samples_per_prompt == 1


@pytest.mark.slow
@pytest.mark.heavy
def test_ppo_example_raises_eval_accuracy(tmp_path):
    """examples/ppo-tiny.toml: the warm-started tiny model learns arithmetic under PPO (~45 s on 2 cores)."""
    summary = train(load_config(EXAMPLE), tmp_path, log=lambda s: None)
    assert_example_learns(summary)
