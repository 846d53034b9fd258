"""Advantage and loss math against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from batchscale.algorithms.registry import get_algorithm
from batchscale.algorithms.advantages import AdvantageInputs, grpo_advantages, group_normalize
from batchscale.algorithms.losses import clipped_policy_loss, kl_k3, token_weights
from batchscale.errors import UserError


def test_grpo_group_normalization_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])  # P=2 prompts x G=4
    adv = group_normalize(rewards, 4)
    # group 1: mean 0.5, population std 0.5 -> +-1; group 2: all equal -> 0
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, -1.0, 1.0, 0, 0, 0, 0]), atol=1e-5)


def test_grpo_without_std_normalization_only_centres():
    rewards = torch.tensor([3.0, 1.0, 2.0])  # one group of G=3, mean 2
    assert torch.allclose(group_normalize(rewards, 3, normalize_std=False), torch.tensor([1.0, -1.0, 0.0]))
    std = math.sqrt(2 / 3)
    assert torch.allclose(group_normalize(rewards, 3), torch.tensor([1 / std, -1 / std, 0.0]), atol=1e-5)


def test_grpo_advantage_is_broadcast_on_response_tokens_only():
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.float32)
    adv = grpo_advantages(AdvantageInputs(torch.tensor([1.0, 0.0]), mask, 2))
    assert torch.allclose(adv, torch.tensor([[0, 1, 1, 0], [0, 0, -1, -1]], dtype=torch.float32), atol=1e-5)


def test_registry_rejects_unknown_name_with_the_valid_ones():
    with pytest.raises(UserError) as info:
        get_algorithm("dpo")
    assert "grpo" in info.value.fix


def test_clipped_surrogate_by_hand():
    logp_old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))  # ratios 1.5, 0.5, 1.1
    adv = torch.tensor([[1.0, -1.0, 1.0]])
    weights = torch.ones(1, 3) / 3
    loss, clip_frac = clipped_policy_loss(logp, logp_old, adv, weights, clip_eps=0.2)
    # token 1: min(1.5, 1.2) = 1.2; token 2: min(-0.5, -0.8) = -0.8; token 3: min(1.1, 1.1) = 1.1
    assert loss.item() == pytest.approx(-(1.2 - 0.8 + 1.1) / 3)
    assert clip_frac.item() == pytest.approx(2 / 3)


def test_token_weights_sum_to_one_over_the_batch():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.float32)
    assert token_weights(mask, "token-mean", 3.0).sum().item() == pytest.approx(1.0)
    assert torch.allclose(token_weights(mask, "sequence-mean", 2.0), torch.tensor([[0.25, 0.25, 0], [0.5, 0, 0]]))


def test_kl_k3_is_zero_at_equal_policies_and_positive_otherwise():
    logp = torch.tensor([[-1.0, -2.0]])
    assert torch.allclose(kl_k3(logp, logp), torch.zeros(1, 2))
    assert (kl_k3(logp, logp + 0.3) > 0).all()
