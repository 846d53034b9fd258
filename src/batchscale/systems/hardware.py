"""Hardware presets for the roofline: peak dense bf16 FLOP/s, memory bandwidth and memory capacity.

GPU presets are vendor datasheet numbers (dense, i.e. without 2:4 structured sparsity; SXM form factor). Memory sizes are
taken as the datasheet's decimal gigabytes (80 GB = 80e9 bytes), slightly below the physical capacity (an "80GB" A100
holds 80 GiB), which errs on the safe side for KV-cache feasibility.

`cuda` is the preset of the GPU torch sees, matched by its device name (`detect_gpu`).

`cpu` is measured on this machine by a micro-benchmark (~1-2 s, once per process):
- bandwidth: `np.copyto` between two float32 arrays far larger than the last-level cache; each copy moves
  2 * nbytes (read + write; write-allocate traffic is not counted, so this slightly underestimates the bus rate);
- peak: float32 GEMM rate (2 * n^3 FLOPs per n x n matmul) through numpy's BLAS. Departure: the GPU presets quote bf16;
  on CPU we use the fp32 GEMM rate, which is what a CPU run actually reaches and usually above its bf16 rate;
- memory: physical RAM (sysconf).
Each figure is the median of a few repeats after one warm-up.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

from batchscale.errors import UserError


@dataclass(frozen=True)
class Hardware:
    name: str
    peak_flops_per_s: float  # dense matmul peak at the compute dtype
    bandwidth_bytes_per_s: float  # main-memory (HBM or DRAM) bandwidth
    memory_bytes: float  # device memory capacity
    source: str  # where the numbers come from

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a kernel is compute-bound: peak / bandwidth."""
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "peak_flops_per_s": self.peak_flops_per_s,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "memory_bytes": self.memory_bytes,
            "ridge_flops_per_byte": self.ridge_flops_per_byte,
            "source": self.source,
        }


GPU_PRESETS: dict[str, Hardware] = {
    # NVIDIA A100 Tensor Core GPU datasheet: A100 80GB SXM, BF16 Tensor Core 312 TFLOPS (624 with sparsity),
    # GPU memory bandwidth 2,039 GB/s, 80 GB HBM2e.
    "A100-80GB": Hardware("A100-80GB", 312e12, 2.039e12, 80e9, "NVIDIA A100 datasheet (80GB SXM)"),
    # NVIDIA H100 Tensor Core GPU datasheet: H100 SXM, BF16 Tensor Core 1,979 TFLOPS with sparsity = 989 dense,
    # GPU memory bandwidth 3.35 TB/s, 80 GB HBM3.
    "H100-SXM": Hardware("H100-SXM", 989e12, 3.35e12, 80e9, "NVIDIA H100 datasheet (SXM)"),
    # NVIDIA H200 Tensor Core GPU datasheet: H200 SXM, BF16 Tensor Core 1,979 TFLOPS with sparsity = 989 dense,
    # GPU memory bandwidth 4.8 TB/s, 141 GB HBM3e.
    "H200": Hardware("H200", 989e12, 4.8e12, 141e9, "NVIDIA H200 datasheet (SXM)"),
}

HARDWARE_NAMES = [*GPU_PRESETS, "cpu", "cuda"]


def _time_median_s(fn, repeats: int) -> float:
    fn()  # warm-up: page in the arrays, load the BLAS kernels
    times_s = []
    for _ in range(repeats):
        start_s = time.perf_counter()
        fn()
        times_s.append(time.perf_counter() - start_s)
    return float(np.median(times_s))


def measure_copy_bandwidth(copy_mib: int = 256, repeats: int = 5) -> float:
    """Bytes/s of a large array copy: 2 * nbytes (one read, one write) over the median copy time."""
    n = copy_mib * 2**20 // 4
    src = np.ones(n, dtype=np.float32)
    dst = np.empty_like(src)
    time_s = _time_median_s(lambda: np.copyto(dst, src), repeats)
    return 2 * src.nbytes / time_s


