"""The noise-scale estimate never changes the update: the trainer's update (norms taken around each chunk of whole
groups) gives the gradient of a plain accumulation over the same micro-batches, on the tiny model, for the actor and
the PPO critic; and the estimate is logged whenever an update holds two prompt groups."""

from __future__ import annotations

import copy

import pytest
import torch

from rollout_fixtures import batch_plan, policy, rollout, update_with_gradients  # noqa: F401  (fixtures)

from batchscale.algorithms.advantages import AdvantageInputs, grpo_advantages
from batchscale.algorithms.losses import loss_normalizer, token_weights
from batchscale.config import OptimConfig, derive_plan, load_config
from batchscale.train.actor import Actor, build_actor
from batchscale.train.critic import Critic, build_value_model
from batchscale.train.micro_batches import derive_halves_seed, iter_gradient_chunks
from batchscale.train.optimizer import build_optimizer


def test_chunks_hold_whole_groups_and_cover_the_batch(rollout):
    batch, _ = rollout
    for micro in (1, 4, 8, 12):  # two halves of whole groups whatever the micro-batch: 2 groups and 1
        chunks = [torch.cat(chunk) for chunk in iter_gradient_chunks(batch, micro, 4)]
        assert [len(c) for c in chunks] == [8, 4], micro
        assert sorted(torch.cat(chunks).tolist()) == list(range(12))
        for chunk in chunks:
            groups = {int(r) // 4 for r in chunk}
            assert len(chunk) == 4 * len(groups)  # every group in the chunk is there whole
        for micro_rows in (rows for chunk in iter_gradient_chunks(batch, micro, 4) for rows in chunk):
            assert len(micro_rows) <= micro


def plain_gradient(network, micro_loss, batch, micro_batch_size: int) -> list[torch.Tensor]:
    """The gradient of one update accumulated plainly, no norm taken: the update's micro-batches in its order, each
    `micro_loss` (the network's loss on one micro-batch) weighted over the whole batch, then backward."""
    normalizer = max(loss_normalizer(batch.response_mask, network.aggregation), 1.0)
    halves_seed = derive_halves_seed(network.seed, 0, 0)  # the halves `network.update(...)` draws at step 0
    for rows in (rows for chunk in iter_gradient_chunks(batch, micro_batch_size, 4, halves_seed=halves_seed)
                 for rows in chunk):
        micro, _ = batch.select(rows)
        loss, _ = micro_loss(micro, rows, token_weights(micro.response_mask, network.aggregation, normalizer))
        loss.backward()
    grads = [p.grad.clone() for p in network.model.parameters()]
    network.model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("micro", [1, 4, 12])
def test_taking_chunk_norms_never_changes_the_actor_gradient(policy, rollout, micro):
    batch, rewards = rollout
    adv = grpo_advantages(AdvantageInputs(rewards, batch.response_mask, 4))
    model = copy.deepcopy(policy.model)
    actor = Actor(model, build_optimizer(model.parameters(), OptimConfig(), 1e-3), batch_plan(micro), 0.2, None,
                  "token-mean")
    without = plain_gradient(actor, lambda *args: actor.policy_loss(*args, advantages=adv), batch, micro)
    stats, (with_norms,) = update_with_gradients(actor, batch, adv)
    assert {"gns/grad_sq", "gns/trace_sigma"} <= stats.keys()  # the norms were taken: two chunks
    for a, b in zip(with_norms, without):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8)


def test_taking_chunk_norms_never_changes_the_critic_gradient(policy, rollout):
    batch, rewards = rollout
    torch.manual_seed(0)
    model = build_value_model(policy.model)
    values_old = torch.zeros(batch.response_mask.shape)
    returns = rewards[:, None] * batch.response_mask
    critic = Critic(model, build_optimizer(model.parameters(), OptimConfig(), 1e-3), batch_plan(4), None, None,
                    "token-mean")
    without = plain_gradient(critic, lambda *args: critic.value_loss(*args, values_old, returns), batch, 4)
    stats, (with_norms,) = update_with_gradients(critic, batch, values_old, returns)
    assert {"gns/critic/grad_sq", "gns/critic/trace_sigma"} <= stats.keys()
    for a, b in zip(with_norms, without):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8)


def grpo_plan(random_model_dir, micro):
    cfg = load_config(None, [f"model.name='{random_model_dir}'", "batch.prompts_per_step=3", "batch.samples_per_prompt=4",
                             f"batch.micro_batch_size={micro}", "batch.reference_samples_per_step=12", "optim.lr=1e-3"])
    return cfg, derive_plan(cfg)


def test_update_logs_the_estimates_and_the_same_update_at_every_micro_batch_size(policy, rollout, random_model_dir):
    batch, rewards = rollout
    adv = grpo_advantages(AdvantageInputs(rewards, batch.response_mask, 4))
    params, stats = {}, {}
    for micro in (1, 4, 12):
        cfg, plan = grpo_plan(random_model_dir, micro)
        model = copy.deepcopy(policy.model)
        stats[micro] = build_actor(model, cfg, plan).update(batch, adv)
        params[micro] = [p.detach() for p in model.parameters()]
        assert {"gns/grad_sq", "gns/trace_sigma"} <= stats[micro].keys()
    for micro in (1, 4):  # the same two chunks at every micro-batch size: the same estimate, up to float rounding
        for key in ("gns/grad_sq", "gns/trace_sigma"):
            assert stats[micro][key] == pytest.approx(stats[12][key], rel=1e-3, abs=1e-6), (micro, key)
    for p1, p4, p12 in zip(params[1], params[4], params[12]):  # 1% of one Adam step (see test_microbatch_equivalence)
        torch.testing.assert_close(p1, p12, rtol=0, atol=1e-5)
        torch.testing.assert_close(p4, p12, rtol=0, atol=1e-5)


def test_a_step_of_several_updates_logs_the_first_updates_gradient_norm(policy, rollout, random_model_dir, monkeypatch):
    """With epochs x mini-batches > 1, grad_norm/actor is the norm of the first update (taken at the sampling policy
    over fresh samples), not the mean over the step's updates, which later epochs would pull down."""
    from batchscale.train import update

    batch, rewards = rollout
    adv = grpo_advantages(AdvantageInputs(rewards, batch.response_mask, 4))
    cfg = load_config(None, [f"model.name='{random_model_dir}'", "batch.prompts_per_step=3", "batch.samples_per_prompt=4",
                             "batch.micro_batch_size=2", "batch.reference_samples_per_step=12", "algorithm.name='ppo'",
                             "optim.lr=1e-3",
                             "algorithm.ppo_epochs=2", "algorithm.ppo_mini_batches=3"])
    plan = derive_plan(cfg)
    norms = iter([3.0, 5.0, 7.0, 9.0, 11.0, 13.0])
    real_step = update.clip_and_step
    monkeypatch.setattr(update, "clip_and_step",
                        lambda model, opt, limit: (real_step(model, opt, limit), next(norms))[1])
    stats = build_actor(copy.deepcopy(policy.model), cfg, plan).update(batch, adv)
    assert plan.updates_per_step == 6 and stats["grad_norm/actor"] == 3.0
