"""ReMax's advantage against a hand computation: each sample's reward minus its own prompt's greedy reward."""

from __future__ import annotations

import torch

from batchscale.algorithms.advantages import AdvantageInputs, remax_advantages


def test_remax_advantage_by_hand():
    # P=2 prompts x G=2 samples, prompt-major; greedy rewards 0.5 (prompt 0) and 1.0 (prompt 1)
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0])
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1]], dtype=torch.float32)
    adv = remax_advantages(AdvantageInputs(rewards, mask, 2, baseline_rewards=torch.tensor([0.5, 1.0])))
    expected = torch.tensor([[0, 0.5, 0.5, 0], [0, -0.5, 0, 0], [0, 0, -0.5, -0.5], [0, 0, 0, 0]])
    torch.testing.assert_close(adv, expected)


def test_remax_with_one_sample_per_prompt():
    rewards, greedy = torch.tensor([1.0, 0.0, 0.25]), torch.tensor([0.0, 0.0, 1.0])
    adv = remax_advantages(AdvantageInputs(rewards, torch.ones(3, 2), 1, baseline_rewards=greedy))
    torch.testing.assert_close(adv, torch.tensor([[1.0, 1.0], [0.0, 0.0], [-0.75, -0.75]]))
