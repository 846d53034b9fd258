"""The decode plan chosen by measurement (rollout/tuning.py), the kernels' walks it chooses among, and huge pages.

- Every walk (order "tiles" or "rows", each prefetch distance, one or two threads) gives the same bits as the
  default walk, in each linear kernel this CPU runs (rows around the kernels' row tiles, columns around their column
  tiles, a K tail, with and without bias) and in a whole decode_layer call; so a timed plan never changes what the
  engine decodes, only how fast.
- The engine decodes the same greedy tokens and log-probs, bit for bit, under every walk of its kernel; and the same
  greedy tokens under the plans that change the arithmetic: the other float32 kernel (8 or 16 lanes: log-probs within
  1e-4) and the row count up to which the kernel runs instead of the GEMM (0 or 16 sequences: bf16 log-probs within
  0.05, float32 within 1e-4).
- The first engine times the plans and caches its choice (CPU, flags, model shapes, candidates' timings, winner); a
  second engine reads it and times nothing. A corrupt file, one of another schema or key, or one whose winner is not a
  plan here is ignored with a warning and replaced. "off" times and writes nothing; a bad mode fails at engine build.
  No assertion is about which plan wins: only that one was chosen, recorded and reused.
- The huge-page arena copies tensors exactly, aligned, on a 2 MiB-aligned mapping.
"""

from __future__ import annotations

import itertools
import json
import warnings

import pytest
import torch

from batchscale.config import ModelConfig, TaskConfig
from batchscale.errors import DataWarning, UserError
from batchscale.policy.load import load_policy
from batchscale.rollout import build_engine, native, tuning
from batchscale.rollout.base import SamplingParams
from batchscale.rollout.hugepages import HUGE_PAGE_BYTES, HugePageArena, arena_bytes
from batchscale.rollout.native import KernelPlan
from batchscale.tasks import build_task

AVX2 = native.bf16_linear_kernel("avx2") is not None
AVX512 = native.bf16_linear_kernel("avx512_bf16") is not None
WALKS = [KernelPlan(order, prefetch, threads) for order, prefetch, threads
         in itertools.product(native.ORDERS, tuning.PREFETCH_BYTES, (1, 2))]
ENGINE_WALKS = [KernelPlan(order, prefetch) for order in native.ORDERS for prefetch in (0, max(tuning.PREFETCH_BYTES))]
ENGINE_WALKS.append(KernelPlan("rows", 0, 2))
LINEARS = [  # (name, linear(x, w, b, plan), activation dtype, weight dtype, available)
    ("avx2 bf16", native.bf16_linear, torch.float32, torch.bfloat16, AVX2),
    ("avx2 f32", lambda x, w, b, plan: native.f32_linear(x, w, b, "avx2", plan), torch.float32, torch.float32, AVX2),
    ("avx512 bf16", native.bf16_linear_native, torch.bfloat16, torch.bfloat16, AVX512),
    ("avx512 f32", lambda x, w, b, plan: native.f32_linear(x, w, b, "avx512_bf16", plan), torch.float32,
     torch.float32, AVX512),
]


@pytest.mark.parametrize("name, linear, x_dtype, w_dtype", [
    pytest.param(*entry[:4], marks=pytest.mark.skipif(not entry[4], reason=f"{entry[0]} kernel unavailable here"))
    for entry in LINEARS])
@pytest.mark.parametrize("rows", [1, 2, 5])
@pytest.mark.parametrize("with_bias", [False, True])
def test_every_walk_gives_the_same_bits(name, linear, x_dtype, w_dtype, rows, with_bias):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 77, generator=gen).to(x_dtype)  # K = 77: whole steps of 8, 16 and 32 lanes and a tail
    weight = torch.randn(37, 77, generator=gen).to(w_dtype)  # N = 37: column tiles of 3, 4, 8 and a remainder
    bias = torch.randn(37, generator=gen).to(x_dtype) if with_bias else None
    expected = linear(x, weight, bias, native.DEFAULT_PLAN)
    for walk in WALKS:
        assert torch.equal(linear(x, weight, bias, walk), expected), walk


def random_layer(dtype, matrix_dtype, gen, d=64, heads=4, kv_heads=2, dim=16, ffn=96):
    from batchscale.rollout.weights import LayerWeights

    def tensor(*shape, kind=dtype):
        return (torch.randn(*shape, generator=gen) * 0.2).to(kind)

    return LayerWeights(input_norm=tensor(d), qkv=tensor((heads + 2 * kv_heads) * dim, d, kind=matrix_dtype),
                        qkv_bias=None, q_norm=None, k_norm=None, o=tensor(d, heads * dim, kind=matrix_dtype),
                        o_bias=tensor(d), post_norm=tensor(d), gate_up=tensor(2 * ffn, d, kind=matrix_dtype),
                        gate_up_bias=None, down=tensor(d, ffn, kind=matrix_dtype), down_bias=None)


