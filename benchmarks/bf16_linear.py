"""The engine's decode kernels vs torch's float32 and bf16 matmuls, streaming SmolLM2-135M's decode matrices.

One "step" multiplies M rows of activations by every matrix a SmolLM2-135M decode step reads: per layer the fused
q/k/v (960 x 576), o (576 x 576), fused gate/up (3072 x 576) and down (576 x 1536), 30 layers, then the tied
49152 x 576 head: 135M weights, 270 MB in bf16, 540 MB in float32, far more than the last-level cache, so every step
reads them from memory as a decode step does. Reports ms per step (best of --repeats) for
- kernel: rollout/native.py's AVX2 kernel over bf16 weights (what the engine uses up to SMALL_BATCH_ROWS),
- float32: F.linear over float32 copies (the engine's path above it),
- bf16: F.linear with bf16 activations and weights (what torch does with a bf16 model on this CPU),
- native: the AVX512-BF16 kernel with bf16 activations (what the engine uses up to NATIVE_SMALL_BATCH_ROWS on a CPU
  with avx512_bf16; nan where this CPU lacks it),
- packed: F.linear's bf16 oneDNN kernel over matrices reordered once (weights.onednn_linear: the engine's bf16 path
  above NATIVE_SMALL_BATCH_ROWS and in prefill; nan where torch cannot pack),
- f32 kernel: the float32 kernel over float32 weights (a float32 model's steps up to F32_SMALL_BATCH_ROWS; its
  16-lane build where the CPU has the avx512_bf16 path, else AVX2).
The row count where float32 overtakes the AVX2 kernel sets weights.SMALL_BATCH_ROWS (on CPUs without native bf16);
where torch's bf16 overtakes the native kernel, weights.NATIVE_SMALL_BATCH_ROWS; where float32 overtakes the f32
kernel, weights.F32_SMALL_BATCH_ROWS. GB/s: weight bytes read per s (bf16 for the kernels, float32 for f32 kernel).

    .venv/bin/python benchmarks/bf16_linear.py --rows 1,4,8,16,32,64 --threads 1
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from batchscale.rollout.native import bf16_linear, bf16_linear_kernel, bf16_linear_native, f32_linear
from batchscale.rollout.weights import onednn_linear, onednn_pack, onednn_packing_available

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)] * 30 + [(49152, 576)]


def best_ms(step, repeats: int) -> float:
    """The fastest of `repeats` calls of `step()` after one warm-up call, in ms (also used by sampling.py)."""
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def stream_ms(fn, weights, inputs, repeats: int) -> float:
    """best_ms of one decode step's products: fn(x, W) for every matrix W, x the activations of W's width."""
    def step():
        for w in weights:
            fn(inputs[w.shape[1]], w)  # each output dropped at once, as a decode step drops it

    return best_ms(step, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,4,8,16,32,64")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    bf16 = [torch.randn(shape, generator=gen).to(torch.bfloat16) for shape in SHAPES]
    fp32 = [w.float() for w in bf16]
    print(f"{sum(w.numel() for w in bf16) / 1e6:.0f}M weights per step, {args.threads} thread(s), "
          f"best of {args.repeats}; ms per step")
    native = bf16_linear_kernel("avx512_bf16") is not None
    packed = [onednn_pack(w) for w in bf16] if onednn_packing_available() else None
    f32_path = "avx512_bf16" if native else "avx2"
    print(f"{'rows':>5} {'kernel':>8} {'float32':>8} {'bf16':>8} {'native':>8} {'packed':>8} {'f32 kernel':>10} "
          f"{'kernel GB/s':>11} {'native GB/s':>11} {'f32 GB/s':>9}")
    nan = float("nan")
    for rows in (int(r) for r in args.rows.split(",")):
        inputs = {k: torch.randn(rows, k, generator=gen) for k in (576, 1536)}
        kernel = stream_ms(lambda x, w: bf16_linear(x, w), bf16, inputs, args.repeats)
        dense = stream_ms(F.linear, fp32, inputs, args.repeats)
        f32 = stream_ms(lambda x, w: f32_linear(x, w, None, f32_path), fp32, inputs, args.repeats)
        half_inputs = {k: x.bfloat16() for k, x in inputs.items()}
        half = stream_ms(F.linear, bf16, half_inputs, args.repeats) if rows <= 16 or native else nan
        fast = stream_ms(bf16_linear_native, bf16, half_inputs, args.repeats) if native else nan
        reordered = stream_ms(onednn_linear, packed, half_inputs, args.repeats) if packed else nan
        gbps = lambda ms, size=2: sum(w.numel() * size for w in bf16) / ms / 1e6  # noqa: E731
        print(f"{rows:>5} {kernel:8.1f} {dense:8.1f} {half:8.1f} {fast:8.1f} {reordered:8.1f} {f32:10.1f} "
              f"{gbps(kernel):11.1f} {gbps(fast):11.1f} {gbps(f32, 4):9.1f}")

if __name__ == "__main__":
    main()
