"""Micro-batching changes execution only, for PPO's actor and critic: micro_batch_size 1 and the full batch give the same
gradients, in the single pass and with extra epochs and mini-batches (logp_old and values stored before the update),
whether micro-batches hold length-sorted rows or rows in batch order. Each update is the trainer's (`Actor.update`,
`Critic.update`)."""

from __future__ import annotations

import copy

import pytest
import torch

from rollout_fixtures import policy, rollout, update_with_gradients  # noqa: F401  (fixtures: 3 x 4 responses, rewards)

from batchscale.algorithms.advantages import AdvantageInputs, gae_returns, ppo_advantages
from batchscale.config import OptimConfig, derive_plan, load_config
from batchscale.train.actor import Actor
from batchscale.train.critic import Critic, build_value_model
from batchscale.train.optimizer import build_optimizer

LR = 1e-3


def ppo_config(random_model_dir, micro_batch_size, epochs=1, mini_batches=1):
    return load_config(None, [
        f"model.name='{random_model_dir}'", "algorithm.name=ppo", "batch.prompts_per_step=3", "batch.samples_per_prompt=4",
        f"batch.micro_batch_size={micro_batch_size}", "batch.reference_samples_per_step=12", "run.budget_samples=12",
        f"algorithm.ppo_epochs={epochs}", f"algorithm.ppo_mini_batches={mini_batches}", "algorithm.gamma=0.9",
        "algorithm.gae_lambda=0.8", f"critic.lr={LR}", "critic.value_clip=0.05",
        # Adam's step is lr * g / (|g| + eps): with eps well above float rounding of g, a gradient entry near 0 cannot
        # turn float noise into a full-size step, so parameters after the update can be compared tightly
        "optim.eps=1e-6"])


def inputs_for(critic_model, batch, rewards):
    """Advantage inputs with the critic's values; the value head is scaled up so that values are far from 0."""
    with torch.no_grad():
        values = critic_model(batch.input_ids, batch.attention_mask)[:, :-1] * batch.response_mask  # (N, T)
    return AdvantageInputs(rewards, batch.response_mask, 4, values=values, gamma=0.9, gae_lambda=0.8)


@pytest.fixture(scope="module")
def critic_model(policy):
    torch.manual_seed(0)
    model = build_value_model(policy.model)
    with torch.no_grad():
        model.head.weight.mul_(50.0)
    return model


