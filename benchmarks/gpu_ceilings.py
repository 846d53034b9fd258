"""The two ceilings of this run, measured on its own device: copy bandwidth and the bf16 matrix-product rate.

The GPU check compares decode and training with these rather than only with the datasheet (4.8 TB/s and ~989 TFLOP/s
dense bf16 for an H200; the device documentation measured ~4.3 TB/s and 769-798 TFLOP/s on such machines here):
- copy: `dst.copy_(src)` of a float32 buffer far larger than the cache (full: 1 GiB; the H200's L2 is 60 MB), counting
  bytes read plus bytes written (2 x the buffer), as the documentation's measurement and batchscale's `cpu` preset do;
- matmul: (n x n) @ (n x n) in bf16 on random normal data (never zeros: they ran 13% faster there), 2 n^3 FLOP.
Each: 3 untimed warm-ups, then `repeats` samples timed alone (CUDA events on a GPU; on the CPU perf_counter around a
synchronized call); the best sample is the ceiling (interference only slows a sample), the median is kept beside it.
Torch only: no batchscale import, so the ceilings come back even when batchscale cannot run.

    python3 benchmarks/gpu_ceilings.py RESULTS_DIR cuda|cpu full|small
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

SIZES = {"full": {"copy_bytes": 2**30, "n": 8192, "repeats": 20},  # ~0.5 ms per copy, ~1.4 ms per product on an H200
         "small": {"copy_bytes": 2**28, "n": 512, "repeats": 5}}  # the CPU rehearsal: beyond its L3, quickly


def time_samples(run, device: torch.device, repeats: int, warmups: int = 3) -> list[float]:
    """Seconds of each of `repeats` calls of `run`, each timed alone after `warmups` untimed calls."""
    for _ in range(warmups):
        run()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            begin = time.perf_counter()
            run()
            samples.append(time.perf_counter() - begin)
    return samples


def rates(amount: float, seconds: list[float]) -> dict:
    values = [amount / s for s in seconds]
    return {"best": max(values), "median": statistics.median(values), "samples": values}


def measure(device: torch.device, size: dict) -> dict:
    gen = torch.Generator(device=device).manual_seed(0)
    elements = size["copy_bytes"] // 4
    src = torch.randn(elements, generator=gen, device=device)  # (elements,) float32
    dst = torch.empty_like(src)
    copy = time_samples(lambda: dst.copy_(src), device, size["repeats"])
    if not torch.equal(dst, src):
        raise RuntimeError("the copy did not copy")
    del src, dst
    n = size["n"]
    a = torch.randn(n, n, generator=gen, device=device, dtype=torch.bfloat16)  # (n, n)
    b = torch.randn(n, n, generator=gen, device=device, dtype=torch.bfloat16)  # (n, n)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    matmul = time_samples(lambda: torch.matmul(a, b, out=out), device, size["repeats"])
    reference = a[:64].double() @ b.double()  # (64, n): the first rows, checked against float64
    error = float((out[:64].double() - reference).norm() / reference.norm())
    if not error < 1e-2:  # bf16 operands with float32 accumulation land near 1e-3
        raise RuntimeError(f"the bf16 matrix product is off by {error:.3g} (relative)")
    return {"copy": {"buffer_bytes": size["copy_bytes"], "bytes_moved": 2 * size["copy_bytes"],
                     "bytes_per_s": rates(2 * size["copy_bytes"], copy)},
            "matmul_bf16": {"n": n, "flops": 2 * n**3, "relative_error": error, "flops_per_s": rates(2 * n**3, matmul)}}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("cuda", "cpu") or argv[2] not in SIZES:
        print("usage: gpu_ceilings.py RESULTS_DIR cuda|cpu full|small", file=sys.stderr)
        return 2
    results, device = Path(argv[0]), torch.device(argv[1])
    began = time.perf_counter()
    found = measure(device, SIZES[argv[2]])
    found.update(device=str(device), torch=torch.__version__, seconds=time.perf_counter() - began,
                 name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    results.mkdir(parents=True, exist_ok=True)
    (results / "ceilings.json").write_text(json.dumps(found, indent=2) + "\n")
    copy, matmul = found["copy"]["bytes_per_s"]["best"], found["matmul_bf16"]["flops_per_s"]["best"]
    print(f"ceilings on {found['name']}: copy {copy / 1e9:.1f} GB/s (read + written), bf16 matmul "
          f"{matmul / 1e12:.3g} TFLOP/s at n = {found['matmul_bf16']['n']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
