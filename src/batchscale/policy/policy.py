"""The policy: a causal LM, its tokenizer, and how a task's prompt becomes the text the model sees."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from batchscale.errors import UserError
from batchscale.tasks.base import Chat, chat_messages


@dataclass
class Policy:
    model: torch.nn.Module
    tokenizer: object
    name: str

    chat_template: bool = False

    def format_prompts(self, prompts: list[str | Chat]) -> list[str]:
        """The text the model sees: the task's prompt, or its messages (a text prompt: one user turn) in the model's
        chat format. A task of chat prompts is refused before any compute without a chat template (build_task); this
        check is the last line."""
        if not self.chat_template:
            if any(isinstance(p, Chat) for p in prompts):
                raise UserError("model.chat_template", "the task's prompts are chat messages, but "
                                "model.chat_template = false", "set model.chat_template = true")
            return prompts
        return [self.tokenizer.apply_chat_template(chat_messages(p), tokenize=False, add_generation_prompt=True)
                for p in prompts]

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())