def test_critic_values_do_not_depend_on_micro_batching(policy, critic_model, rollout, random_model_dir):
    batch, _ = rollout
    values = [Critic(critic_model, None, derive_plan(ppo_config(random_model_dir, m)), 0.2, 1.0, "token-mean").values(batch)
              for m in (1, 4, 12)]
    mask = batch.response_mask  # only response positions are used; past a micro-batch's own width the values are 0
    torch.testing.assert_close(values[0] * mask, values[2] * mask, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(values[1] * mask, values[2] * mask, rtol=1e-5, atol=1e-5)
    assert (values[2] * mask).abs().sum() > 0


@pytest.mark.parametrize("aggregation", ["token-mean", "sequence-mean"])
def test_critic_gradient_micro_batch_1_equals_full_batch(critic_model, rollout, aggregation, random_model_dir):
    batch, rewards = rollout
    inputs = inputs_for(critic_model, batch, rewards)
    returns = gae_returns(inputs)
    # values at rollout time differ from the current ones (as after an earlier epoch), so clipping is active
    values_old = inputs.values + 0.1 * torch.sin(torch.arange(inputs.values.numel()).view_as(inputs.values).float())
    grads, stats = {}, {}
    for micro, sort in ((1, True), (4, True), (4, False), (12, True)):
        model = copy.deepcopy(critic_model)
        critic = Critic(model, build_optimizer(model.parameters(), OptimConfig(), LR),
                        derive_plan(ppo_config(random_model_dir, micro)), 0.05, None, aggregation, sort_by_length=sort)
        stats[micro, sort], (grads[micro, sort],) = update_with_gradients(critic, batch, values_old, returns)
    full = (12, True)
    assert 0 < stats[full]["critic/value_clip_frac"] < 1
    for micro in ((1, True), (4, True), (4, False)):
        assert stats[micro]["loss/value"] == pytest.approx(stats[full]["loss/value"], rel=1e-5)
        for g, g_full in zip(grads[micro], grads[full]):  # float32 sums in another order: agree to 1e-5 of the largest
            torch.testing.assert_close(g, g_full, rtol=1e-4, atol=1e-5 * float(g_full.abs().max()))


def test_actor_gradient_with_ppo_advantages_micro_batch_1_equals_full_batch(policy, critic_model, rollout,
                                                                             random_model_dir):
    batch, rewards = rollout
    advantages = ppo_advantages(inputs_for(critic_model, batch, rewards))
    grads = {}
    for micro, sort in ((1, True), (4, True), (4, False), (12, True)):
        model = copy.deepcopy(policy.model)
        actor = Actor(model, build_optimizer(model.parameters(), OptimConfig(), LR),
                      derive_plan(ppo_config(random_model_dir, micro)), 0.2, None, "token-mean", sort_by_length=sort)
        _, (grads[micro, sort],) = update_with_gradients(actor, batch, advantages)
    assert any(g.abs().sum() > 0 for g in grads[12, True])
    for micro in ((1, True), (4, True), (4, False)):
        for g, g_full in zip(grads[micro], grads[12, True]):
            torch.testing.assert_close(g, g_full, rtol=1e-4, atol=1e-7)


def full_update(policy, critic_model, rollout, random_model_dir, micro, epochs, mini_batches):
    """The trainer's actor and critic updates for one rollout batch; returns the parameters after them and the stats."""
    cfg = ppo_config(random_model_dir, micro, epochs, mini_batches)
    plan = derive_plan(cfg)
    batch, rewards = rollout
    actor, value_model = copy.deepcopy(policy.model), copy.deepcopy(critic_model)
    critic = Critic(value_model, build_optimizer(value_model.parameters(), cfg.optim, plan.critic.lr), plan,
                    cfg.critic.value_clip, cfg.critic.max_grad_norm, cfg.algorithm.loss_aggregation)
    inputs = AdvantageInputs(rewards, batch.response_mask, 4, values=critic.values(batch), gamma=0.9, gae_lambda=0.8)
    actor_stats = Actor(actor, build_optimizer(actor.parameters(), cfg.optim, LR), plan, cfg.algorithm.clip_eps,
                        cfg.optim.max_grad_norm, cfg.algorithm.loss_aggregation).update(batch, ppo_advantages(inputs))
    critic_stats = critic.update(batch, inputs.values, gae_returns(inputs))
    return list(actor.parameters()), list(value_model.parameters()), {**actor_stats, **critic_stats}


@pytest.mark.parametrize("epochs, mini_batches", [(1, 1), (2, 3)])
def test_actor_and_critic_updates_do_not_depend_on_micro_batching(policy, critic_model, rollout, random_model_dir,
                                                                   epochs, mini_batches):
    full = 12 // mini_batches
    actor_1, critic_1, stats_1 = full_update(policy, critic_model, rollout, random_model_dir, 1, epochs, mini_batches)
    actor_n, critic_n, stats_n = full_update(policy, critic_model, rollout, random_model_dir, full, epochs, mini_batches)
    for key in ("grad_norm/actor", "grad_norm/critic", "loss/policy", "loss/value"):
        assert stats_1[key] == pytest.approx(stats_n[key], rel=1e-4, abs=1e-7), key
    assert stats_n["grad_norm/critic"] > 0 and stats_n["grad_norm/actor"] > 0
    if epochs * mini_batches > 1:  # later updates compare against the stored rollout-time log-probs and values
        assert stats_n["actor/clip_frac"] >= 0 and stats_n["critic/value_clip_frac"] > 0
    # parameters agree to 1% of one Adam step per update (see optim.eps above)
    tolerance = 1e-2 * LR * epochs * mini_batches
    for p1, pn in zip(actor_1 + critic_1, actor_n + critic_n):
        torch.testing.assert_close(p1, pn, rtol=0, atol=tolerance)


def test_the_critic_update_moves_only_the_critic(policy, critic_model, rollout, random_model_dir):
    actor, value_params, _ = full_update(policy, critic_model, rollout, random_model_dir, 12, 1, 1)
    assert any(not torch.equal(a, b) for a, b in zip(value_params, critic_model.parameters()))
    body = dict(policy.model.base_model.named_parameters())
    assert all(torch.equal(body[name], p) for name, p in critic_model.body.named_parameters())  # the policy is untouched
