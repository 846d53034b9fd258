"""The fused small ops of a bf16 decode step (rollout/native.py, kernels/decode_avx512.c) against torch in float32.

Each op computes in float32 and rounds its output once to bf16, so each is held to its float32 reference over the
same bf16 inputs within two bf16 ulps (relative 2^-6). Attention is checked against scaled_dot_product_attention
with a per-row length mask and grouped KV heads, rows of different lengths (whole blocks of 16 scores and tails),
head sizes 16, 64 and 80 (the register and the memory path), on one and two threads. `decode_layer` (a whole layer in one call)
equals the same ops called one by one, bit for bit, cache writes included. The whole fused decode is checked against
torch's bf16 decode in tests/test_rollout_weights.py. Skipped, with the reason, on
a CPU without avx512_bf16.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from batchscale.rollout import native
from batchscale.rollout.weights import LayerWeights

pytestmark = pytest.mark.skipif(native.bf16_linear_kernel("avx512_bf16") is None,
                                reason=f"AVX512-BF16 kernels unavailable: {native.unavailable_reason('avx512_bf16')}")
BF16_TOL = dict(rtol=2**-6, atol=1e-2)


def bf16(*shape, gen):
    return torch.randn(*shape, generator=gen).to(torch.bfloat16)


@pytest.mark.parametrize("with_delta", [False, True])
def test_add_rms_norm(with_delta):
    gen = torch.Generator().manual_seed(0)
    x, delta, weight = bf16(3, 77, gen=gen), bf16(3, 77, gen=gen), bf16(77, gen=gen)
    summed = (x.float() + delta.float()).to(torch.bfloat16) if with_delta else x.clone()
    got = native.add_rms_norm(x, delta if with_delta else None, weight, 1e-5)
    assert torch.equal(x, summed)  # the residual add happened in place, rounded as torch adds bf16
    expected = F.rms_norm(summed.float(), (77,), weight.float(), 1e-5)
    torch.testing.assert_close(got.float(), expected, **BF16_TOL)


def test_rope_rotates_q_and_k_heads_only():
    gen = torch.Generator().manual_seed(1)
    rows, dim, heads, width = 3, 8, 3, 5 * 8  # 3 rotated heads, 2 left alone (the v heads)
    qkv = bf16(rows, width, gen=gen)
    angles = torch.arange(10)[:, None] * torch.rand(dim // 2, generator=gen)[None]  # (length, D/2)
    cos, sin = (f(torch.cat((angles, angles), -1)).to(torch.bfloat16) for f in (torch.cos, torch.sin))
    positions = torch.tensor([0, 7, 3])
    x = qkv[:, : heads * dim].float().view(rows, heads, dim)
    c, s = cos[positions].float()[:, None], sin[positions].float()[:, None]
    expected = x * c + torch.cat((-x[..., dim // 2:], x[..., : dim // 2]), -1) * s
    before = qkv.clone()
    native.rope(qkv, cos, sin, positions, heads)
    torch.testing.assert_close(qkv[:, : heads * dim].float().view(rows, heads, dim), expected, **BF16_TOL)
    assert torch.equal(qkv[:, heads * dim:], before[:, heads * dim:])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dim, length", [(16, 12), (64, 37), (80, 20)])  # D <= 64 in registers, D = 80 in memory
def test_attention_equals_masked_sdpa(threads, dim, length):
    gen = torch.Generator().manual_seed(2)
    rows, heads, kv_heads = 3, 4, 2
    qkv = bf16(rows, (heads + 2 * kv_heads) * dim, gen=gen)
    keys, values = bf16(5, kv_heads, length, dim, gen=gen), bf16(5, kv_heads, length, dim, gen=gen)  # 5 slots
    lengths = torch.tensor([1, length, length // 2 + 1])  # blocks of 16 scores and their tails
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = native.attention(qkv, heads, keys, values, lengths, 0.25)
    finally:
        torch.set_num_threads(before)
    q = qkv[:, : heads * dim].float().view(rows, heads, 1, dim)
    mask = (torch.arange(length)[None] < lengths[:, None])[:, None, None]  # (B, 1, 1, L)
    expected = F.scaled_dot_product_attention(q, keys[:rows].float(), values[:rows].float(), attn_mask=mask,
                                              scale=0.25, enable_gqa=True)  # (B, H, 1, D)
    torch.testing.assert_close(got.float(), expected.reshape(rows, heads * dim), **BF16_TOL)


def test_silu_mul():
    gen = torch.Generator().manual_seed(3)
    gate_up = bf16(3, 2 * 37, gen=gen)
    gate, up = gate_up.float().chunk(2, dim=-1)
    torch.testing.assert_close(native.silu_mul(gate_up).float(), F.silu(gate) * up, **BF16_TOL)


@pytest.mark.parametrize("with_delta", [False, True])
def test_decode_layer_equals_its_ops_one_by_one(with_delta):
    gen = torch.Generator().manual_seed(4)
    rows, d, heads, kv_heads, dim, ffn, length = 3, 64, 4, 2, 16, 96, 10
    width = (heads + 2 * kv_heads) * dim
    w = LayerWeights(input_norm=bf16(d, gen=gen), qkv=bf16(width, d, gen=gen), qkv_bias=bf16(width, gen=gen),
                     q_norm=None, k_norm=None, o=bf16(d, heads * dim, gen=gen), o_bias=None, post_norm=bf16(d, gen=gen),
                     gate_up=bf16(2 * ffn, d, gen=gen), gate_up_bias=None, down=bf16(d, ffn, gen=gen), down_bias=None)
    cos, sin = bf16(length, dim, gen=gen), bf16(length, dim, gen=gen)
    positions = torch.tensor([0, 9, 4])
    lengths = positions + 1
    x, delta = bf16(rows, d, gen=gen), bf16(rows, d, gen=gen) if with_delta else None
    caches = [bf16(4, kv_heads, length, dim, gen=gen) for _ in range(2)]  # 4 slots: rows 0..2 used

    keys, values, x_ops = caches[0].clone(), caches[1].clone(), x.clone()
    qkv = native.bf16_linear_native(native.add_rms_norm(x_ops, delta, w.input_norm, 1e-5), w.qkv, w.qkv_bias)
    native.rope(qkv, cos, sin, positions, heads + kv_heads)
    kv = qkv[:, heads * dim:].view(rows, 2, kv_heads, dim)
    keys[torch.arange(rows), :, positions], values[torch.arange(rows), :, positions] = kv[:, 0], kv[:, 1]
    out = native.attention(qkv, heads, keys, values, lengths, 0.25)
    hidden = native.add_rms_norm(x_ops, native.bf16_linear_native(out, w.o), w.post_norm, 1e-5)
    expected = native.bf16_linear_native(native.silu_mul(native.bf16_linear_native(hidden, w.gate_up)), w.down)

    scratch = torch.empty(rows * (2 * d + (2 * heads + 2 * kv_heads) * dim + 3 * ffn), dtype=torch.bfloat16)
    got = torch.empty(rows, d, dtype=torch.bfloat16)
    native.decode_layer(x, delta, native.layer_pointers(w), caches[0], caches[1], cos, sin, positions, lengths,
                        scratch, got, torch.tensor([d, heads, kv_heads, dim, ffn, length]), 1e-5, 0.25)
    assert torch.equal(got, expected) and torch.equal(x, x_ops)
    assert torch.equal(caches[0], keys) and torch.equal(caches[1], values)
