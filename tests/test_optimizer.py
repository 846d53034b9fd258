"""The optimizer (train.optimizer): torch's fused Adam kernel where it runs, which changes rounding only, and whose steps
the rollout engine sees (the fused CPU kernel leaves version counters alone; a step hook bumps them)."""

from __future__ import annotations

import copy

import pytest
import torch

from batchscale.config import ModelConfig, OptimConfig, TaskConfig
from batchscale.policy.load import load_policy
from batchscale.rollout import build_engine
from batchscale.rollout.base import SamplingParams
from batchscale.rollout.weights import PackedWeights
from batchscale.train.optimizer import build_optimizer, fused_supported


def shapes_of_a_model():
    """Parameters of a small decoder's shapes (an embedding, square and wide matrices, norms)."""
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(*shape, generator=g) * 0.02)
            for shape in [(97, 16), (16, 16), (48, 16), (16, 48), (16,)] * 3]


@pytest.mark.parametrize("name", ["adamw", "adam"])
def test_the_fused_step_is_the_multi_tensor_step_up_to_rounding(name):
    cfg = OptimConfig(name=name, weight_decay=0.01)
    fused_params, plain_params = shapes_of_a_model(), shapes_of_a_model()
    fused = build_optimizer(fused_params, cfg, 1e-3)
    plain = type(fused)(plain_params, lr=1e-3, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay,
                        foreach=True)
    assert fused.defaults["fused"] and not plain.defaults.get("fused")
    g = torch.Generator().manual_seed(1)
    for step in range(5):
        for a, b in zip(fused_params, plain_params):
            a.grad = torch.randn(a.shape, generator=g) * 10.0 ** -(step % 3 + 2)
            b.grad = a.grad.clone()
        fused.step()
        plain.step()
    moved = max(float((a.detach() - b0.detach()).abs().max()) for a, b0 in zip(fused_params, shapes_of_a_model()))
    assert moved > 1e-3  # five steps of lr 1e-3 moved the weights
    for a, b in zip(fused_params, plain_params):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)


def test_fused_only_where_torch_has_the_kernel():
    assert fused_supported(shapes_of_a_model())
    assert not fused_supported([torch.zeros(3, dtype=torch.long)])
    assert not fused_supported([torch.nn.Parameter(torch.zeros(3), requires_grad=False).to("meta")])


def test_every_step_is_seen_by_the_engine_weight_cache(random_model_dir):
    """Without the hook the fused CPU kernel leaves `_version` as it was, and the engine kept sampling from the first
    packed weights: a resumed run (fresh pack) then diverged from the uninterrupted one (tests/test_resume.py)."""
    policy = load_policy(ModelConfig(name=str(random_model_dir)), TaskConfig(), log=lambda s: None)
    model = policy.model
    optimizer = build_optimizer(model.parameters(), OptimConfig(), 1e-2)
    before = PackedWeights.version_key(model)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    assert PackedWeights.version_key(model) != before
    engine = build_engine("engine", policy, max_concurrency=4)
    prompts = policy.format_prompts(["12+34="] * 4)
    sampling = SamplingParams(max_new_tokens=6, greedy=True)
    first = engine.generate(prompts, sampling).logprobs
    fresh = copy.deepcopy(policy)
    g = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)
    optimizer.step()
    with torch.no_grad():
        for p, q in zip(fresh.model.parameters(), model.parameters()):
            p.copy_(q)
    after = engine.generate(prompts, sampling).logprobs
    expected = build_engine("engine", fresh, max_concurrency=4).generate(prompts, sampling).logprobs
    assert first is not None and expected != first  # the step moved the log-probs, so stale weights would show
    assert after == expected
