"""What each training-step change buys: one GRPO update, timed side by side with and without each change.

The variants (alternated in one run, so load from other processes hits all alike; medians of --repeats):
- `before`: the update before issue 18: the LM head and log-softmax over every position (`full_head_logprobs` below,
  the old `policy.forward.token_logprobs`), micro-batches of consecutive rows, every row's prompt computed;
- `response head`: the LM head and log-softmax on response positions only;
- `sorted`: micro-batches of length-sorted rows (full head);
- `response head + sorted`;
- `response head + shared prompts`: a group's prompt computed once per micro-batch (`shared_prompts`);
- `all three` (what batchscale does now).
Each update is `train.actor.Actor.update`, the trainer's (two gradient chunks of micro-batches: forward, clipped
surrogate, backward; then clip and an AdamW step), in --compute-dtype arithmetic. Before issue 40 it was the gradient
accumulation alone, without the chunk norms of the gradient noise scale.

The batch is a real rollout: P prompts of the arithmetic task in the model's chat format, G responses each sampled by
the engine (temperature 1, up to --max-new-tokens) from the policy itself, so response lengths vary as they do in
training; advantages are GRPO's from the task's rewards.

    .venv/bin/python benchmarks/training_step.py --model smollm2-135m --max-new-tokens 16,128 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch

from batchscale.algorithms.advantages import AdvantageInputs, grpo_advantages
from batchscale.config import ModelConfig, TaskConfig
from batchscale.policy import forward
from batchscale.policy.load import load_policy
from batchscale.policy.sequences import collate
from batchscale.rollout import build_engine
from batchscale.rollout.base import SamplingParams
from batchscale.profile.training import profiled_actor
from batchscale.tasks import build_task
from batchscale.train import actor
from batchscale.train.micro_batches import iter_gradient_chunks
from batchscale.train.precision import resolve_training_dtype

TASK = TaskConfig(digits=1, template="What is {a} {op} {b}? Reply with the number only.", reward="last_integer_match",
                  eval_size=6)  # examples/smollm2-grpo.toml's task
VARIANTS = {  # name: (response-only head, length-sorted micro-batches, shared prompts)
    "before": (False, False, False),
    "response head": (True, False, False),
    "sorted": (False, True, False),
    "response head + sorted": (True, True, False),
    "response head + shared prompts": (True, False, True),
    "all three": (True, True, True),
}


def full_head_logprobs(model, batch) -> torch.Tensor:
    """The pre-issue-18 `policy.forward.token_logprobs`: logits and log-softmax at every position."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()  # (N, L-1, V)
    targets = batch.input_ids[:, 1:].unsqueeze(-1)  # (N, L-1, 1)
    return logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # (N, L-1)


def plain_hidden_states(body, batch, positions) -> torch.Tensor:
    """`shared_prompts.response_hidden_states` without sharing: the body over every row's prompt + response."""
    out = body(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    return out.last_hidden_state[:, :-1][positions]  # (M, H)


def rollout_batch(policy, task, prompts_per_step: int, samples_per_prompt: int, max_new_tokens: int, seed: int):
    """(batch, advantages, response lengths) of one GRPO rollout from the policy."""
    torch.manual_seed(seed)
    examples = task.sample_train(np.random.default_rng(seed), prompts_per_step)
    grouped = [ex for ex in examples for _ in range(samples_per_prompt)]
    engine = build_engine("engine", policy, max_concurrency=len(grouped))
    rollouts = engine.generate(policy.format_prompts([ex.prompt for ex in grouped]),
                               SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens))
    rewards = torch.tensor(task.score(rollouts.texts, grouped), dtype=torch.float32)
    batch = collate(rollouts.prompt_ids, rollouts.response_ids, policy.tokenizer.pad_token_id)
    advantages = grpo_advantages(AdvantageInputs(rewards, batch.response_mask, samples_per_prompt))
    if not advantages.any():  # all groups tied: any nonzero advantages cost the same
        advantages = torch.randn(len(batch), 1, generator=torch.Generator().manual_seed(seed)) * batch.response_mask
    return batch, advantages, [len(r) for r in rollouts.response_ids]


def timed_update(learner, batch, advantages, variant) -> float:
    response_head, sort, share = VARIANTS[variant]
    logprobs = actor.token_logprobs if response_head else full_head_logprobs
    hidden_states = forward.response_hidden_states if share else plain_hidden_states
    learner.sort_by_length = sort
    with mock.patch.object(actor, "token_logprobs", logprobs), \
            mock.patch.object(forward, "response_hidden_states", hidden_states):
        start = time.perf_counter()
        learner.update(batch, advantages)
        return time.perf_counter() - start


def computed_positions(batch, micro_batch_size: int, samples_per_prompt: int, sort: bool) -> int:
    return sum(batch.select(rows)[0].input_ids.numel()
               for chunk in iter_gradient_chunks(batch, micro_batch_size, samples_per_prompt, sort) for rows in chunk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--chat-template", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--max-new-tokens", default="16,128")
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--samples-per-prompt", type=int, default=4)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--compute-dtype", default="float32", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy(ModelConfig(name=args.model, chat_template=args.chat_template), TASK, log=lambda s: None)
    task = build_task(TASK)
    compute_dtype = resolve_training_dtype(args.compute_dtype, policy.model.dtype, "cpu")
    learner = profiled_actor(policy, args.prompts_per_step * args.samples_per_prompt, args.micro_batch_size,
                             compute_dtype, args.samples_per_prompt)
    learner.optimizer.param_groups[0]["lr"] = 1e-7  # the weights, so the work, stay the same from repeat to repeat
    rows = []
    for max_new_tokens in [int(x) for x in args.max_new_tokens.split(",")]:
        batch, advantages, lengths = rollout_batch(policy, task, args.prompts_per_step, args.samples_per_prompt,
                                                   max_new_tokens, args.seed)
        times = {variant: [] for variant in VARIANTS}
        for repeat in range(args.repeats + 1):  # the first round warms up every variant and is dropped
            for variant in VARIANTS:
                seconds = timed_update(learner, batch, advantages, variant)
                if repeat:
                    times[variant].append(seconds)
        base = statistics.median(times["before"])
        row = {"max_new_tokens": max_new_tokens, "response_lengths": lengths,
               "tokens": int(batch.attention_mask.sum()), "response_tokens": int(batch.response_mask.sum()),
               "computed_positions": {
                   order: computed_positions(batch, args.micro_batch_size, args.samples_per_prompt, sort)
                   for order, sort in (("batch order", False), ("sorted", True))},
               "seconds": {v: statistics.median(t) for v, t in times.items()}, "seconds_repeats": times}
        row["speedup"] = {v: base / s for v, s in row["seconds"].items()}
        rows.append(row)
        print(f"max_new_tokens {max_new_tokens}: response lengths {sorted(lengths)}; {row['tokens']} tokens "
              f"({row['response_tokens']} response); positions computed: {row['computed_positions']}")
        for variant in VARIANTS:
            print(f"  {variant:32s} {row['seconds'][variant]:8.3f} s  x{row['speedup'][variant]:.2f}")
    result = {"model": args.model, "compute_dtype": str(compute_dtype).removeprefix("torch."), "threads": args.threads,
              "prompts_per_step": args.prompts_per_step, "samples_per_prompt": args.samples_per_prompt,
              "micro_batch_size": args.micro_batch_size, "repeats": args.repeats, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
