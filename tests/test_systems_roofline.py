"""Roofline FLOPs/bytes against a hand computation, KV-capacity arithmetic, and the paper's asymmetry sanity check."""

import pytest

from batchscale.systems.hardware import GPU_PRESETS, Hardware
from batchscale.systems.model_shapes import MODEL_PRESETS, ModelShape
from batchscale.systems.roofline import (
    bound_latency,
    build_roofline,
    compute_kv_max_batch,
    count_decode_layer,
    count_decode_model,
    count_kv_bytes_per_sequence,
    count_train_layer,
    count_train_model,
    estimate_decode,
    estimate_train,
)

# hidden 8, 2 layers, 2 heads, 1 kv head, head_dim 4, intermediate 16, vocab 10 -> q_dim 8, kv_dim 4
SMALL = ModelShape("small", 8, 2, 2, 1, 4, 16, 10, 64, tied_embeddings=False)
TOY_HW = Hardware("toy", peak_flops_per_s=1000.0, bandwidth_bytes_per_s=100.0, memory_bytes=10_000.0, source="test")


def test_param_counts_by_hand():
    # attention 8*(8+2*4) + 8*8 = 192, MLP 3*8*16 = 384
    assert SMALL.layer_params == 576
    assert SMALL.params == 2 * 576 + 2 * 80
    assert MODEL_PRESETS["Llama-3.1-8B"].params == pytest.approx(8.03e9, rel=0.01)
    assert MODEL_PRESETS["Qwen2.5-7B"].params == pytest.approx(7.6e9, rel=0.01)


def test_decode_counts_by_hand():
    layer = count_decode_layer(SMALL, batch=3, context=5, dtype_bytes=2)
    assert layer.flops == 2 * 3 * 576 + 4 * 3 * 5 * 8  # matmuls + q.K and attn.V over 5 positions, 8 query dims
    assert layer.bytes == 2 * 576 + 3 * 2 * 5 * 4 * 2  # weights once + each sequence's K and V
    model = count_decode_model(SMALL, batch=3, context=5, dtype_bytes=2)
    assert model.flops == 2 * layer.flops + 2 * 3 * 8 * 10  # + LM head
    assert model.bytes == 2 * layer.bytes + 2 * (80 + 3 * 8)  # + LM head matrix + 3 embedding rows


def test_train_counts_by_hand():
    layer = count_train_layer(SMALL, batch=3, context=5, dtype_bytes=2)
    assert layer.flops == 3 * (2 * 15 * 576 + 4 * 3 * 25 * 8)
    activations_per_token = 4 * 8 + 2 * 8 + 2 * 4 + 3 * 16
    assert layer.bytes == 3 * 2 * 576 + 2 * 2 * 15 * activations_per_token
    model = count_train_model(SMALL, batch=3, context=5, dtype_bytes=2)
    assert model.flops == 2 * layer.flops + 6 * 15 * 80
    assert model.bytes == 2 * layer.bytes + 3 * 2 * 80 + 2 * 2 * 15 * (8 + 10)


def test_bound_and_tokens_per_s():
    decode = estimate_decode(SMALL, TOY_HW, batch=3, context=5)
    assert decode["bound"] == "memory"
    assert decode["model_s"] == pytest.approx(2992 / 100)
    assert decode["tokens_per_s"] == pytest.approx(3 / (2992 / 100))
    assert decode["layer_s"] == pytest.approx(1392 / 100)
    train = estimate_train(SMALL, TOY_HW, batch=3, context=5)
    assert train["model_s"] == pytest.approx(max(125280 / 1000, 20952 / 100))
    assert train["tokens_per_s"] == pytest.approx(15 / train["model_s"])
    time_s, bound = bound_latency(count_train_model(SMALL, 3, 5), Hardware("fast-mem", 1000.0, 1e9, 1.0, "t"))
    assert (bound, time_s) == ("compute", pytest.approx(125.28))
    assert TOY_HW.ridge_flops_per_byte == 10.0


def test_kv_capacity_arithmetic():
    assert count_kv_bytes_per_sequence(SMALL, context=5, dtype_bytes=2) == 2 * 2 * 5 * 4 * 2  # 160
    # 10000 * 0.5 - 2 * 1312 weights = 2376 bytes free -> 14 sequences of 160 bytes
    assert compute_kv_max_batch(SMALL, TOY_HW, context=5, dtype_bytes=2, mem_util=0.5) == 14
    assert compute_kv_max_batch(SMALL, TOY_HW, context=5, dtype_bytes=2, mem_util=0.2) == 0  # weights do not fit
    # longer context -> tighter cap
    h100, qwen = GPU_PRESETS["H100-SXM"], MODEL_PRESETS["Qwen2.5-7B"]
    caps = [compute_kv_max_batch(qwen, h100, context) for context in (1024, 4096, 16384)]
    assert caps[0] > caps[1] > caps[2] > 0
    free_bytes = 80e9 * 0.9 - 2 * qwen.params
    assert caps[1] == int(free_bytes // (2 * 28 * 4096 * 4 * 128 * 2))


def test_paper_asymmetry_h100_qwen7b():
    """32x local training batch -> ~32x compute-bound latency; 32x active decode batch -> a few x latency."""
    hardware, shape = GPU_PRESETS["H100-SXM"], MODEL_PRESETS["Qwen2.5-7B"]
    train_1, train_32 = (estimate_train(shape, hardware, b, 2048) for b in (1, 32))
    assert train_1["bound"] == train_32["bound"] == "compute"
    assert train_32["model_s"] / train_1["model_s"] == pytest.approx(32, rel=0.01)
    decode_1, decode_32 = (estimate_decode(shape, hardware, b, 2048) for b in (1, 32))
    assert decode_1["bound"] == decode_32["bound"] == "memory"
    latency_ratio = decode_32["model_s"] / decode_1["model_s"]
    assert 1 < latency_ratio < 4
    assert decode_32["tokens_per_s"] / decode_1["tokens_per_s"] == pytest.approx(32 / latency_ratio)


def test_build_roofline_rows():
    result = build_roofline(SMALL, TOY_HW, context=5, batches=[1, 20], mem_util=0.5)
    assert result["kv_max_batch"] == 14
    assert [row["kv_fits"] for row in result["rows"]] == [True, False]
    assert result["ridge_flops_per_byte"] == 10.0
