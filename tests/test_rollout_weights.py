"""The engine's packed weights, compute dtype and bf16 kernel.

- The AVX2 kernel equals F.linear over the same weights upcast to float32, for row counts around its 8-row chunks,
  a K that is not a multiple of 8, with and without bias, on one and two threads.
- A bf16 policy decoded the "auto" way (float32 arithmetic; the kernel at small batches, float32 GEMM above) gives
  the same greedy tokens as forcing float32 everywhere, and log-probs within 1e-4 (seen: ~1e-6).
- The pack follows the optimizer: after an in-place update the engine decodes with the new weights.
- `compute_dtype` resolves as documented.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from batchscale.config import ModelConfig, TaskConfig
from batchscale.policy.load import load_policy
from batchscale.rollout import build_engine, native
from batchscale.rollout import weights as packing
from batchscale.rollout.base import SamplingParams
from batchscale.tasks import build_task

needs_kernel = pytest.mark.skipif(native.bf16_linear_kernel() is None,
                                  reason=f"bf16 kernel unavailable: {native.unavailable_reason()}")


@pytest.fixture(scope="module")
def prompts():
    return [e.prompt for e in build_task(TaskConfig()).eval_examples()[:20]] + ["7+5=", "123+456="]


@pytest.fixture(scope="module")
def bf16_policy(random_model_dir):
    return load_policy(ModelConfig(name=str(random_model_dir), dtype="bfloat16"), TaskConfig(), log=lambda s: None)


@needs_kernel
@pytest.mark.parametrize("rows", [1, 3, 8, 9, 17])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_equals_linear_over_upcast_weights(rows, with_bias, threads):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 37, generator=gen)  # K = 37: four 8-wide steps and a tail of 5
    weight = torch.randn(13, 37, generator=gen).to(torch.bfloat16)
    bias = torch.randn(13, generator=gen) if with_bias else None
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = native.bf16_linear(x, weight, bias)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(got, F.linear(x, weight.float(), bias), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_kernel_keeps_leading_dims_and_rejects_wrong_dtypes():
    x = torch.randn(2, 1, 16)
    weight = torch.randn(5, 16).to(torch.bfloat16)
    assert native.bf16_linear(x, weight).shape == (2, 1, 5)
    with pytest.raises(ValueError, match="bfloat16"):
        native.bf16_linear(x, weight.float())


@pytest.mark.parametrize("setting, model, native_bf16, expected", [
    ("auto", torch.bfloat16, False, torch.float32),
    ("auto", torch.bfloat16, True, torch.bfloat16),
    ("auto", torch.float32, False, torch.float32),
    ("model", torch.bfloat16, False, torch.bfloat16),
    ("float32", torch.bfloat16, True, torch.float32),
])
def test_compute_dtype_resolution(monkeypatch, setting, model, native_bf16, expected):
    monkeypatch.setattr(packing, "native_bf16_cpu", lambda: native_bf16)
    assert packing.resolve_compute_dtype(setting, model, torch.device("cpu")) == expected


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


def test_pack_follows_in_place_updates(random_model_dir, prompts, one_torch_thread):
    policy = load_policy(ModelConfig(name=str(random_model_dir)), TaskConfig(), log=lambda s: None)
    engine = build_engine("engine", policy, max_concurrency=8)
    params = SamplingParams(max_new_tokens=6, greedy=True)
    before = engine.generate(prompts, params)
    key = engine.decoder.packed.key
    assert engine.generate(prompts, params).response_ids == before.response_ids
    assert engine.decoder.packed.key == key  # nothing changed: no re-pack
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # in place, as an optimizer step is
    after = engine.generate(prompts, params)
    fresh = build_engine("engine", copy.deepcopy(policy), max_concurrency=8).generate(prompts, params)
    assert engine.decoder.packed.key != key
    assert after.response_ids == fresh.response_ids != before.response_ids