@pytest.mark.parametrize("dtype, matrix_dtype, path", [
    pytest.param(torch.bfloat16, torch.bfloat16, None, marks=pytest.mark.skipif(not AVX512, reason="no AVX-512")),
    pytest.param(torch.float32, torch.bfloat16, None, marks=pytest.mark.skipif(not AVX2, reason="no AVX2")),
    pytest.param(torch.float32, torch.float32, None, marks=pytest.mark.skipif(not AVX2, reason="no AVX2")),
    pytest.param(torch.float32, torch.float32, "avx512_bf16", marks=pytest.mark.skipif(not AVX512,
                                                                                       reason="no AVX-512")),
])
def test_decode_layer_gives_the_same_bits_under_every_walk(dtype, matrix_dtype, path):
    gen = torch.Generator().manual_seed(7)
    w = random_layer(dtype, matrix_dtype, gen)
    rows, length = 3, 24
    shape = torch.tensor([64, 4, 2, 16, 96, length])
    cos, sin = (torch.randn(length, 16, generator=gen).to(dtype) for _ in range(2))
    positions = torch.tensor([0, 5, 11])
    x0, delta = (torch.randn(rows, 64, generator=gen).to(dtype) for _ in range(2))
    caches0 = [torch.randn(rows, 2, length, 16, generator=gen).to(dtype) for _ in range(2)]

    def run(walk):
        x, caches, out = x0.clone(), [c.clone() for c in caches0], torch.empty(rows, 64, dtype=dtype)
        scratch = torch.empty(rows * (2 * 64 + (2 * 4 + 2 * 2) * 16 + 3 * 96), dtype=dtype)
        native.decode_layer(x, delta, native.layer_pointers(w), caches[0], caches[1], cos, sin, positions,
                            positions + 1, scratch, out, shape, 1e-5, 0.25, matrix_dtype == torch.bfloat16, walk, path)
        return x, out, caches

    expected = run(native.DEFAULT_PLAN)
    for walk in WALKS:
        got = run(walk)
        assert all(torch.equal(a, b) for a, b in zip((got[0], got[1], *got[2]), (expected[0], expected[1],
                                                                                   *expected[2]))), walk


@pytest.fixture(scope="module")
def prompts():
    return [e.prompt for e in build_task(TaskConfig()).eval_examples()[:6]]


def load(random_model_dir, dtype):
    return load_policy(ModelConfig(name=str(random_model_dir), dtype=dtype), TaskConfig(), log=lambda s: None)


def flat(rollouts) -> torch.Tensor:
    return torch.tensor([x for lp in rollouts.logprobs for x in lp])


def generate_with(policy, plan, prompts, cap):
    engine = build_engine("engine", policy, max_concurrency=cap)
    engine.decoder.use_plan(plan)
    return engine.generate(prompts, SamplingParams(max_new_tokens=8, greedy=True))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_plan_decodes_the_same_tokens(random_model_dir, prompts, dtype, one_torch_thread):
    """Walks: bit for bit. Other kernel, other row count: the same greedy tokens, log-probs within the stated bound."""
    policy = load(random_model_dir, dtype)
    decoder = build_engine("engine", policy).decoder
    if not decoder.fused:
        pytest.skip(f"no native kernel for a {dtype} model here")
    reference = tuning.default_plan(decoder.kernels)
    for cap in (1, 6):  # one sequence: the kernel's one-call layers; six: also the GEMM path where rows < 6
        expected = generate_with(policy, reference, prompts, cap)
        for walk in ENGINE_WALKS:  # the kernels' own tests above take every walk
            got = generate_with(policy, tuning.DecodePlan(reference.kernel, walk, reference.small_batch_rows),
                                prompts, cap)
            assert got.response_ids == expected.response_ids and torch.equal(flat(got), flat(expected)), walk
    bound = 0.05 if dtype == "bfloat16" else 1e-4
    expected = generate_with(policy, reference, prompts, 6)
    others = [tuning.DecodePlan(kernel, reference.walk, rows) for kernel, _ in decoder.kernels for rows in (0, 16)]
    for plan in others:
        got = generate_with(policy, plan, prompts, 6)
        assert got.response_ids == expected.response_ids, plan
        torch.testing.assert_close(flat(got), flat(expected), atol=bound, rtol=0)


@pytest.fixture
def tuned(monkeypatch, tmp_path, random_model_dir):
    """A cache of its own, timing on, and the bf16 policy (the float32 one where bf16 has no kernel here)."""
    monkeypatch.setenv("BATCHSCALE_CACHE", str(tmp_path))
    monkeypatch.setenv(tuning.TUNING_ENV, "auto")
    for dtype in ("bfloat16", "float32"):
        policy = load(random_model_dir, dtype)
        if build_engine("engine", policy).decoder.fused:
            return policy
    pytest.skip("no native kernel here")


def plan_files(tmp_path):
    return sorted((tmp_path / "decode-plans").glob("*.json"))


