"""ReMax on the shared training loop: the greedy baseline is generated, scored and timed on its own, no critic is
built; and (slow) the example raises eval accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from example_checks import assert_example_learns

from batchscale.config import load_config
from batchscale.train.loop import train

EXAMPLE = Path(__file__).parents[1] / "examples" / "remax-tiny.toml"


def test_remax_step_records_time_the_greedy_baseline(random_model_dir, tmp_path):
    cfg = load_config(None, [
        f"model.name='{random_model_dir}'", "algorithm.name=remax", "batch.prompts_per_step=3",
        "batch.samples_per_prompt=2", "batch.micro_batch_size=3", "run.budget_samples=12", "task.eval_size=4",
        "sampling.max_new_tokens=4", "run.threads=1"])
    summary = train(cfg, tmp_path, overwrite=True, log=lambda s: None)
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "step"]
    assert [r["samples"] for r in steps] == [6, 12]  # the greedy responses are not training samples
    for r in steps:
        assert r["time/generate_baseline"] > 0 and 0 <= r["reward/baseline_mean"] <= 1
        assert r["time/generate"] + r["time/generate_baseline"] + r["time/train"] <= r["time/step"]
        assert not any(key.endswith("/critic") for key in r)
    assert 0 < summary["time_shares"]["generate_baseline"] < 1
    assert "lr_critic" not in json.loads((tmp_path / "run.json").read_text())


@pytest.mark.slow
@pytest.mark.heavy
def test_remax_example_raises_eval_accuracy(tmp_path):
    """examples/remax-tiny.toml: the warm-started tiny model learns arithmetic under ReMax (~45 s on 2 cores)."""
    summary = train(load_config(EXAMPLE), tmp_path, log=lambda s: None)
    assert_example_learns(summary)
