"""Thread defaults under load (issue 45): the README's tiny-model commands with one core kept busy, old vs new.

Two measurements, each with the 1-minute load average (`os.getloadavg`) read before and after every timing:

- `--mode step`: the median GRPO step time (`time/step` of metrics.jsonl, warm-up step dropped) of
  `train examples/grpo-tiny.toml` cut to a few steps, at 1 and 2 torch threads (OpenMP waiting passively), and with
  `--old-src` at 2 threads under OpenMP's own wait policy, with the machine as it is and with one core kept busy by a
  `yes > /dev/null` loop (bounded by `timeout`, ended by its pid), alternated so that other load hits every variant
  alike;
- `--mode commands`: the wall time of each README command (`train examples/{grpo,ppo,remax}-tiny.toml`,
  `profile generation --model tiny`) with one core busy, under the old default (torch's threads, one per core;
  OpenMP's own wait policy: `--old-src`, a tree of the code before the change) and the new (batchscale's choice).

    .venv/bin/python benchmarks/threads_under_load.py --mode step --json /tmp/step.json
    .venv/bin/python benchmarks/threads_under_load.py --mode commands --old-src /tmp/old/src --json /tmp/cmd.json

Prints one row per timing; writes them all as JSON with --json. Run on a machine nobody else uses to measure the
thread choice itself; on a shared one the loads say how much else was running.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "grpo-tiny": ["train", "examples/grpo-tiny.toml"],
    "ppo-tiny": ["train", "examples/ppo-tiny.toml"],
    "remax-tiny": ["train", "examples/remax-tiny.toml"],
    "profile-generation-tiny": ["profile", "generation", "--model", "tiny"],
}
OPENMP_VARIABLES = ("OMP_WAIT_POLICY", "KMP_BLOCKTIME", "OMP_NUM_THREADS")


@contextmanager
def busy_core(seconds: float, on: bool = True):
    """One core kept busy by `yes > /dev/null` for at most `seconds` (timeout ends it even if this process dies)."""
    if not on:
        yield
        return
    loop = subprocess.Popen(["timeout", str(int(seconds)), "yes"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        yield
    finally:
        loop.terminate()
        loop.wait()


def environment(src: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_VARIABLES}
    env["PYTHONPATH"] = str(src)
    return env


def batchscale(args: list[str], src: Path, out: Path | None, timeout_s: float) -> float:
    """Seconds of one `python -m batchscale ARGS` (its output in a temporary directory)."""
    extra = ["--out", str(out), "--overwrite"] if out is not None else []
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "batchscale", *args, *extra], cwd=ROOT, env=environment(src), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s)
    return time.perf_counter() - began


def load() -> float:
    return round(os.getloadavg()[0], 2)


def step_mode(args) -> list[dict]:
    rows = []
    steps = args.steps
    variants = [("new", args.src, 1), ("new", args.src, 2)] + ([("old", args.old_src, 2)] if args.old_src else [])
    with tempfile.TemporaryDirectory(prefix="bs-threads-") as tmp:
        for repeat in range(args.repeats):
            for busy in (False, True):
                for variant, src, threads in variants:
                    out = Path(tmp) / f"{variant}-t{threads}-b{int(busy)}"
                    before = load()
                    with busy_core(args.timeout_s, busy):
                        batchscale(["train", "examples/grpo-tiny.toml", f"run.threads={threads}",
                                    f"run.budget_samples={128 * steps}", "run.eval_every_samples=100000",
                                    "run.save_policy=false"], src, out, args.timeout_s)
                    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
                    times = [r["time/step"] for r in lines if r["kind"] == "step"][1:]
                    row = {"repeat": repeat, "variant": variant, "threads": threads, "busy_core": busy,
                           "step_s_median": statistics.median(times), "steps": len(times),
                           "load_before": before, "load_after": load()}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    return rows


def commands_mode(args) -> list[dict]:
    rows = []
    variants = [(f"new-{t}", args.src, t) for t in args.threads.split(",")]
    variants += [("old", args.old_src, "auto")] if args.old_src else []
    with tempfile.TemporaryDirectory(prefix="bs-threads-") as tmp:
        for name, command in ((n, COMMANDS[n]) for n in args.commands.split(",")):
            for variant, src, threads in variants:
                out = Path(tmp) / f"{name}-{variant}" if command[0] == "train" else None
                forced = [] if threads == "auto" else (
                    [f"run.threads={threads}"] if command[0] == "train" else ["--threads", threads])
                before = load()
                with busy_core(args.timeout_s, args.busy):
                    try:
                        seconds = round(batchscale(command + forced, src, out, args.timeout_s), 1)
                    except subprocess.TimeoutExpired:
                        seconds = None
                row = {"command": " ".join(command + forced), "variant": variant, "busy_core": args.busy,
                       "wall_s": seconds,
                       "timeout_s": args.timeout_s, "load_before": before, "load_after": load()}
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["step", "commands"], required=True)
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the tree measured as 'new'")
    parser.add_argument("--old-src", type=Path, help="the tree measured as 'old' (without it: the new tree alone)")
    parser.add_argument("--busy", action=argparse.BooleanOptionalAction, default=True,
                        help="--mode commands: keep one core busy")
    parser.add_argument("--steps", type=int, default=12, help="--mode step: GRPO steps per timing")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="--mode commands: which, comma-separated")
    parser.add_argument("--threads", default="auto", help="--mode commands: the new tree at these thread counts "
                                                          "(auto: batchscale's choice), comma-separated")
    parser.add_argument("--repeats", type=int, default=2, help="--mode step: rounds of the four variants")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="most seconds one command may take")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows = step_mode(args) if args.mode == "step" else commands_mode(args)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
