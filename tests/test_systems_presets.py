"""Hardware and model presets, config.json loading, and the cpu micro-benchmark (shrunk)."""

import json

import pytest

from batchscale.errors import UserError
from batchscale.systems import hardware
from batchscale.systems.model_shapes import MODEL_PRESETS, TINY_SHAPE, get_model_shape, load_config_json


def test_gpu_presets_and_ridge():
    h100 = hardware.get_hardware("h100-sxm")  # case-insensitive
    assert (h100.peak_flops_per_s, h100.bandwidth_bytes_per_s, h100.memory_bytes) == (989e12, 3.35e12, 80e9)
    assert h100.ridge_flops_per_byte == pytest.approx(295.2, rel=1e-3)
    assert hardware.get_hardware("H200").memory_bytes == 141e9
    with pytest.raises(UserError, match="A100-80GB, H100-SXM, H200, cpu"):
        hardware.get_hardware("TPUv9")


def test_cpu_micro_benchmark_shrunk():
    cpu = hardware.measure_cpu(copy_mib=4, gemm_n=64, repeats=2)
    assert cpu.name == "cpu"
    assert cpu.peak_flops_per_s > 1e6 and cpu.bandwidth_bytes_per_s > 1e6 and cpu.memory_bytes > 0
    assert hardware.measure_cpu(copy_mib=4, gemm_n=64, repeats=2) is cpu  # cached for the process


def test_model_presets():
    assert set(MODEL_PRESETS) >= {"Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-7B", "Llama-3.1-8B", "Qwen3-8B", "tiny"}
    assert get_model_shape("TINY") is TINY_SHAPE
    assert get_model_shape("Qwen3-8B").head_dim == 128
    with pytest.raises(UserError, match="Qwen2.5-0.5B"):
        get_model_shape("gpt-17")


def test_load_config_json_defaults(tmp_path):
    config = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
              "vocab_size": 100, "max_position_embeddings": 256}
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = get_model_shape(str(tmp_path))  # a directory holding config.json
    assert (shape.num_kv_heads, shape.head_dim, shape.tied_embeddings) == (4, 16, False)
    config.update(num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = load_config_json(tmp_path / "config.json")
    assert (shape.num_kv_heads, shape.head_dim, shape.tied_embeddings) == (2, 32, True)


def test_load_config_json_missing_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2}))
    with pytest.raises(UserError, match="num_attention_heads"):
        load_config_json(path)
    with pytest.raises(UserError, match="no config.json"):
        get_model_shape(str(tmp_path / "missing.json"))


def test_tiny_shape_matches_policy_tiny():
    """TINY_SHAPE mirrors policy/tiny.py's TINY_ARCHITECTURE; read it with ast (importing it needs torch)."""
    import ast
    from pathlib import Path

    import batchscale

    path = Path(batchscale.__file__).parent / "policy" / "tiny.py"
    if not path.is_file():
        pytest.skip("policy/tiny.py not present")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "TINY_ARCHITECTURE":
            arch = {kw.arg: ast.literal_eval(kw.value) for kw in node.value.keywords}
            break
    else:
        pytest.skip("TINY_ARCHITECTURE not found")
    shape = TINY_SHAPE
    assert (shape.hidden_size, shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.intermediate_size,
            shape.max_positions, shape.tied_embeddings) == (
        arch["hidden_size"], arch["num_hidden_layers"], arch["num_attention_heads"], arch["num_key_value_heads"],
        arch["intermediate_size"], arch["max_position_embeddings"], arch["tie_word_embeddings"])
