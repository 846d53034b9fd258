"""The engine against itself with one execution choice changed: tokens/s per variant, alternated in one process.

Each variant is the same engine over the same policy and prompts with one of its decode choices set by hand before
the first call (weights.PackedWeights reads them when it packs):
- default: as `build_engine` resolves it on this CPU (the decode plan cached or timed by rollout/tuning.py);
- untuned: the plan without timing (BATCHSCALE_DECODE_TUNING=off: weights.DEFAULT_WALKS and the row counts of
  weights.py), its matrices in huge pages as the default's;
- 4k-pages: the kernel's matrices in ordinary pages (with untuned: the engine before issue 47);
- no-onednn: bf16 steps above the kernel's rows multiply with plain F.linear (oneDNN reorders each weight per call);
- no-kernel: no native small-batch kernel (torch for every step size);
- rows=N, order=tiles|rows, prefetch=BYTES, threads=N: the untuned plan with that one field changed; rows=N: the
  small-batch kernel (for bf16 on a CPU with native bf16: the one-call layer) up to N sequences.
Variants join with "+" (`order=rows+prefetch=1024`). Per level every variant is warmed up once, then timed in turn
--repeats times; medians are printed. This is how NATIVE_SMALL_BATCH_ROWS, the value of the packed GEMM (BENCHMARKS.md)
and the parts of issue 47's decode plan (docs/LOG.md) were measured.

    .venv/bin/python benchmarks/engine_variants.py --model smollm2-135m --dtype bfloat16 --levels 2,4,16 \\
        --variants rows=1,rows=2,rows=4 --threads 1
    .venv/bin/python benchmarks/engine_variants.py --model smollm2-135m --dtype bfloat16 --levels 1 \\
        --variants untuned+4k-pages,untuned,order=rows,default --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch

from batchscale.config import ModelConfig, TaskConfig
from batchscale.policy.load import load_policy
from batchscale.rollout import build_engine
from batchscale.rollout.base import SamplingParams
from batchscale.rollout.tuning import default_plan
from batchscale.tasks import build_task

PLAN_FIELDS = {"rows": "small_batch_rows", "order": "order", "prefetch": "prefetch_bytes", "threads": "threads"}


def build_variant(policy, level: int, variant: str):
    engine = build_engine("engine", policy, max_concurrency=level)
    decoder = engine.decoder
    packed = decoder.packed
    plan = default_plan(decoder.kernels) if decoder.kernels else None
    for part in variant.split("+"):
        name, _, value = part.partition("=")
        if part == "no-onednn":
            packed.onednn = False
        elif part == "no-kernel":
            packed.kernel, packed.small_batch_rows, plan = None, 0, None
        elif part == "4k-pages":
            packed.huge_pages = False
        elif name in PLAN_FIELDS and value and plan is not None:
            value = value if name == "order" else int(value)
            plan = (replace(plan, small_batch_rows=value) if name == "rows"
                    else replace(plan, walk=replace(plan.walk, **{PLAN_FIELDS[name]: value})))
        elif part not in ("default", "untuned"):
            raise SystemExit(f"--variants: unknown variant {part!r} (default, untuned, 4k-pages, no-onednn, no-kernel, "
                             "rows=N, order=tiles|rows, prefetch=BYTES, threads=N; joined with +)")
    if variant != "default" and plan is not None:
        decoder.use_plan(plan)  # no timing: the first sync finds a plan
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--levels", default="1,4,16")
    parser.add_argument("--variants", default="default,no-kernel")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--samples-per-prompt", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = args.variants.split(",")
    policy = load_policy(ModelConfig(name=args.model, dtype=args.dtype), TaskConfig(), log=lambda m: None)
    prompts = [e.prompt for e in build_task(TaskConfig()).eval_examples()]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens)
    print(f"model {args.model} ({args.dtype}), {args.threads} thread(s), {args.max_new_tokens} new tokens, "
          f"median tok/s of {args.repeats} alternated calls")
    print(f"{'level':>5} " + " ".join(f"{v:>12}" for v in variants))
    for level in (int(x) for x in args.levels.split(",")):
        count = max(level, 8)
        batch = [p for p in prompts[: -(-count // args.samples_per_prompt)] for _ in range(args.samples_per_prompt)]
        engines = {v: build_variant(policy, level, v) for v in variants}
        for engine in engines.values():
            engine.generate(batch[:count], params)  # warm-up (and the pack)
        rates = {v: [] for v in variants}
        for _ in range(args.repeats):
            for variant, engine in engines.items():
                torch.manual_seed(0)
                start = time.perf_counter()
                rollouts = engine.generate(batch[:count], params)
                rates[variant].append(rollouts.tokens_generated / (time.perf_counter() - start))
        print(f"{level:>5} " + " ".join(f"{statistics.median(rates[v]):12.1f}" for v in variants), flush=True)


if __name__ == "__main__":
    main()
