"""The native samplers (native.sample: kernels/sample_avx512.c for bf16 logits, kernels/sample_avx2.c for float32
ones) against the exact inverse CDF.

Truth is computed in float64 from the same logits: softmax(l / T), its cumulative sum, and the token whose interval
[cdf[t-1], cdf[t]) holds u. The native token must hold u in its interval up to 1e-6 of probability mass (its sums run in
float32 lanes added in double), its log-prob must equal log_softmax(l)[token] within 1e-5, and greedy must be the first
maximum; a NaN or infinite logit gives a NaN log-prob, a -inf one is never drawn. Vocabularies with and without a
tail of the 16- and 8-wide blocks, temperatures 1 and not, one and two threads; torch's own float32 sampler
(sampling.sample_tokens on logits.float()) agrees on almost every row (its float32 CDF cannot resolve tokens whose
probability is below its rounding). Each dtype is skipped, with the reason, on a CPU without its library; sample_tokens
sends float32 logits to the native pass only on the AVX2 path (BATCHSCALE_CPU_CAPABILITY=avx2 or an AVX2-only CPU).
"""

from __future__ import annotations

import pytest
import torch

from batchscale.rollout import native, sampling
from batchscale.rollout.sampling import native_sampler, sample_tokens

DTYPES = [
    pytest.param(torch.bfloat16, id="bf16", marks=pytest.mark.skipif(
        native.bf16_linear_kernel("avx512_bf16") is None,
        reason=f"AVX512-BF16 kernels unavailable: {native.unavailable_reason('avx512_bf16')}")),
    pytest.param(torch.float32, id="f32", marks=pytest.mark.skipif(
        native.bf16_linear_kernel("avx2") is None, reason=f"AVX2 kernels unavailable: {native.unavailable_reason()}")),
]


def draw(rows: int, vocab: int, seed: int, dtype=torch.bfloat16):
    generator = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(rows, vocab, generator=generator)).to(dtype)
    return logits, torch.rand(rows, generator=generator)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab, temperature", [(49152, 1.0), (4099, 0.7), (17, 1.3), (5, 1.0)])
@pytest.mark.parametrize("threads", [1, 2])
def test_native_sample_is_the_inverse_cdf(vocab, temperature, threads, dtype):
    logits, uniforms = draw(64, vocab, seed=vocab, dtype=dtype)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        tokens, logprobs = native.sample(logits, uniforms, temperature)
    finally:
        torch.set_num_threads(before)
    exact = logits.double()
    cdf = torch.softmax(exact / temperature, dim=-1).cumsum(dim=-1)
    rows = torch.arange(64)
    upper = cdf[rows, tokens]
    lower = torch.where(tokens > 0, cdf[rows, (tokens - 1).clamp(min=0)], torch.zeros(64, dtype=torch.float64))
    u = uniforms.double()
    assert bool(((lower - 1e-6 <= u) & (u <= upper + 1e-6)).all())
    expected = torch.log_softmax(exact, dim=-1)[rows, tokens]
    torch.testing.assert_close(logprobs.double(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_greedy_is_the_first_maximum(dtype):
    logits, _ = draw(32, 1000, seed=1, dtype=dtype)
    logits[3, 10] = logits[3, 900] = 100.0  # a tie: the first index wins, as torch.argmax
    tokens, logprobs = native.sample(logits, None, 1.0)
    assert tokens.tolist() == logits.float().argmax(dim=-1).tolist() and int(tokens[3]) == 10
    torch.testing.assert_close(logprobs, torch.log_softmax(logits.float(), dim=-1)[torch.arange(32), tokens],
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sample_tokens_sends_logits_to_the_native_pass_and_agrees_with_torch(dtype, monkeypatch):
    if not native_sampler(dtype):
        pytest.skip("float32 logits keep torch's sampler where the AVX-512 path exists")
    logits, uniforms = draw(256, 49152, seed=2, dtype=dtype)
    got, got_logprobs = sample_tokens(logits, uniforms, 1.0, 1.0)
    assert torch.equal(got, native.sample(logits, uniforms, 1.0)[0])
    monkeypatch.setattr(sampling, "native_sampler", lambda dtype: False)  # torch's own sampler from here on
    expected, expected_logprobs = sample_tokens(logits.float(), uniforms, 1.0, 1.0)  # torch, float32
    same = got == expected
    assert int(same.sum()) >= 250  # the rest: u within float32 rounding of a CDF boundary
    # torch's float32 logsumexp is off the exact value by up to ~1 float32 ulp of |log-prob| ~ 15 (1e-6 relative)
    torch.testing.assert_close(got_logprobs[same], expected_logprobs[same], atol=1e-5, rtol=1e-6)
    nucleus, _ = sample_tokens(logits, uniforms, 1.0, 0.9)  # top_p < 1 stays in torch
    assert torch.equal(nucleus, sample_tokens(logits.float(), uniforms, 1.0, 0.9)[0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_nan_or_infinite_logit_gives_a_nan_logprob_not_a_quiet_token(bad, dtype):
    logits, uniforms = draw(3, 100, seed=3, dtype=dtype)
    logits[1, 40] = bad
    for u in (uniforms, None):
        tokens, logprobs = native.sample(logits, u, 1.0)
        assert torch.isnan(logprobs[1]) and int(tokens[1]) == 99
        assert not torch.isnan(logprobs[[0, 2]]).any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_minus_infinite_logit_is_never_drawn(dtype):
    logits = torch.full((64, 40), float("-inf"), dtype=dtype)
    logits[:, 7] = 0.0  # one token left: every draw, even u near 1, must pick it
    tokens, logprobs = native.sample(logits, torch.linspace(0, 0.9999, 64), 1.0)
    assert tokens.tolist() == [7] * 64 and torch.equal(logprobs, torch.zeros(64))
