"""PPO math against hand computations: outcome reward placement, GAE(gamma, lambda), whitening, the clipped value loss,
explained variance; and the algorithm registry."""

from __future__ import annotations

import pytest
import torch

from batchscale.algorithms.advantages import (AdvantageInputs, gae, gae_returns, outcome_token_rewards, ppo_advantages,
                                              whiten)
from batchscale.algorithms.losses import clipped_value_loss
from batchscale.algorithms.registry import get_algorithm
from batchscale.errors import UserError
from batchscale.train.critic import explained_variance

# two responses of different lengths at different offsets: row 0 answers at positions 1-3, row 1 at positions 2-4
MASK = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]], dtype=torch.float32)
VALUES = torch.tensor([[9.0, 0.5, 0.6, 0.7, 9.0], [9.0, 9.0, 0.2, 0.4, 0.1]])  # 9.0 off the response: must be ignored
REWARDS = torch.tensor([1.0, 0.0])


def test_outcome_reward_sits_on_the_last_response_token():
    assert torch.equal(outcome_token_rewards(torch.tensor([1.0, 0.5]), MASK),
                       torch.tensor([[0, 0, 0, 1.0, 0], [0, 0, 0, 0, 0.5]]))


def test_gae_by_hand():
    gamma, lam = 0.9, 0.8  # gamma * lambda = 0.72
    advantages, returns = gae(outcome_token_rewards(REWARDS, MASK), VALUES, MASK, gamma, lam)
    # row 0, backwards: delta_3 = 1 - 0.7 = 0.3; delta_2 = 0.9*0.7 - 0.6 = 0.03; delta_1 = 0.9*0.6 - 0.5 = 0.04
    a3 = 0.3
    a2 = 0.03 + 0.72 * a3  # 0.246
    a1 = 0.04 + 0.72 * a2  # 0.21712
    # row 1: delta_4 = 0 - 0.1; delta_3 = 0.9*0.1 - 0.4 = -0.31; delta_2 = 0.9*0.4 - 0.2 = 0.16
    b4 = -0.1
    b3 = -0.31 + 0.72 * b4  # -0.382
    b2 = 0.16 + 0.72 * b3  # -0.11504
    expected = torch.tensor([[0, a1, a2, a3, 0], [0, 0, b2, b3, b4]])
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, (expected + VALUES) * MASK)
    assert returns[0, 3].item() == pytest.approx(1.0) and returns[1, 4].item() == pytest.approx(0.0)


def test_gae_with_gamma_and_lambda_one_is_reward_minus_value():
    advantages, returns = gae(outcome_token_rewards(REWARDS, MASK), VALUES, MASK, 1.0, 1.0)
    torch.testing.assert_close(advantages, (REWARDS[:, None] - VALUES) * MASK)
    torch.testing.assert_close(returns, REWARDS[:, None] * MASK)


def test_ppo_advantages_are_whitened_over_the_batch_and_returns_are_not():
    inputs = AdvantageInputs(REWARDS, MASK, 1, values=VALUES, gamma=0.9, gae_lambda=0.8)
    adv = ppo_advantages(inputs)
    on = MASK > 0
    assert adv[on].mean().item() == pytest.approx(0.0, abs=1e-6)
    assert adv[on].std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)
    assert (adv[~on] == 0).all()
    raw, returns = gae(outcome_token_rewards(REWARDS, MASK), VALUES, MASK, 0.9, 0.8)
    torch.testing.assert_close(adv, whiten(raw, MASK))
    torch.testing.assert_close(gae_returns(inputs), returns)
    unwhitened = ppo_advantages(AdvantageInputs(REWARDS, MASK, 1, values=VALUES, gamma=0.9, gae_lambda=0.8, whiten=False))
    torch.testing.assert_close(unwhitened, raw)


def test_clipped_value_loss_by_hand():
    values_old = torch.full((1, 4), 0.5)
    values = torch.tensor([[0.9, 0.2, 0.55, 0.1]], requires_grad=True)
    returns = torch.tensor([[1.0, 0.0, 1.0, 1.0]])
    weights = torch.full((1, 4), 0.25)
    loss, clip_frac = clipped_value_loss(values, values_old, returns, weights, value_clip=0.2)
    # token 0: V moved +0.4 toward R; clipped to 0.7: max(0.1^2, 0.3^2) = 0.09 (clipped, no gradient)
    # token 1: V moved -0.3 toward R; clipped to 0.3: max(0.2^2, 0.3^2) = 0.09 (clipped, no gradient)
    # token 2: inside the clip range: 0.45^2 = 0.2025
    # token 3: V moved away from R by 0.4; clipped to 0.3: max(0.9^2, 0.7^2) = 0.81 (unclipped, gradient flows)
    assert loss.item() == pytest.approx(0.5 * (0.09 + 0.09 + 0.2025 + 0.81) / 4)
    assert clip_frac.item() == pytest.approx(0.5)
    loss.backward()
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, 0.0, 0.25 * (0.55 - 1.0), 0.25 * (0.1 - 1.0)]]))


def test_value_loss_without_clipping_is_half_squared_error():
    values, returns = torch.tensor([[0.9, 0.2]]), torch.tensor([[1.0, 0.0]])
    loss, clip_frac = clipped_value_loss(values, torch.zeros(1, 2), returns, torch.full((1, 2), 0.5), value_clip=None)
    assert loss.item() == pytest.approx(0.5 * (0.01 + 0.04) / 2) and clip_frac.item() == 0


def test_explained_variance_by_hand():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    returns = torch.tensor([[1.0, 0.0, 7.0], [1.0, 0.0, 1.0]])
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    constant = torch.full_like(returns, 0.6)  # the mean of the masked returns: explains nothing
    assert explained_variance(constant, returns, mask) == pytest.approx(0.0, abs=1e-6)
    half = returns * 0.5  # residual = returns / 2: Var(R/2) / Var(R) = 1/4
    assert explained_variance(half, returns, mask) == pytest.approx(0.75)


def test_registry_lists_every_algorithm_in_its_error():
    with pytest.raises(UserError) as info:
        get_algorithm("a2c")
    assert info.value.field == "algorithm.name"
    for name in ("grpo", "ppo", "remax"):
        assert name in info.value.fix


def test_algorithms_declare_their_needs():
    ppo, remax, grpo = get_algorithm("ppo"), get_algorithm("remax"), get_algorithm("grpo")
    assert ppo.needs_critic and ppo.compute_value_targets is not None and ppo.spec.min_samples_per_prompt == 1
    assert remax.needs_greedy_baseline and not remax.needs_critic and remax.spec.min_samples_per_prompt == 1
    assert not grpo.needs_critic and not grpo.needs_greedy_baseline and grpo.spec.min_samples_per_prompt == 2
