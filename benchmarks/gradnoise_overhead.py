"""What the online gradient noise scale costs in the actor update (issue 16: at most 5% of `time/train`).

Variants of one GRPO update (`train.actor.Actor.update`, the trainer's), alternated in one run so load from other
processes hits all alike; medians of --repeats:
- `no estimate`: the micro-batches in chunks of whole prompt groups, no chunk norms taken (`ChunkNorms.chunk` and
  `noise_terms` patched out);
- `estimate`: the same chunks with `train.chunk_norms.ChunkNorms` (set aside .grad, one squared norm and one add
  per chunk, the estimators after the step): what the trainer runs;
- `one pass`: (only when micro-batch = the whole update) the update as one micro-batch, as before issue 16, which the
  estimate splits into two half-batches.
The batch is a real rollout of the policy (benchmarks/training_step.py's `rollout_batch`). On a loaded machine the A/B
difference is within the noise, so the script also times the bookkeeping alone (one squared norm and one in-place
add over every parameter-sized gradient, per chunk), which bounds what the estimate adds to an update.

    .venv/bin/python benchmarks/gradnoise_overhead.py --model tiny --micro-batch-sizes 8,64 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import ExitStack, nullcontext
from pathlib import Path
from unittest import mock

import torch

from training_step import TASK, rollout_batch

from batchscale.config import ModelConfig
from batchscale.policy.load import load_policy
from batchscale.profile.training import profiled_actor
from batchscale.tasks import build_task
from batchscale.train import update as update_module
from batchscale.train.chunk_norms import ChunkNorms
from batchscale.train.micro_batches import iter_gradient_chunks


def timed_update(learner, batch, advantages, variant) -> float:
    one_chunk = lambda batch, micro, group, sort: iter([[torch.arange(len(batch))]])  # noqa: E731
    patches = {"no estimate": [mock.patch.object(ChunkNorms, "chunk", lambda self, samples, scale: nullcontext()),
                               mock.patch.object(ChunkNorms, "noise_terms", lambda self, *args, **kwargs: {})],
               "one pass": [mock.patch.object(update_module, "iter_gradient_chunks", one_chunk)]}.get(variant, [])
    with ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        start = time.perf_counter()
        learner.update(batch, advantages)
        return time.perf_counter() - start


def time_bookkeeping(model, chunks: int, repeats: int) -> float:
    """Median seconds of `chunks` x (squared norm of a gradient-sized set of tensors + in-place add into another)."""
    increments = [torch.randn_like(p) for p in model.parameters()]
    totals = [torch.randn_like(p) for p in model.parameters()]
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        for _ in range(chunks):
            float(torch.nn.utils.get_total_norm(increments).square())
            torch._foreach_add_(totals, increments)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--micro-batch-sizes", default="8,64")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy(ModelConfig(name=args.model), TASK, log=lambda s: None)
    batch, advantages, _ = rollout_batch(policy, build_task(TASK), args.prompts, args.samples_per_prompt,
                                         args.max_new_tokens, seed=0)
    rows = []
    for micro in (int(m) for m in args.micro_batch_sizes.split(",")):
        learner = profiled_actor(policy, len(batch), micro, torch.float32, args.samples_per_prompt)
        learner.optimizer.param_groups[0]["lr"] = 1e-7  # the weights, so the work, stay the same from repeat to repeat
        variants = ["no estimate", "estimate"] + (["one pass"] if micro >= len(batch) else [])
        times = {v: [] for v in variants}
        for v in variants:  # warm-up
            timed_update(learner, batch, advantages, v)
        for _ in range(args.repeats):
            for v in variants:
                times[v].append(timed_update(learner, batch, advantages, v))
        medians = {v: statistics.median(t) for v, t in times.items()}
        chunks = len(list(iter_gradient_chunks(batch, micro, args.samples_per_prompt)))
        bookkeeping_s = time_bookkeeping(policy.model, chunks, args.repeats)
        row = {"micro_batch_size": micro, "chunks": chunks, "median_s": medians,
               "overhead_vs_no_estimate": medians["estimate"] / medians["no estimate"] - 1,
               "bookkeeping_s": bookkeeping_s, "bookkeeping_fraction": bookkeeping_s / medians["no estimate"]}
        if "one pass" in medians:
            row["overhead_vs_one_pass"] = medians["estimate"] / medians["one pass"] - 1
        rows.append(row)
        print(f"micro {micro}: " + ", ".join(f"{v} {s * 1e3:.1f} ms" for v, s in medians.items())
              + f"; estimate overhead {row['overhead_vs_no_estimate']:+.1%}; bookkeeping of {chunks} chunks "
              f"{bookkeeping_s * 1e3:.1f} ms = {row['bookkeeping_fraction']:.1%}"
              + (f", vs one pass {row['overhead_vs_one_pass']:+.1%}" if "one pass" in medians else ""))
    result = {"model": args.model, "params": sum(p.numel() for p in policy.model.parameters()),
              "samples_per_update": len(batch), "samples_per_prompt": args.samples_per_prompt,
              "threads": args.threads, "repeats": args.repeats, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