def measure_matmul_rate(gemm_n: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of an n x n float32 GEMM (2 * n^3 FLOPs) over the median time."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((gemm_n, gemm_n), dtype=np.float32)
    b = rng.standard_normal((gemm_n, gemm_n), dtype=np.float32)
    out = np.empty((gemm_n, gemm_n), dtype=np.float32)
    time_s = _time_median_s(lambda: np.matmul(a, b, out=out), repeats)
    return 2 * gemm_n**3 / time_s


def read_physical_memory_bytes() -> float:
    """Physical RAM in bytes; 0 where the platform does not say (then no KV capacity is claimed)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0.0


@functools.lru_cache(maxsize=None)
def measure_cpu(copy_mib: int = 256, gemm_n: int = 1024, repeats: int = 5) -> Hardware:
    """Measure this machine once per process (cached): copy bandwidth, fp32 GEMM rate, physical memory."""
    bandwidth_bytes_per_s = measure_copy_bandwidth(copy_mib, repeats)
    peak_flops_per_s = measure_matmul_rate(gemm_n, repeats)
    source = (
        f"measured: np.copyto of {copy_mib} MiB float32, {gemm_n}x{gemm_n} float32 GEMM, median of {repeats}"
    )
    return Hardware("cpu", peak_flops_per_s, bandwidth_bytes_per_s, read_physical_memory_bytes(), source)


# substrings of torch.cuda.get_device_name() -> preset: "NVIDIA H100 80GB HBM3" is an H100-SXM, "NVIDIA H200" an H200
GPU_NAME_PRESETS = (("H200", "H200"), ("H100", "H100-SXM"), ("A100", "A100-80GB"))


def preset_for_gpu_name(gpu_name: str) -> str | None:
    """The preset a CUDA device's name matches, or None. Departure: an H100 PCIe (2.0 TB/s, 756 TFLOPS) reads as the
    SXM preset, so its fractions come out low; pass `--hardware` by name where that matters."""
    return next((preset for marker, preset in GPU_NAME_PRESETS if marker in gpu_name.upper()), None)


def read_gpu_name(device: str = "cuda") -> str | None:
    """The CUDA device's name: from torch when the process has loaded it (the profilers), else from nvidia-smi, so
    the reading side (`plan --hardware cuda`) stays torch-free. None where there is no GPU."""
    index = int(device.partition(":")[2] or 0)
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        return torch.cuda.get_device_name(index) if torch.cuda.is_available() else None
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = done.stdout.strip().splitlines() if done.returncode == 0 else []
    return names[index].strip() if index < len(names) else None


def detect_gpu(device: str = "cuda") -> Hardware:
    """The preset of this machine's CUDA device (`roofline MODEL cuda`, the profilers' default on a GPU)."""
    gpu_name = read_gpu_name(device)
    if gpu_name is None:
        raise UserError("hardware", "'cuda' means the preset of this machine's GPU, but it has no CUDA device",
                        f"name a preset instead: {', '.join(HARDWARE_NAMES)}")
    preset = preset_for_gpu_name(gpu_name)
    if preset is None:
        raise UserError("hardware", f"no preset matches this GPU ({gpu_name})",
                        f"name the closest preset: {', '.join(GPU_PRESETS)}")
    return GPU_PRESETS[preset]


def get_hardware(name: str) -> Hardware:
    """A preset by name (case-insensitive); `cpu` runs the micro-benchmark (cached); `cuda` is the detected GPU's."""
    if name.lower() == "cpu":
        return measure_cpu()
    if name.lower() == "cuda":
        return detect_gpu()
    for key, hardware in GPU_PRESETS.items():
        if key.lower() == name.lower():
            return hardware
    raise UserError("hardware", f"unknown preset {name!r}", f"use one of {', '.join(HARDWARE_NAMES)}")
