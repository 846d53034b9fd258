"""Greedy decoding scored by the task: the held-out evaluation, and ReMax's greedy baseline.

Evaluation is greedy on the task's fixed held-out set, so every run and seed is scored on the same problems; its
`eval/accuracy` counts exact answers and `eval/reward` averages the training reward. A non-finite score stops the run
at its step (train.health).
"""

from __future__ import annotations

import numpy as np
import torch

from batchscale.policy.policy import Policy
from batchscale.rollout.base import SamplingParams
from batchscale.tasks.base import prompt_text
from batchscale.train.health import check_rewards


def evaluate(policy: Policy, engine, task, max_new_tokens: int, step: int = 0, reward_spec: str = "",
             examples_kept: int = 0) -> tuple[dict, list[tuple[str, str, str, float, bool]]]:
    """eval/accuracy, eval/reward and eval/response_length of greedy responses to the task's eval set, and the first
    `examples_kept` (prompt, response, answer, reward, correct) of it, for samples.jsonl: `correct` is what
    eval/accuracy counted for that response, so a report can say which answers training fixed or broke."""
    examples = task.eval_examples()
    prompts = policy.format_prompts([e.prompt for e in examples])
    rollouts = engine.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, greedy=True))
    answers = [e.answer for e in examples]
    accuracy, scores = task.accuracy(rollouts.texts, examples), task.score(rollouts.texts, examples)
    for what, values in (("eval accuracy", accuracy), ("eval reward", scores)):
        check_rewards(step, values, reward_spec, rollouts.texts, answers, what=what)
    metrics = {"eval/accuracy": float(np.mean(accuracy)), "eval/reward": float(np.mean(scores)),
               "eval/response_length": float(np.mean([len(r) for r in rollouts.response_ids]))}
    kept = list(zip([prompt_text(e.prompt) for e in examples], rollouts.texts, answers, map(float, scores),
                    [bool(a >= 1.0) for a in accuracy]))[:examples_kept]
    return metrics, kept


def greedy_rewards(policy: Policy, engine, task, examples, sampling: SamplingParams, step: int = 0,
                   reward_spec: str = "") -> torch.Tensor:
    """(P,) reward of one greedy response per prompt: ReMax's baseline."""
    greedy = SamplingParams(sampling.temperature, sampling.top_p, sampling.max_new_tokens, greedy=True)
    rollouts = engine.generate(policy.format_prompts([ex.prompt for ex in examples]), greedy)
    scores = task.score(rollouts.texts, examples)
    check_rewards(step, scores, reward_spec, rollouts.texts, [ex.answer for ex in examples], what="baseline reward")
    return torch.tensor(scores, dtype=torch.float32)
