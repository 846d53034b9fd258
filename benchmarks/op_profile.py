"""Where the time of one engine generate call or one training update goes: torch.profiler's table of ops.

- `generate`: one call of the engine over --rows sequences of the arithmetic task (G = 8 per prompt, temperature 1,
  --max-new-tokens), after a warm-up call; the native kernels show up as the Python functions that call them, so the
  table is also given by Python function (cProfile).
- `update`: one GRPO update (`train.actor.Actor.update`: forward, backward, clip and AdamW step; micro-batch =
  --rows) over `profile training`'s batch of --rows sequences, in --compute-dtype arithmetic, after a warm-up pass.

    .venv/bin/python benchmarks/op_profile.py generate --model smollm2-135m --dtype bfloat16 --rows 256
    .venv/bin/python benchmarks/op_profile.py update --model examples/models/llama-10m --compute-dtype bfloat16 \\
        --rows 128
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch
from torch.profiler import ProfilerActivity, profile

from batchscale.config import ModelConfig, TaskConfig


def generate_call(args):
    from batchscale.policy.load import load_policy
    from batchscale.rollout import build_engine
    from batchscale.rollout.base import SamplingParams
    from batchscale.tasks import build_task

    policy = load_policy(ModelConfig(name=args.model, dtype=args.dtype), TaskConfig(), log=lambda m: None)
    prompts = [e.prompt for e in build_task(TaskConfig()).eval_examples()]
    batch = [p for p in prompts[: -(-args.rows // 8)] for _ in range(8)][: args.rows]
    engine = build_engine("engine", policy, max_concurrency=args.rows)
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens)
    return lambda: engine.generate(batch, params)


def update_call(args):
    from batchscale.profile import training

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.compute_dtype]
    policy, task, device = training.load_profiled_policy(ModelConfig(name=args.model, dtype="float32"), "cpu",
                                                         lambda m: None)
    batch = training.build_batch(policy, task, args.rows, 0, device)
    advantages = torch.randn(args.rows, 1, generator=torch.Generator().manual_seed(0)) * batch.response_mask
    actor = training.profiled_actor(policy, args.rows, args.rows, dtype)
    return lambda: actor.update(batch, advantages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["generate", "update"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="bfloat16", help="the weights (generate)")
    parser.add_argument("--compute-dtype", default="bfloat16", choices=["float32", "bfloat16"], help="(update)")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    call = generate_call(args) if args.what == "generate" else update_call(args)
    call()  # warm-up (and, for generate, the pack)
    start = time.perf_counter()
    call()
    print(f"{args.what}: {time.perf_counter() - start:.3f} s unprofiled, {args.threads} thread(s)")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))
    if args.what == "generate":
        profiler = cProfile.Profile()
        profiler.runcall(call)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
