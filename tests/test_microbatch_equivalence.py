"""Micro-batching changes execution only: micro_batch_size 1 and micro_batch_size P*G give the same update, and so do
micro-batches of length-sorted rows and of rows in batch order. Each update is the trainer's (`Actor.update`)."""

from __future__ import annotations

import copy

import pytest
import torch

from rollout_fixtures import batch_plan, update_with_gradients

from batchscale.algorithms.advantages import AdvantageInputs, grpo_advantages
from batchscale.config import OptimConfig
from batchscale.policy.load import load_policy
from batchscale.policy.sequences import collate
from batchscale.train.actor import Actor
from batchscale.train.micro_batches import iter_micro_batches
from batchscale.train.optimizer import build_optimizer


def rollout_batch(tokenizer, n_prompts=3, group=4, seed=0):
    """Responses of different lengths, so micro-batches pad differently."""
    g = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for p in range(n_prompts):
        prompt = tokenizer(f"{p + 10}+{p * 7}=")["input_ids"]
        for _ in range(group):
            length = int(torch.randint(1, 6, (1,), generator=g))
            responses.append(torch.randint(4, 20, (length,), generator=g).tolist() + [tokenizer.eos_token_id])
            prompts.append(prompt)
    rewards = torch.randint(0, 2, (n_prompts * group,), generator=g).float()
    return prompts, responses, rewards


@pytest.fixture(scope="module")
def policy(random_model_dir):
    from batchscale.config import ModelConfig, TaskConfig

    return load_policy(ModelConfig(name=str(random_model_dir)), TaskConfig(), log=lambda s: None)


def one_update(policy, micro_batch_size, aggregation, kl_coef=0.0, sort_by_length=True):
    model = copy.deepcopy(policy.model)
    ref = copy.deepcopy(policy.model) if kl_coef else None
    if ref is not None:  # make the reference differ (identically in every call) so the KL term has a gradient
        torch.manual_seed(1)
        with torch.no_grad():
            for p in ref.parameters():
                p.add_(0.01 * torch.randn_like(p))
    prompts, responses, rewards = rollout_batch(policy.tokenizer)
    batch = collate(prompts, responses, policy.tokenizer.pad_token_id)
    adv = grpo_advantages(AdvantageInputs(rewards, batch.response_mask, 4))
    # Adam's eps well above float rounding of g: a gradient entry near 0 cannot turn float noise into a sizeable step
    optimizer = build_optimizer(model.parameters(), OptimConfig(lr=1e-3, eps=1e-6), lr=1e-3)
    actor = Actor(model, optimizer, batch_plan(micro_batch_size), 0.2, 1.0, aggregation, ref_model=ref,
                  kl_coef=kl_coef, sort_by_length=sort_by_length)
    stats, (grads,) = update_with_gradients(actor, batch, adv)
    return grads, stats["grad_norm/actor"], [p.detach().clone() for p in model.parameters()], stats


@pytest.mark.parametrize("aggregation", ["token-mean", "sequence-mean"])
@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_micro_batch_1_equals_full_batch(policy, aggregation, kl_coef):
    grads_1, norm_1, params_1, _ = one_update(policy, 1, aggregation, kl_coef)
    grads_n, norm_n, params_n, _ = one_update(policy, 12, aggregation, kl_coef)
    grads_4, norm_4, params_4, _ = one_update(policy, 4, aggregation, kl_coef)
    assert norm_1 > 0
    assert norm_1 == pytest.approx(norm_n, rel=1e-5) and norm_4 == pytest.approx(norm_n, rel=1e-5)
    for g1, g4, gn in zip(grads_1, grads_4, grads_n):
        torch.testing.assert_close(g1, gn, rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(g4, gn, rtol=1e-4, atol=1e-7)
    # Adam's first step is lr * g / (|g| + eps): where |g| is near eps, float-rounding differences in g move the
    # update by a small fraction of lr (1e-3 here), so parameters agree to 1% of one step (eps = 1e-6 keeps the
    # fraction small where |g| is near 0)
    for p1, pn in zip(params_1, params_n):
        torch.testing.assert_close(p1, pn, rtol=0, atol=1e-2 * 1e-3)


@pytest.mark.parametrize("aggregation", ["token-mean", "sequence-mean"])
@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_length_sorted_micro_batches_equal_batch_order(policy, aggregation, kl_coef):
    """Sorting regroups rows (micro-batches of 4 hold other rows than in batch order), never the update."""
    prompts, responses, _ = rollout_batch(policy.tokenizer)
    batch = collate(prompts, responses, policy.tokenizer.pad_token_id)
    groups = [{frozenset(rows.tolist()) for rows in iter_micro_batches(batch, 4, sort)} for sort in (True, False)]
    assert groups[0] != groups[1]
    grads_s, norm_s, params_s, stats_s = one_update(policy, 4, aggregation, kl_coef, sort_by_length=True)
    grads_u, norm_u, params_u, stats_u = one_update(policy, 4, aggregation, kl_coef, sort_by_length=False)
    assert norm_s == pytest.approx(norm_u, rel=1e-5)
    assert {"loss/policy", "actor/clip_frac"} <= stats_u.keys() and ("loss/kl" in stats_u) == (kl_coef > 0)
    # gns/ left out: sorting regroups the chunks, so their estimates differ. The GRPO loss sums to ~0 from shares of
    # ~0.1: float32 rounding of the shares is ~1e-8
    for key in (k for k in stats_u if not k.startswith("gns/")):
        assert stats_s[key] == pytest.approx(stats_u[key], rel=1e-5, abs=1e-7), key
    for gs, gu in zip(grads_s, grads_u):
        torch.testing.assert_close(gs, gu, rtol=1e-4, atol=1e-7)
    for ps, pu in zip(params_s, params_u):  # 1% of one Adam step, as above
        torch.testing.assert_close(ps, pu, rtol=0, atol=1e-2 * 1e-3)


def test_update_changes_parameters(policy):
    _, _, after, _ = one_update(policy, 12, "token-mean")
    assert any(not torch.equal(a, b) for a, b in zip(after, policy.model.parameters()))