def test_the_choice_is_recorded_and_reused(tuned, tmp_path, prompts, monkeypatch, one_torch_thread):
    first = build_engine("engine", tuned, max_concurrency=2)
    first.generate(prompts, SamplingParams(max_new_tokens=4, greedy=True))
    [path] = plan_files(tmp_path)
    record = json.loads(path.read_text())
    assert record["schema"] == tuning.SCHEMA and record["winner"] == first.decoder.plan.to_json()
    assert record["key"]["cpu_flags"] and record["key"]["model"]["hidden"] == 64
    assert record["key"]["threads"] == 1 and record["key"]["kernels"] == [k for k, _ in first.decoder.kernels]
    walks = [c for c in record["candidates"] if c["stage"] == "walk"]
    assert len(walks) == len(first.decoder.kernels) * len(native.ORDERS) * len(tuning.PREFETCH_BYTES)
    assert all(c["step_ms"] > 0 for c in record["candidates"]) and record["rows"][0]["rows"] == 1
    assert first.decoder.packed.small_batch_rows == record["winner"]["small_batch_rows"]
    assert first.decoder.slots == 2  # the probes' 16 cache rows were dropped: the engine holds what it asked for

    monkeypatch.setattr(tuning, "time_plans", lambda decoder: pytest.fail("the second engine timed the plans again"))
    second = build_engine("engine", tuned, max_concurrency=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second.generate(prompts, SamplingParams(max_new_tokens=4, greedy=True))
    assert second.decoder.plan == first.decoder.plan and plan_files(tmp_path) == [path]


def damage_garbage(path):
    path.write_bytes(b"\x00{not json")


def damage_schema(path):
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema": "someone.else/9"}))


def damage_key(path):
    record = json.loads(path.read_text())
    record["key"]["cpu_model"] = "another CPU"
    path.write_text(json.dumps(record))


def damage_winner(path):
    record = json.loads(path.read_text())
    record["winner"]["order"] = "sideways"
    path.write_text(json.dumps(record))


def damage_rows(path):
    record = json.loads(path.read_text())
    record["winner"]["small_batch_rows"] = True  # a bool is not a row count
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("damage", [damage_garbage, damage_schema, damage_key, damage_winner, damage_rows])
def test_a_cache_that_cannot_be_trusted_is_ignored_with_a_warning(tuned, tmp_path, prompts, damage,
                                                                   one_torch_thread):
    build_engine("engine", tuned).generate(prompts[:1], SamplingParams(max_new_tokens=2, greedy=True))
    [path] = plan_files(tmp_path)
    damage(path)
    engine = build_engine("engine", tuned)
    with pytest.warns(DataWarning, match="ignoring the cached decode plan"):
        engine.generate(prompts[:1], SamplingParams(max_new_tokens=2, greedy=True))
    record = json.loads(path.read_text())  # timed again and replaced
    assert record["schema"] == tuning.SCHEMA and record["winner"] == engine.decoder.plan.to_json()


def test_off_takes_the_defaults_and_writes_nothing(tuned, tmp_path, prompts, monkeypatch, one_torch_thread):
    monkeypatch.setenv(tuning.TUNING_ENV, "off")
    monkeypatch.setattr(tuning, "time_plans", lambda decoder: pytest.fail("timed under off"))
    engine = build_engine("engine", tuned)
    engine.generate(prompts[:1], SamplingParams(max_new_tokens=2, greedy=True))
    assert engine.decoder.plan == tuning.default_plan(engine.decoder.kernels) and not plan_files(tmp_path)


def test_retime_replaces_the_cached_plan(tuned, tmp_path, prompts, monkeypatch, one_torch_thread):
    build_engine("engine", tuned).generate(prompts[:1], SamplingParams(max_new_tokens=2, greedy=True))
    [path] = plan_files(tmp_path)
    before = json.loads(path.read_text())["timed_at"], path.stat().st_mtime_ns
    monkeypatch.setenv(tuning.TUNING_ENV, "retime")
    calls = []
    timer = tuning.time_plans
    monkeypatch.setattr(tuning, "time_plans", lambda decoder: calls.append(1) or timer(decoder))
    build_engine("engine", tuned).generate(prompts[:1], SamplingParams(max_new_tokens=2, greedy=True))
    assert calls == [1] and path.stat().st_mtime_ns != before[1]


def test_a_bad_mode_fails_when_the_engine_is_built(tuned, monkeypatch):
    monkeypatch.setenv(tuning.TUNING_ENV, "fastest")
    with pytest.raises(UserError, match="BATCHSCALE_DECODE_TUNING: is 'fastest'.*auto, off, retime"):
        build_engine("engine", tuned)


def test_huge_page_arena_copies_exactly():
    tensors = [torch.randn(33, 7).bfloat16(), torch.randn(5), torch.arange(12, dtype=torch.int64).view(3, 4)]
    arena = HugePageArena(arena_bytes(tensors))
    copies = [arena.take(t) for t in tensors]
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(copies, tensors))
    assert all(c.data_ptr() % 64 == 0 for c in copies) and copies[0].data_ptr() % HUGE_PAGE_BYTES == 0
    assert arena.huge_bytes() >= 0
    with pytest.raises(ValueError, match="does not fit"):
        arena.take(torch.empty(HUGE_PAGE_BYTES))
