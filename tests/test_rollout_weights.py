"""The engine's packed weights, compute dtype and bf16 kernel.

- The AVX2 kernel equals F.linear over the same weights upcast to float32, for row counts around its 8-row chunks, a K
  that is not a multiple of 8, with and without bias, on one and two threads.
- The AVX512-BF16 kernel equals F.linear over bf16 activations, weights and bias upcast to float32, rounded once to bf16
  (within one bf16 ulp: summation order), for rows around its 4-row tiles, N around its 4-column tiles, a K tail, with
  and without bias, on one and two threads. Skipped, with the reason, on a CPU without avx512_bf16.
- The float32 kernel, in each build this CPU can run (AVX2, AVX-512), equals F.linear for rows around its 2-row tiles,
  whole column tiles and remainders, a K tail, with and without bias, on one and two threads.
- oneDNN-packed matrices (weights.onednn_linear) give exactly F.linear's result, for any rows, with and without bias, on
  a 3-d input. Skipped where torch cannot pack here (no native bf16).
- A bf16 policy decoded the "auto" way on a CPU with native bf16 (the AVX512-BF16 kernel at small batches, torch's bf16
  GEMM over oneDNN-packed matrices above and in prefill) gives the same greedy tokens as torch's bf16 GEMM everywhere,
  and log-probs within bf16 tolerance.
- A bf16 policy decoded the "auto" way (float32 arithmetic; the kernel at small batches, float32 GEMM above) gives the
  same greedy tokens as forcing float32 everywhere, and log-probs within 1e-4 (seen: ~1e-6); so does a float32 policy
  through each float32 kernel against torch alone. Where the AVX2 path is taken (no AVX-512: "avx2" and "f32") the
  decode step is the fused one of kernels/decode_avx2.c.
- The pack follows the optimizer: after an in-place update the engine decodes with the new weights (float32, and bf16
  with every copy the pack holds: small-batch matrices, oneDNN-packed ones).
- `compute_dtype` resolves as documented, and so does the kernel each dtype pair gets.
- Sampling on the native bf16 path is reproducible at a fixed cap and nearly the same across caps.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from batchscale.config import ModelConfig, TaskConfig
from batchscale.policy.load import load_policy
from batchscale.rollout import build_engine, native
from batchscale.rollout import decoder as decoder_module
from batchscale.rollout import weights as packing
from batchscale.rollout.base import SamplingParams
from batchscale.tasks import build_task

needs_kernel = pytest.mark.skipif(native.bf16_linear_kernel() is None,
                                  reason=f"bf16 kernel unavailable: {native.unavailable_reason()}")


needs_native_kernel = pytest.mark.skipif(native.bf16_linear_kernel("avx512_bf16") is None,
                                         reason=f"AVX512-BF16 kernel unavailable: "
                                                f"{native.unavailable_reason('avx512_bf16')}")


needs_onednn = pytest.mark.skipif(not packing.onednn_packing_available(),
                                  reason="torch cannot pre-pack bf16 weights for oneDNN on this CPU (no native bf16)")


def on_threads(threads: int, fn):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def prompts():
    return [e.prompt for e in build_task(TaskConfig()).eval_examples()[:20]] + ["7+5=", "123+456="]


@pytest.fixture(scope="module")
def bf16_policy(random_model_dir):
    return load_policy(ModelConfig(name=str(random_model_dir), dtype="bfloat16"), TaskConfig(), log=lambda s: None)


@needs_kernel
@pytest.mark.parametrize("rows", [1, 3, 6, 7, 8, 9, 17])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_equals_linear_over_upcast_weights(rows, with_bias, threads):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 37, generator=gen)  # K = 37: four 8-wide steps and a tail of 5
    weight = torch.randn(13, 37, generator=gen).to(torch.bfloat16)
    bias = torch.randn(13, generator=gen) if with_bias else None
    got = on_threads(threads, lambda: native.bf16_linear(x, weight, bias))
    torch.testing.assert_close(got, F.linear(x, weight.float(), bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", [
    pytest.param("avx2", marks=needs_kernel),
    pytest.param("avx512_bf16", marks=needs_native_kernel)])
@pytest.mark.parametrize("rows", [1, 2, 3, 5])
@pytest.mark.parametrize("columns", [13, 16, 21])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_f32_kernel_equals_linear(path, rows, columns, with_bias, threads):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 37, generator=gen)  # K = 37: 8-wide steps and a tail of 5 (16-wide: a tail of 5); 2-row tiles
    weight = torch.randn(columns, 37, generator=gen)  # whole 4- and 8-column tiles and a remainder
    bias = torch.randn(columns, generator=gen) if with_bias else None
    got = on_threads(threads, lambda: native.f32_linear(x, weight, bias, path))
    torch.testing.assert_close(got, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="float32"):
        native.f32_linear(x, weight.bfloat16(), None, path)


@needs_native_kernel
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 17])
@pytest.mark.parametrize("columns", [13, 16])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_native_kernel_equals_linear_over_upcast_weights(rows, columns, with_bias, threads):
    gen = torch.Generator().manual_seed(rows)
    k = 77  # two 32-wide steps and a tail of 13
    x = torch.randn(rows, k, generator=gen).to(torch.bfloat16)
    weight = torch.randn(columns, k, generator=gen).to(torch.bfloat16)  # 13: three 4-column tiles and one column
    bias = torch.randn(columns, generator=gen).to(torch.bfloat16) if with_bias else None
    got = on_threads(threads, lambda: native.bf16_linear_native(x, weight, bias))
    assert got.dtype == torch.bfloat16 and got.shape == (rows, columns)
    exact = F.linear(x.float(), weight.float(), None if bias is None else bias.float())  # (rows, columns)
    torch.testing.assert_close(got.float(), exact.to(torch.bfloat16).float(), rtol=2**-7, atol=0)
    assert (got == exact.to(torch.bfloat16)).float().mean() > 0.9  # mostly the same rounding, not just close


@needs_native_kernel
def test_native_kernel_rejects_float32_activations():
    weight = torch.randn(5, 16).to(torch.bfloat16)
    assert native.bf16_linear_native(torch.randn(2, 1, 16).bfloat16(), weight).shape == (2, 1, 5)
    with pytest.raises(ValueError, match="bfloat16"):
        native.bf16_linear_native(torch.randn(2, 16), weight)


@needs_kernel
def test_kernel_keeps_leading_dims_and_rejects_wrong_dtypes():
    x = torch.randn(2, 1, 16)
    weight = torch.randn(5, 16).to(torch.bfloat16)
    assert native.bf16_linear(x, weight).shape == (2, 1, 5)
    with pytest.raises(ValueError, match="bfloat16"):
        native.bf16_linear(x, weight.float())


@needs_onednn
@pytest.mark.parametrize("rows", [1, 5, 33, 130])
@pytest.mark.parametrize("with_bias", [False, True])
def test_onednn_packed_linear_equals_linear(rows, with_bias):
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 2, 72, generator=generator).bfloat16()
    weight = torch.randn(40, 72, generator=generator).bfloat16()
    bias = torch.randn(40, generator=generator).bfloat16() if with_bias else None
    got = packing.onednn_linear(x, packing.onednn_pack(weight), bias)
    assert got.shape == (rows, 2, 40) and torch.equal(got, F.linear(x, weight, bias))


@pytest.mark.parametrize("setting, model, native_bf16, expected", [
    ("auto", torch.bfloat16, False, torch.float32),
    ("auto", torch.bfloat16, True, torch.bfloat16),
    ("auto", torch.float32, False, torch.float32),
    ("model", torch.bfloat16, False, torch.bfloat16),
    ("float32", torch.bfloat16, True, torch.float32),
])
def test_compute_dtype_resolution(monkeypatch, setting, model, native_bf16, expected):
    monkeypatch.setattr(packing, "native_bf16_cpu", lambda: native_bf16)
    assert packing.resolve_generation_dtype(setting, model, torch.device("cpu")) == expected


@needs_kernel
def test_auto_bf16_decode_equals_float32_decode(bf16_policy, prompts, monkeypatch, one_torch_thread):
    monkeypatch.setattr(packing, "native_bf16_cpu", lambda: False)
    auto = build_engine("engine", bf16_policy, max_concurrency=24, compute_dtype="auto")
    assert auto.decoder.dtype == torch.float32 and auto.decoder.packed.small_batch_rows == packing.SMALL_BATCH_ROWS
    forced = build_engine("engine", bf16_policy, max_concurrency=24, compute_dtype="float32")
    assert forced.decoder.packed.small_batch_rows == 0
    params = SamplingParams(max_new_tokens=10, greedy=True)
    for batch in (prompts, prompts[:3]):  # 22 sequences decode with float32 GEMM, 3 with the kernel
        got, expected = auto.generate(batch, params), forced.generate(batch, params)
        assert got.stats["active_max"] == len(batch)
        assert got.response_ids == expected.response_ids
        flat = lambda r: torch.tensor([x for lp in r.logprobs for x in lp])  # noqa: E731
        torch.testing.assert_close(flat(got), flat(expected), atol=1e-4, rtol=0)


@needs_native_kernel
def test_native_bf16_decode_equals_torch_bf16_decode(bf16_policy, prompts, monkeypatch, one_torch_thread):
    monkeypatch.setattr(packing, "native_bf16_cpu", lambda: True)
    auto = build_engine("engine", bf16_policy, max_concurrency=24, compute_dtype="auto")
    assert auto.decoder.dtype == torch.bfloat16 and auto.decoder.packed.kernel == "avx512_bf16"
    assert auto.decoder.packed.small_batch_rows == packing.NATIVE_SMALL_BATCH_ROWS
    assert auto.decoder.packed.onednn == packing.onednn_packing_available()
    torch_only = build_engine("engine", bf16_policy, max_concurrency=24, compute_dtype="model")
    assert torch_only.decoder.dtype == torch.bfloat16 and torch_only.decoder.packed.small_batch_rows == 0
    assert not torch_only.decoder.packed.onednn
    params = SamplingParams(max_new_tokens=10, greedy=True)
    for batch in (prompts, prompts[:2]):  # 22 sequences decode with the packed GEMM, 2 with the kernel
        got, expected = auto.generate(batch, params), torch_only.generate(batch, params)
        linear = auto.decoder.weights.for_batch(len(batch)).linear
        assert getattr(linear, "func", linear) is (native.bf16_linear_native if len(batch) <= packing.NATIVE_SMALL_BATCH_ROWS else
                          packing.onednn_linear if packing.onednn_packing_available() else F.linear)
        assert got.stats["active_max"] == len(batch)
        assert got.response_ids == expected.response_ids
        flat = lambda r: torch.tensor([x for lp in r.logprobs for x in lp])  # noqa: E731
        torch.testing.assert_close(flat(got), flat(expected), atol=0.05, rtol=0)


@pytest.mark.parametrize("kernel", [
    pytest.param("f32", marks=needs_kernel),
    pytest.param("f32_avx512", marks=needs_native_kernel)])
def test_f32_kernel_decode_equals_torch_float32_decode(random_model_dir, prompts, monkeypatch, one_torch_thread,
                                                       kernel):
    """A float32 policy through each float32 kernel (forced, so both run on a CPU that has both) gives torch's greedy
    tokens and its log-probs within 1e-4, with the fused float32 decode (kernels/decode_avx2.c: a layer per call at
    small batches, the fused ops around torch's GEMM above; "f32_avx512" has its layer call in the AVX-512 library,
    with 16-lane matrices)."""
    policy = load_policy(ModelConfig(name=str(random_model_dir), dtype="float32"), TaskConfig(), log=lambda s: None)
    monkeypatch.setattr(decoder_module, "kernel_candidates",
                        lambda setting, *_: [(kernel, packing.F32_SMALL_BATCH_ROWS)] if setting == "auto" else [])
    fast = build_engine("engine", policy, max_concurrency=24, compute_dtype="auto")
    assert fast.decoder.fused and fast.decoder.packed.kernel == kernel
    torch_only = build_engine("engine", policy, max_concurrency=24, compute_dtype="model")
    assert torch_only.decoder.packed.small_batch_rows == 0 and not torch_only.decoder.fused
    params = SamplingParams(max_new_tokens=10, greedy=True)
    for batch in (prompts, prompts[:3]):  # 22 sequences: torch's GEMM; 3: the kernel
        got, expected = fast.generate(batch, params), torch_only.generate(batch, params)
        assert got.stats["active_max"] == len(batch)
        assert got.response_ids == expected.response_ids
        flat = lambda r: torch.tensor([x for lp in r.logprobs for x in lp])  # noqa: E731
        torch.testing.assert_close(flat(got), flat(expected), atol=1e-4, rtol=0)


@pytest.mark.parametrize("setting, model, compute, expected", [
    ("auto", torch.bfloat16, torch.float32, "avx2"),
    ("auto", torch.bfloat16, torch.bfloat16, "avx512_bf16"),
    ("auto", torch.float32, torch.float32, "f32_avx512"),
    ("model", torch.bfloat16, torch.bfloat16, None),
    ("model", torch.float32, torch.float32, None),
    ("float32", torch.bfloat16, torch.float32, None),
])
def test_kernel_resolution(setting, model, compute, expected):
    path, rows = packing.resolve_kernel(setting, model, compute, torch.device("cpu"))
    if expected == "f32_avx512" and native.bf16_linear_kernel("avx512_bf16") is None:
        expected = "f32"  # the AVX2 build
    if expected is not None and native.bf16_linear_kernel(packing.KERNEL_LINEAR[expected][0]) is None:
        expected = None  # this CPU lacks the path: the engine falls back to torch
    assert path == expected and (rows > 0) == (expected is not None)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pack_follows_in_place_updates(random_model_dir, prompts, one_torch_thread, dtype):
    policy = load_policy(ModelConfig(name=str(random_model_dir), dtype=dtype), TaskConfig(), log=lambda s: None)
    engine = build_engine("engine", policy, max_concurrency=8)
    params = SamplingParams(max_new_tokens=6, greedy=True)
    before = engine.generate(prompts, params)  # 8 sequences at a time, then the last 6: both kinds of step
    key = engine.decoder.packed.key
    assert engine.generate(prompts, params).response_ids == before.response_ids
    assert engine.decoder.packed.key == key  # nothing changed: no re-pack
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in policy.model.parameters():  # in place, as an optimizer step is
            p.add_(0.05 * torch.randn(p.shape, generator=generator).to(p.dtype))
    after = engine.generate(prompts, params)
    fresh = build_engine("engine", copy.deepcopy(policy), max_concurrency=8).generate(prompts, params)
    assert engine.decoder.packed.key != key
    flat = lambda r: torch.tensor([x for lp in r.logprobs for x in lp])  # noqa: E731
    assert after.response_ids == fresh.response_ids and torch.equal(flat(after), flat(fresh))
    assert after.response_ids != before.response_ids or (flat(after) - flat(before)).abs().max() > 0.01


@needs_native_kernel
def test_native_bf16_sampling_is_reproducible_and_nearly_concurrency_invariant(bf16_policy, prompts, monkeypatch,
                                                                                one_torch_thread):
    """On the native bf16 path a step of up to 2 sequences multiplies with the vdpbf16ps kernel and a larger one with
    oneDNN: the same products summed in another order, so a bf16 logit can round the other way and a draw that lands
    on a CDF boundary can pick the neighbouring token. Same cap, same seed: identical samples."""
    monkeypatch.setattr(packing, "native_bf16_cpu", lambda: True)
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=8)

    def sample(cap):
        torch.manual_seed(0)
        return build_engine("engine", bf16_policy, max_concurrency=cap).generate(prompts, params).response_ids

    wide = sample(24)
    assert sample(24) == wide
    narrow = sample(2)
    pairs = [(a, b) for x, y in zip(narrow, wide) for a, b in zip(x, y)]
    assert sum(a == b for a, b in pairs) >= 0.9 * len(pairs)
