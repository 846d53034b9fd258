"""What a checkpoint costs (issue 26): seconds to write one (capture + safetensors + fsync + rename), to read it back
(checks + restore into a fresh training state), and bytes on disk, plus the final `policy/` save, per model.

Each model's training state is built for a small GRPO config and one step is trained first, so the optimizer's
moments exist (a checkpoint before the first update holds none). Median of --repeats writes; the run directory lies
on the file system of --dir (default: a temporary directory).

    .venv/bin/python benchmarks/checkpoint_cost.py --model tiny --model smollm2-135m --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from batchscale.config import load_config
from batchscale.cpu import kernel_flags
from batchscale.rundir.checkpoint import read_checkpoint, write_checkpoint
from batchscale.train.checkpointing import LoopState, capture, restore
from batchscale.train.loop import run_step, save_policy
from batchscale.train.rollout_source import open_rollout_source
from batchscale.train.state import build_training_state

SMOLLM2 = ["model.chat_template=true", "task.digits=1", "task.reward='last_integer_match'",
           "task.template='What is {a} {op} {b}? Reply with the number only.'"]


def measure(model: str, repeats: int, root: Path) -> dict:
    extra = SMOLLM2 if model == "smollm2-135m" else []
    cfg = load_config(None, [f"model.name='{model}'", "batch.prompts_per_step=2", "batch.samples_per_prompt=2",
                             "batch.micro_batch_size=4", "sampling.max_new_tokens=8", "run.budget_samples=8",
                             "task.eval_size=4", "run.device='cpu'", *extra])
    state = build_training_state(cfg, log=lambda line: None)
    with open_rollout_source(state) as source:
        run_step(1, state, source)
    loop = LoopState(step=1, samples=4, next_eval=8)
    run_dir = root / model
    writes, paths = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        json_state, write_files = capture(state, loop)
        paths.append(write_checkpoint(run_dir, i + 1, 4, 0, json_state, write_files, keep=repeats))
        writes.append(time.perf_counter() - t0)
    size = sum(p.stat().st_size for p in paths[-1].iterdir())
    t0 = time.perf_counter()
    restore(state, read_checkpoint(paths[-1]), [])
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    policy = save_policy(state, run_dir)
    policy_s = time.perf_counter() - t0
    policy_bytes = sum(p.stat().st_size for p in policy.iterdir())
    state.task.close()
    return {"model": model, "params_m": state.policy.num_params / 1e6, "write_s": statistics.median(writes),
            "writes_s": writes, "read_s": read_s, "bytes": size, "policy_s": policy_s, "policy_bytes": policy_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="tiny, smollm2-135m or a local HF directory (repeatable)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="where the checkpoints are written (default: a temporary dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = [measure(model, args.repeats, Path(tmp)) for model in args.model or ["tiny"]]
    print(f"kernel flags: {' '.join(kernel_flags())}")
    print("| model | params | checkpoint | write (median) | read + restore | policy/ | policy save |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['params_m']:.1f}M | {r['bytes'] / 1e6:.1f} MB | {r['write_s']:.3f} s | "
              f"{r['read_s']:.3f} s | {r['policy_bytes'] / 1e6:.1f} MB | {r['policy_s']:.3f} s |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
