"""The task interface: prompts with a verifiable answer, a reward, and a fixed held-out eval set.

A task yields `Example(prompt, answer)` rows. Training prompts are drawn from the train split with the run's own
random generator; the eval split is fixed by the task config alone, so every run and seed is scored on the same
problems.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchscale.tasks.rewards import RewardFn, score_batch

@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str


class Task:
    name: str
    reward_fn: RewardFn  # what training optimizes (a user's reward: a rewards.UserReward, scored in its worker)
    accuracy_fn: RewardFn  # what evaluation reports as eval/accuracy (exact correctness)

    def sample_train(self, rng: np.random.Generator, count: int) -> list[Example]:
        raise NotImplementedError

    def eval_examples(self) -> list[Example]:
        raise NotImplementedError

    def score(self, responses: list[str], examples: list[Example]) -> list[float]:
        return score_batch(self.reward_fn, responses, [ex.answer for ex in examples])

    def accuracy(self, responses: list[str], examples: list[Example]) -> list[float]:
        return score_batch(self.accuracy_fn, responses, [ex.answer for ex in examples])

    def close(self) -> None:
        """Stop the worker process of a user reward, if there is one (built-in rewards have none)."""
        for fn in (self.reward_fn, self.accuracy_fn):
            if hasattr(fn, "close"):
                fn.close()
