"""The policy: a causal LM, its tokenizer, and how a task's prompt becomes the text the model sees."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Policy:
    model: torch.nn.Module
    tokenizer: object
    name: str

    chat_template: bool = False

    def format_prompts(self, prompts: list[str]) -> list[str]:
        """The text the model sees: the task's prompt, or a user turn in the model's chat format."""
        if not self.chat_template:
            return prompts
        return [self.tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                                   add_generation_prompt=True) for p in prompts]

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())
