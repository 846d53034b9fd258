"""Samples/s of synchronous against asynchronous streaming rollouts (issue 17), measured side by side in one run.

Each mode trains the same GRPO configuration for --budget samples, alternating modes over --repeats so load from
other processes hits all alike. Throughput is steady-state: samples between the first and the last step record over
the wall time between them (the generator's start-up and the first step's wait are left out; evals run only at the
start and the end). Also reported per mode: median `time/step`, `time/wait_for_samples`, `time/generate` (async: the
generator's decoding seconds per step), `time/train`, `time/generator_idle`, staleness and partial
fraction, and the final eval accuracy (one seed: a sanity check, not rN).

    .venv/bin/python benchmarks/async_rollouts.py --model tiny --prompts 16 --budget 2048 --repeats 2
    .venv/bin/python benchmarks/async_rollouts.py --model smollm2-135m --prompts 4 --samples-per-prompt 4 \
        --micro-batch 8 --budget 64 --max-new-tokens 32 --eval-size 4 --set model.chat_template=true \
        --set task.digits=1 "--set=task.template='What is {a} {op} {b}? Reply with the number only.'" \
        --set task.reward=last_integer_match
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from batchscale.config import load_config
from batchscale.train.loop import train

MODES = {
    "sync": ["rollout.mode='sync'", "run.threads={threads}"],
    "async-k1": ["rollout.mode='async'", "rollout.max_staleness=1", "rollout.generation_batch={gen}",
                 "run.threads={trainer_threads}", "rollout.generator_threads={generator_threads}"],
    "async-k2": ["rollout.mode='async'", "rollout.max_staleness=2", "rollout.generation_batch={gen}",
                 "run.threads={trainer_threads}", "rollout.generator_threads={generator_threads}"],
}


def measure(model: str, mode: str, args, out: Path) -> dict:
    fill = {"threads": args.threads, "trainer_threads": args.trainer_threads, "generator_threads": args.generator_threads,
            "gen": 2 * args.prompts * args.samples_per_prompt}
    overrides = [f"model.name='{model}'", f"batch.prompts_per_step={args.prompts}",
                 f"batch.samples_per_prompt={args.samples_per_prompt}", f"batch.micro_batch_size={args.micro_batch}",
                 f"run.budget_samples={args.budget}", f"run.eval_every_samples={args.budget}",
                 f"sampling.max_new_tokens={args.max_new_tokens}", "optim.lr=1e-5", "optim.compute_dtype='float32'",
                 f"task.eval_size={args.eval_size}", *args.set, *[o.format(**fill) for o in MODES[mode]]]
    records = []
    train(load_config(None, overrides), out, on_record=records.append, log=lambda line: None)
    steps = [r for r in records if r["kind"] == "step"]
    first, last = steps[0], steps[-1]
    median = lambda key: statistics.median(r.get(key, 0.0) for r in steps[1:])
    return {
        "mode": mode,
        "samples_per_s": (last["samples"] - first["samples"]) / (last["wall_s"] - first["wall_s"]),
        "time_step_s": median("time/step"),
        "wait_for_samples_s": median("time/wait_for_samples"),
        "generate_s": median("time/generate"),
        "train_s": median("time/train"),
        "generator_idle_s": median("time/generator_idle"),
        "staleness_mean": statistics.mean(r.get("async/staleness_mean", 0.0) for r in steps),
        "partial_frac": statistics.mean(r.get("async/partial_frac", 0.0) for r in steps),
        "eval_accuracy": [r["eval/accuracy"] for r in records if r["kind"] == "eval"][-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--max-new-tokens", type=int, default=6)
    parser.add_argument("--eval-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="sync: torch threads for generate and train")
    parser.add_argument("--trainer-threads", type=int, default=1)
    parser.add_argument("--generator-threads", type=int, default=1)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], help="a config override for every mode (repeatable)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for mode in args.modes.split(","):
                t0 = time.perf_counter()
                row = measure(args.model, mode, args, Path(tmp) / f"{mode}-{repeat}")
                row.update(repeat=repeat, run_s=time.perf_counter() - t0)
                rows.append(row)
                print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    for mode in args.modes.split(","):
        mine = [r["samples_per_s"] for r in rows if r["mode"] == mode]
        print(f"{mode}: median {statistics.median(mine):.1f} samples/s over {len(mine)} run(s)")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
