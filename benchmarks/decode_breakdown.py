"""Where one decode step of the engine goes on this machine: per phase, at each concurrency, against the memory roofline.

Two views of the same engine (`build_engine`, its decode plan as rollout/tuning.py chose it here):
- in a generate call (the built-in arithmetic task, G = 8 responses per prompt, --max-new-tokens, temperature 1, as
  benchmarks/generation.py draws them), timers around the decoder's `decode` and `prefill` and the sampler split the
  call's wall-clock time into decode, sampling, prefill and the rest: the scheduler's Python (admission, bookkeeping,
  building each step's index tensors) and the calls between phases. Prefill is per call (one forward per distinct
  prompt no cache row holds), given per decode step too, amortized.
- inside a decode step, at --context positions, each phase alone on fixed inputs, median of --repeats after a
  warm-up: the token embedding, the layers (the kernel's one-call layers up to the plan's row count, else the fused
  small ops around the GEMM), the final norm and LM head, and sampling; and, for scale, the layers' and the head's
  matrices streamed through the same linear with nothing else (the kernel alone).
Each phase's GB/s is the bytes of its weights over its time; the roofline row is what the whole step's weights and KV
cache would take at this machine's copy bandwidth (systems.hardware.measure_cpu, as generation.py's roofline). The
machine's load average is printed before and after: on shared cores every figure moves with it.

    .venv/bin/python benchmarks/decode_breakdown.py --model smollm2-135m --dtype bfloat16 --levels 1,16 --threads 1
    .venv/bin/python benchmarks/decode_breakdown.py --model smollm2-135m --dtype float32 --levels 1,16 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from batchscale.config import ModelConfig, TaskConfig
from batchscale.cpu import cpu_model, kernel_flags
from batchscale.policy.load import load_policy
from batchscale.rollout import build_engine, native
from batchscale.rollout import engine as engine_module
from batchscale.rollout.base import SamplingParams
from batchscale.rollout.sampling import sample_tokens
from batchscale.systems.hardware import measure_cpu
from batchscale.profile.generation import build_workload
from batchscale.tasks import build_task


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


class Timed:
    """Wraps `owner.name` so that every call adds its seconds to `self.seconds` (and counts itself)."""

    def __init__(self, owner, name: str):
        self.owner, self.name, self.inner = owner, name, getattr(owner, name)
        self.own = name in vars(owner)  # else a method of its class: restore() removes the wrapper
        self.seconds, self.calls = 0.0, 0
        setattr(owner, name, self)

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1

    def restore(self) -> None:
        if self.own:
            setattr(self.owner, self.name, self.inner)
        else:
            delattr(self.owner, self.name)


def in_generate(engine, prompts: list[str], params: SamplingParams) -> dict:
    """The phases of one generate call (after a warm-up call), in ms per decode step, prefill also per call."""
    engine.generate(prompts, params)  # warm-up: the pack, the plan, the cache
    timers = [Timed(engine.decoder, "decode"), Timed(engine.decoder, "prefill"), Timed(engine_module, "sample_tokens")]
    torch.manual_seed(0)
    start = time.perf_counter()
    rollouts = engine.generate(prompts, params)
    total = time.perf_counter() - start
    for timer in timers:
        timer.restore()
    decode, prefill, sampling = timers
    steps = rollouts.stats["decode_steps"]
    rest = total - decode.seconds - prefill.seconds - sampling.seconds
    per_step = lambda seconds: seconds / max(steps, 1) * 1e3  # noqa: E731
    return {"tokens_per_s": rollouts.tokens_generated / total, "decode_steps": steps,
            "active_mean": rollouts.stats["active_mean"], "prefill_calls": prefill.calls,
            "prefill_ms_per_call": prefill.seconds / max(prefill.calls, 1) * 1e3,
            "ms_per_step": {"decode": per_step(decode.seconds), "sampling": per_step(sampling.seconds),
                            "prefill (amortized)": per_step(prefill.seconds),
                            "python and scheduling": per_step(rest), "total": per_step(total)}}


def matrix_bytes(layers, head) -> tuple[int, int]:
    layer_bytes = sum(getattr(w, n).numel() * getattr(w, n).element_size() for w in layers
                      for n in ("qkv", "o", "gate_up", "down"))
    return layer_bytes, head.numel() * head.element_size()


def in_step(decoder, batch: int, context: int, repeats: int) -> dict:
    """Each phase of one decode step of `batch` sequences at position `context`, alone, in ms."""
    decoder.reserve(batch, context + 1)
    tokens, positions = torch.zeros(batch, dtype=torch.long), torch.full((batch,), context)
    weights = decoder.weights
    matrices = weights.for_batch(batch)
    layer_bytes, head_bytes = matrix_bytes(matrices.layers, matrices.lm_head)
    x0 = F.embedding(tokens, weights.embed)
    phases = {"embedding": (median_ms(lambda: F.embedding(tokens, weights.embed), repeats), 0)}
    if decoder.fused:
        delta = decoder._fused_layers(x0.clone(), matrices, positions)
        phases["layers"] = (median_ms(lambda: decoder._fused_layers(x0.clone(), matrices, positions), repeats),
                            layer_bytes)
        head = lambda: matrices.linear(native.add_rms_norm(x0.clone(), delta, weights.final_norm, decoder.eps),  # noqa
                                       matrices.lm_head, None)
        phases["final norm + LM head"] = (median_ms(head, repeats), head_bytes)
    logits = decoder.decode(tokens, positions)
    uniforms = torch.rand(batch)
    phases["sampling"] = (median_ms(lambda: sample_tokens(logits, uniforms, 1.0, 1.0), repeats), 0)
    step = median_ms(lambda: sample_tokens(decoder.decode(tokens, positions), uniforms, 1.0, 1.0), repeats)
    phases["whole step (decode + sampling)"] = (step, layer_bytes + head_bytes)
    inputs = {k: torch.randn(batch, k).to(decoder.dtype) for k in {w.shape[1] for l in matrices.layers
                                                                   for w in (l.qkv, l.down)}}
    all_matrices = [w for l in matrices.layers for w in (l.qkv, l.o, l.gate_up, l.down)]
    stream = lambda ws: [matrices.linear(inputs[w.shape[1]], w) for w in ws]  # noqa: E731
    phases["(layer matrices alone)"] = (median_ms(lambda: stream(all_matrices), repeats), layer_bytes)
    phases["(LM head matrix alone)"] = (median_ms(lambda: stream([matrices.lm_head]), repeats), head_bytes)
    small = matrices is weights.small_batch
    return {"path": "kernel one-call layers" if small else "fused ops around the GEMM",
            "phases": {name: {"ms": ms, "gb_per_s": nbytes / ms / 1e6 if nbytes else None}
                       for name, (ms, nbytes) in phases.items()}, "weight_bytes": layer_bytes + head_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--levels", default="1,16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    parser.add_argument("--min-responses", type=int, default=16)
    parser.add_argument("--context", type=int, default=48, help="the position of the timed step (in_step)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    task_cfg = TaskConfig()
    policy = load_policy(ModelConfig(name=args.model, dtype=args.dtype), task_cfg, log=lambda m: None)
    task = build_task(task_cfg)
    bandwidth = measure_cpu().bandwidth_bytes_per_s
    params = SamplingParams(1.0, 1.0, args.max_new_tokens)
    print(f"{args.model} ({args.dtype}), {args.threads} thread(s), {cpu_model()}, flags {' '.join(kernel_flags())}; "
          f"copy bandwidth {bandwidth / 1e9:.1f} GB/s; load average {load_before[0]:.1f} before")
    out = {"args": vars(args) | {"json": str(args.json)}, "cpu_model": cpu_model(), "cpu_flags": kernel_flags(),
           "bandwidth_bytes_per_s": bandwidth, "load_before": load_before, "levels": {}}
    for level in (int(x) for x in args.levels.split(",")):
        engine = build_engine("engine", policy, max_concurrency=level)
        prompts = policy.format_prompts(build_workload(task, max(level, args.min_responses),
                                                       args.samples_per_prompt, 0))
        generate = in_generate(engine, prompts, params)
        decoder = engine.decoder
        step = in_step(decoder, level, args.context, args.repeats)
        kv_bytes = 2 * len(decoder.keys) * level * decoder.num_kv_heads * (args.context + 1) * decoder.head_dim * \
            decoder.keys[0].element_size() if decoder.keys else 0
        roofline_ms = (step["weight_bytes"] + kv_bytes) / bandwidth * 1e3
        plan = decoder.plan.to_json() if decoder.plan else None
        print(f"\nconcurrency {level}: {generate['tokens_per_s']:.1f} tok/s in generate ({generate['decode_steps']} "
              f"decode steps, {generate['active_mean']:.1f} active); plan {plan}; "
              f"{decoder.packed.huge_page_bytes >> 20} MiB of the kernel's matrices in huge pages; {step['path']}")
        print(f"  {'in a generate call':<34} {'ms/step':>8} {'share':>6}")
        total = generate["ms_per_step"]["total"]
        for name, ms in generate["ms_per_step"].items():
            print(f"  {name:<34} {ms:8.2f} {ms / total:6.0%}")
        print(f"  prefill: {generate['prefill_calls']} calls, {generate['prefill_ms_per_call']:.1f} ms each")
        print(f"  {'one step at position ' + str(args.context):<34} {'ms':>8} {'GB/s':>6}")
        for name, phase in step["phases"].items():
            rate = f"{phase['gb_per_s']:6.1f}" if phase["gb_per_s"] else " " * 6
            print(f"  {name:<34} {phase['ms']:8.2f} {rate}")
        whole = step["phases"]["whole step (decode + sampling)"]["ms"]
        print(f"  {'memory roofline (weights + KV)':<34} {roofline_ms:8.2f}   -> the step is at "
              f"{roofline_ms / whole:.0%} of it")
        out["levels"][level] = {"generate": generate, "step": step, "plan": plan, "roofline_ms": roofline_ms,
                                "huge_page_bytes": decoder.packed.huge_page_bytes}
    out["load_after"] = os.getloadavg()
    print(f"\nload average {out['load_after'][0]:.1f} after")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
