"""The rollout interface the trainer uses: prompts in, sampled responses (token ids and text) out.

Engines differ in how they schedule decoding, never in what they return. Each call also reports decode statistics
(`active_mean`: mean number of sequences decoding together per decode step), the quantity the paper's systems side
is about: a larger logical batch helps only when it raises active concurrency.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 8
    greedy: bool = False


@dataclass
class Rollouts:
    prompt_ids: list[list[int]]  # per sample, with the tokenizer's special prefix (e.g. <bos>)
    response_ids: list[list[int]]  # per sample, up to and including <eos> when one was produced
    texts: list[str]  # decoded responses, special tokens removed
    stats: dict = field(default_factory=dict)  # e.g. {"active_mean": ..., "decode_steps": ...}
    logprobs: list[list[float]] | None = None  # per sample, the model's log-prob of each response token (if reported)

    @property
    def tokens_generated(self) -> int:
        return sum(len(r) for r in self.response_ids)


class RolloutEngine:
    name: str

    def generate(self, prompts: list[str], params: SamplingParams) -> Rollouts:
        raise NotImplementedError


@dataclass
class StepRollouts:
    """One step's rollouts as the training loop receives them: P examples, their P*G responses (prompt-major), and,
    from an asynchronous generator, what the off-policy correction and the log need."""

    examples: list  # (P,) task examples
    rollouts: Rollouts  # (P*G,) responses, group by group
    record: dict = field(default_factory=dict)  # step-record keys of the rollout source (async/*, generator times)
    versions: list[list[int]] | None = None  # per response, the weights version of each token; None: on-policy
    version: int = 0  # the version being updated
    group_ids: list[int] | None = None  # asynchronous: the groups taken, in order
