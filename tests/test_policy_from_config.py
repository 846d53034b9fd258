"""A model directory with a config.json and a tokenizer but no weights is built from its config, seeded.

examples/models/llama-10m is such a directory: the ~10M-parameter Llama that `profile training` is measured on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from batchscale.config import ModelConfig, TaskConfig
from batchscale.errors import UserError
from batchscale.policy.load import load_policy

LLAMA_10M = Path(__file__).resolve().parent.parent / "examples" / "models" / "llama-10m"


def test_config_only_directory_builds_a_seeded_random_model():
    messages = []
    first = load_policy(ModelConfig(name=str(LLAMA_10M), dtype="bfloat16"), TaskConfig(), log=messages.append)
    second = load_policy(ModelConfig(name=str(LLAMA_10M), dtype="bfloat16"), TaskConfig(), log=lambda m: None)
    assert any("no weight files" in m and "random weights" in m for m in messages)
    assert 10.0e6 < first.num_params < 11.0e6
    assert all(p.dtype == torch.bfloat16 for p in first.model.parameters())
    for a, b in zip(first.model.parameters(), second.model.parameters()):
        assert torch.equal(a, b)  # the same model on every load
    assert first.tokenizer("12+34=")["input_ids"][0] == first.tokenizer.bos_token_id


def test_random_state_is_left_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    load_policy(ModelConfig(name=str(LLAMA_10M)), TaskConfig(), log=lambda m: None)
    assert torch.equal(torch.rand(3), expected)  # building the model did not consume the caller's generator


def test_directory_without_tokenizer_is_a_clear_error(tmp_path):
    shutil.copy(LLAMA_10M / "config.json", tmp_path / "config.json")
    with pytest.raises(UserError, match="model.name.*tokenizer.*tokenizer.json"):
        load_policy(ModelConfig(name=str(tmp_path)), TaskConfig(), log=lambda m: None)
