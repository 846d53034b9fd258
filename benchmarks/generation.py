"""Engine vs Hugging Face generate on one workload, side by side: tokens/s and the ratio per concurrency.

Both backends get the same model, prompts (the built-in arithmetic task, G responses per prompt as a GRPO rollout
draws them), max new tokens, sampling (temperature 1, top_p 1) and seed. Per level each backend is warmed up once,
then the two are timed alternately (engine, hf, engine, hf, ...) so load from other processes hits both alike; the
median of --repeats is reported. HF generate runs static batches of `concurrency` prompts; the engine runs continuous
batching with max_concurrency = concurrency. vLLM-CPU is not compared yet.

    .venv/bin/python benchmarks/generation.py --model tiny --levels 1,16,64,128,256 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from batchscale.config import ModelConfig, TaskConfig
from batchscale.policy.load import load_policy
from batchscale.rollout import build_engine
from batchscale.rollout.base import SamplingParams
from batchscale.systems.profile_generation import build_workload
from batchscale.tasks import build_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--levels", default="1,16,64,128,256")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--waves", type=int, default=2, help="responses per level = waves * concurrency ...")
    parser.add_argument("--min-responses", type=int, default=32, help="... but at least this many")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task_cfg = TaskConfig()
    task = build_task(task_cfg)
    policy = load_policy(ModelConfig(name=args.model, dtype=args.dtype), task_cfg, log=lambda m: None)
    params = SamplingParams(1.0, 1.0, args.max_new_tokens)
    print(f"model {args.model} ({args.dtype}), {args.threads} thread(s), G={args.samples_per_prompt}, "
          f"max_new_tokens {args.max_new_tokens}, temperature 1, top_p 1, median of {args.repeats} alternating repeats")
    print(f"{'concurrency':>11} {'responses':>9} {'engine tok/s':>12} {'hf tok/s':>9} {'engine/hf':>9} "
          f"{'active engine':>13} {'active hf':>9}")
    for level in (int(x) for x in args.levels.split(",")):
        prompts = build_workload(task, max(args.waves * level, args.min_responses), args.samples_per_prompt, 0)
        engines = {name: build_engine(name, policy, max_concurrency=level) for name in ("engine", "hf")}
        times = {name: [] for name in engines}
        last = {}
        for engine in engines.values():
            engine.generate(prompts[:level], params)  # warm-up
        for _ in range(args.repeats):
            for name, engine in engines.items():
                torch.manual_seed(0)
                start = time.perf_counter()
                last[name] = engine.generate(prompts, params)
                times[name].append(time.perf_counter() - start)
        rate = {name: last[name].tokens_generated / statistics.median(times[name]) for name in engines}
        print(f"{level:>11} {len(prompts):>9} {rate['engine']:12.1f} {rate['hf']:9.1f} "
              f"{rate['engine'] / rate['hf']:8.2f}x {last['engine'].stats['active_mean']:13.1f} "
              f"{last['hf'].stats['active_mean']:9.1f}")


if __name__ == "__main__":
    main()
