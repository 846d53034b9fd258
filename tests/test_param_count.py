"""Parameter counts: the exact one (policy/param_count.py, transformers on the meta device) against the torch-free Llama
formula (systems/model_shapes.py) on Llama shapes, and against hand counts on architectures the formula does not cover."""

from __future__ import annotations

import json

import pytest

from batchscale.errors import UserError
from batchscale.policy.param_count import count_params_exact
from batchscale.systems.model_shapes import TINY_SHAPE, load_config_json


def llama_config(hidden=64, layers=3, heads=4, kv_heads=2, intermediate=96, vocab=101, tied=False, **extra) -> dict:
    return {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "intermediate_size": intermediate, "vocab_size": vocab,
            "max_position_embeddings": 64, "tie_word_embeddings": tied, **extra}


@pytest.mark.parametrize("config", [llama_config(), llama_config(tied=True), llama_config(kv_heads=4, layers=1),
                                    llama_config(hidden=96, heads=3, kv_heads=1, head_dim=40)])
def test_the_formula_is_the_exact_count_less_the_norm_weights_on_llama_shapes(tmp_path, config):
    """The formula leaves out two RMSNorm weights per layer and the final norm: exactly (2 L + 1) x hidden."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = load_config_json(tmp_path)
    norms = (2 * shape.num_layers + 1) * shape.hidden_size
    assert count_params_exact(tmp_path) == shape.params + norms
    assert count_params_exact(config) == shape.params + norms  # a dict works alike


def test_the_tiny_models_shape_is_its_exact_count_less_norms():
    from batchscale.policy.tiny import TINY_ARCHITECTURE

    exact = count_params_exact({"model_type": "llama", "vocab_size": TINY_SHAPE.vocab_size, **TINY_ARCHITECTURE})
    assert exact == TINY_SHAPE.params + (2 * TINY_SHAPE.num_layers + 1) * TINY_SHAPE.hidden_size


def test_qwen2_adds_its_qkv_biases_to_the_formula(tmp_path):
    config = {**llama_config(tied=True), "model_type": "qwen2"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = load_config_json(tmp_path)
    extra = shape.num_layers * (2 * shape.hidden_size + shape.q_dim + 2 * shape.kv_dim) + shape.hidden_size
    assert count_params_exact(config) == shape.params + extra


def test_gpt2_is_counted_exactly_where_the_llama_formula_cannot_read_it(tmp_path):
    """GPT-2 (learned positions, biases, LayerNorm, fused qkv, tied head): d = 64, V = 100, P = 32, L = 2, by hand:
    wte V d + wpe P d + L (ln 2d + c_attn 3d^2 + 3d + c_proj d^2 + d + ln 2d + c_fc 4d^2 + 4d + c_proj 4d^2 + d)
    + ln_f 2d."""
    d, vocab, positions, layers = 64, 100, 32, 2
    per_layer = 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d + 4 * d * d + 4 * d + 4 * d * d + d
    by_hand = vocab * d + positions * d + layers * per_layer + 2 * d
    config = {"model_type": "gpt2", "n_embd": d, "n_layer": layers, "n_head": 4, "vocab_size": vocab,
              "n_positions": positions, "bos_token_id": 0, "eos_token_id": 0}
    assert count_params_exact(config) == by_hand == 108_544
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="hidden_size"):
        load_config_json(tmp_path)


def test_code_a_config_names_is_never_loaded_and_unknown_types_are_named():
    config = llama_config(auto_map={"AutoModelForCausalLM": "evil_module.Model"}, architectures=["EvilModel"])
    assert count_params_exact(config) == count_params_exact(llama_config())
    with pytest.raises(UserError, match="model_type"):
        count_params_exact({"model_type": "no-such-architecture", "hidden_size": 8})
