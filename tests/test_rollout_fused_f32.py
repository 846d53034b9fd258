"""The fused small ops of a float32 decode step (rollout/native.py, kernels/decode_avx2.c) against torch in float32.

Each op computes what torch computes in float32, in another summation order (and a polynomial exp), so each is held
to torch's float32 result within relative 1e-5. Widths that are not multiples of 8 check the masked tails. Attention
is checked against scaled_dot_product_attention with a per-row length mask and grouped KV heads, rows of different
lengths (1, whole blocks of 8 and tails), head sizes 16, 20, 64 and 80 (whole and partial 64-column chunks), on one
and two threads. `decode_layer` (a whole layer in one call) equals the same ops called one by one, bit for bit, cache
writes included, with bf16 and with float32 matrices. The whole fused decode is checked against torch's float32
decode in tests/test_rollout_weights.py. These run on every CPU with AVX2 + FMA (BATCHSCALE_CPU_CAPABILITY=avx2
included); skipped, with the reason, elsewhere.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from batchscale.rollout import native
from batchscale.rollout.weights import LayerWeights

pytestmark = pytest.mark.skipif(native.bf16_linear_kernel("avx2") is None,
                                reason=f"AVX2 kernels unavailable: {native.unavailable_reason('avx2')}")
F32_TOL = dict(rtol=1e-5, atol=1e-5)


def randn(*shape, gen):
    return torch.randn(*shape, generator=gen)


def on_threads(threads: int, fn):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("with_delta", [False, True])
def test_add_rms_norm(with_delta):
    gen = torch.Generator().manual_seed(0)
    x, delta, weight = randn(3, 77, gen=gen), randn(3, 77, gen=gen), randn(77, gen=gen)
    summed = x + delta if with_delta else x.clone()
    got = native.add_rms_norm(x, delta if with_delta else None, weight, 1e-5)
    assert torch.equal(x, summed)  # the residual add happened in place, exactly as torch adds
    torch.testing.assert_close(got, F.rms_norm(summed, (77,), weight, 1e-5), **F32_TOL)


@pytest.mark.parametrize("dim", [8, 20, 64])  # half a head: under 8 lanes, a tail, whole vectors
def test_rope_rotates_q_and_k_heads_only(dim):
    gen = torch.Generator().manual_seed(1)
    rows, heads, width = 3, 3, 5 * dim  # 3 rotated heads, 2 left alone (the v heads)
    qkv = randn(rows, width, gen=gen)
    angles = torch.arange(10)[:, None] * torch.rand(dim // 2, generator=gen)[None]  # (length, D/2)
    cos, sin = (f(torch.cat((angles, angles), -1)) for f in (torch.cos, torch.sin))
    positions = torch.tensor([0, 7, 3])
    x = qkv[:, : heads * dim].view(rows, heads, dim)
    c, s = cos[positions][:, None], sin[positions][:, None]
    expected = x * c + torch.cat((-x[..., dim // 2:], x[..., : dim // 2]), -1) * s
    before = qkv.clone()
    native.rope(qkv, cos, sin, positions, heads)
    torch.testing.assert_close(qkv[:, : heads * dim].view(rows, heads, dim), expected, **F32_TOL)
    assert torch.equal(qkv[:, heads * dim:], before[:, heads * dim:])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dim, length", [(16, 12), (20, 9), (64, 37), (80, 20)])
def test_attention_equals_masked_sdpa(threads, dim, length):
    gen = torch.Generator().manual_seed(2)
    rows, heads, kv_heads = 3, 4, 2
    qkv = randn(rows, (heads + 2 * kv_heads) * dim, gen=gen)
    keys, values = randn(5, kv_heads, length, dim, gen=gen), randn(5, kv_heads, length, dim, gen=gen)  # 5 slots
    lengths = torch.tensor([1, length, length // 2 + 1])
    got = on_threads(threads, lambda: native.attention(qkv, heads, keys, values, lengths, 0.25))
    q = qkv[:, : heads * dim].view(rows, heads, 1, dim)
    mask = (torch.arange(length)[None] < lengths[:, None])[:, None, None]  # (B, 1, 1, L)
    expected = F.scaled_dot_product_attention(q, keys[:rows], values[:rows], attn_mask=mask, scale=0.25,
                                              enable_gqa=True)  # (B, H, 1, D)
    torch.testing.assert_close(got, expected.reshape(rows, heads * dim), **F32_TOL)


def test_silu_mul():
    gen = torch.Generator().manual_seed(3)
    gate_up = 4 * randn(3, 2 * 37, gen=gen)  # |gate| up to ~15: both tails of the sigmoid
    gate_up[0, 0], gate_up[0, 1] = -100.0, 100.0  # exp clamped: silu(-100) ~ 0, silu(100) = 100
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(native.silu_mul(gate_up), F.silu(gate) * up, **F32_TOL)


@pytest.mark.parametrize("with_delta", [False, True])
@pytest.mark.parametrize("matrix_dtype", [torch.bfloat16, torch.float32])
def test_decode_layer_equals_its_ops_one_by_one(with_delta, matrix_dtype):
    gen = torch.Generator().manual_seed(4)
    rows, d, heads, kv_heads, dim, ffn, length = 3, 64, 4, 2, 16, 96, 10
    width = (heads + 2 * kv_heads) * dim
    mat = lambda *shape: randn(*shape, gen=gen).to(matrix_dtype)  # noqa: E731
    w = LayerWeights(input_norm=randn(d, gen=gen), qkv=mat(width, d), qkv_bias=randn(width, gen=gen), q_norm=None,
                     k_norm=None, o=mat(d, heads * dim), o_bias=None, post_norm=randn(d, gen=gen),
                     gate_up=mat(2 * ffn, d), gate_up_bias=None, down=mat(d, ffn), down_bias=randn(d, gen=gen))
    linear = native.bf16_linear if matrix_dtype == torch.bfloat16 else native.f32_linear
    cos, sin = randn(length, dim, gen=gen), randn(length, dim, gen=gen)
    positions = torch.tensor([0, 9, 4])
    lengths = positions + 1
    x, delta = randn(rows, d, gen=gen), randn(rows, d, gen=gen) if with_delta else None
    caches = [randn(4, kv_heads, length, dim, gen=gen) for _ in range(2)]  # 4 slots: rows 0..2 used

    keys, values, x_ops = caches[0].clone(), caches[1].clone(), x.clone()
    qkv = linear(native.add_rms_norm(x_ops, delta, w.input_norm, 1e-5), w.qkv, w.qkv_bias)
    native.rope(qkv, cos, sin, positions, heads + kv_heads)
    kv = qkv[:, heads * dim:].view(rows, 2, kv_heads, dim)
    keys[torch.arange(rows), :, positions], values[torch.arange(rows), :, positions] = kv[:, 0], kv[:, 1]
    out = native.attention(qkv, heads, keys, values, lengths, 0.25)
    hidden = native.add_rms_norm(x_ops, linear(out, w.o), w.post_norm, 1e-5)
    expected = linear(native.silu_mul(linear(hidden, w.gate_up)), w.down, w.down_bias)

    scratch = torch.empty(rows * (2 * d + (2 * heads + 2 * kv_heads) * dim + 3 * ffn))
    got = torch.empty(rows, d)
    native.decode_layer(x, delta, native.layer_pointers(w), caches[0], caches[1], cos, sin, positions, lengths,
                        scratch, got, torch.tensor([d, heads, kv_heads, dim, ffn, length]), 1e-5, 0.25,
                        bf16_weights=matrix_dtype == torch.bfloat16)
    assert torch.equal(got, expected) and torch.equal(x, x_ops)
    assert torch.equal(caches[0], keys) and torch.equal(caches[1], values)


def test_fused_ops_reject_other_dtypes():
    with pytest.raises(ValueError, match="bfloat16 or float32"):
        native.silu_mul(torch.zeros(2, 8, dtype=torch.float16))
