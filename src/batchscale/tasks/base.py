"""The task interface: prompts with a verifiable answer, a reward, and a fixed held-out eval set.

A task yields `Example(prompt, answer)` rows. A prompt is text, or a `Chat`: messages kept as messages (a dataset of
chat prompts), which only the policy's chat template turns into text (`model.chat_template = true`). Training prompts are drawn from the train split with the run's own
random generator; the eval split is fixed by the task config alone, so every run and seed is scored on the same
problems.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchscale.tasks.rewards import RewardFn, score_batch

@dataclass(frozen=True)
class Chat:
    """A prompt given as chat messages, each (role, content), in order."""

    messages: tuple[tuple[str, str], ...]

    def as_messages(self) -> list[dict[str, str]]:
        """The messages as a chat template takes them."""
        return [{"role": role, "content": content} for role, content in self.messages]

    def text(self) -> str:
        """How the prompt is shown (samples.jsonl, the report): one "role: content" line per message."""
        return "\n".join(f"{role}: {content}" for role, content in self.messages)


@dataclass(frozen=True)
class Example:
    prompt: str | Chat
    answer: str


def prompt_text(prompt: str | Chat) -> str:
    """A prompt as text to show: itself, or its messages one per line."""
    return prompt.text() if isinstance(prompt, Chat) else prompt


def chat_messages(prompt: str | Chat) -> list[dict[str, str]]:
    """A prompt as chat messages: its own, or a text prompt as one user turn."""
    return prompt.as_messages() if isinstance(prompt, Chat) else [{"role": "user", "content": prompt}]


class Task:
    name: str
    reward_fn: RewardFn  # what training optimizes (a user's reward: a rewards.UserReward, scored in its worker)
    accuracy_fn: RewardFn  # what evaluation reports as eval/accuracy (exact correctness)
    chat_prompts: bool = False  # some prompts are chat messages (Chat): only a chat template turns them into text

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
