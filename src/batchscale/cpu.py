"""What this CPU can do, read once: the Linux feature flags and the kernel paths they allow.

Every choice that depends on CPU flags (the engine's bf16 kernel, decoding a bf16 model in float32, bf16 autocast in
training) asks here, so there is one reader of /proc/cpuinfo and one definition of "native bf16". Torch-free unless the
flags are unreadable (then torch's oneDNN check decides), so `systems/` and the reading side can import it cheaply.

BATCHSCALE_CPU_CAPABILITY=avx2 makes this module report the CPU without its AVX-512 and AMX flags, so every choice
above takes the path an AVX2-only CPU takes (no native bf16, the "avx2" kernels). It is how the AVX2 paths are tested
and measured on an AVX-512 machine, beside torch's own ATEN_CPU_CAPABILITY=avx2 (which this does not set). It can
only hide flags, never add them. Read at the first call (the answers are cached for the process).
"""

from __future__ import annotations

import os
from functools import lru_cache

NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# The engine's bf16 linear kernels (rollout/kernels/) and the flags each needs: "avx2" takes float32 activations and
# widens bf16 weights in registers (CPUs without native bf16); "avx512_bf16" keeps activations in bf16 and multiplies
# with vdpbf16ps (CPUs with native bf16).
KERNEL_PATH_FLAGS = {"avx2": frozenset({"avx2", "fma"}),
                     "avx512_bf16": frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_bf16", "fma"})}
CAPABILITY_ENV = "BATCHSCALE_CPU_CAPABILITY"
CAPABILITIES = {"avx2": ("avx512", "amx")}  # capability -> the prefixes of the flags it hides


def capability_override() -> str | None:
    """The capability BATCHSCALE_CPU_CAPABILITY asks for (None: unset or empty; ValueError: unknown)."""
    value = os.environ.get(CAPABILITY_ENV, "").strip().lower()
    if value and value not in CAPABILITIES:
        raise ValueError(f"{CAPABILITY_ENV}={value!r}: choose one of {', '.join(CAPABILITIES)}")
    return value or None


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags Linux reports (empty where /proc/cpuinfo is missing), less those that
    BATCHSCALE_CPU_CAPABILITY hides."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith("flags")), "")
            flags = frozenset(line.partition(":")[2].split())  # "flags\t\t: fpu vme ..." -> the flags only
    except OSError:
        return frozenset()
    capability = capability_override()
    if capability is None:
        return flags
    return frozenset(f for f in flags if not f.startswith(CAPABILITIES[capability]))


@lru_cache(maxsize=1)
def native_bf16_cpu() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX-BF16): the Linux CPU flags, else torch's
    oneDNN check. False means torch emulates bf16 matmuls on this CPU."""
    flags = cpu_flags()
    if flags:
        return bool(NATIVE_BF16_FLAGS & flags)
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@lru_cache(maxsize=1)
def cpu_model() -> str | None:
    """The CPU's model name as Linux reports it (None where /proc/cpuinfo is missing)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith("model name")), None)
    except OSError:
        return None
    return line.partition(":")[2].strip() if line else None


def has_kernel_path(path: str) -> bool:
    """Whether this CPU has every flag the kernel path `path` (a key of KERNEL_PATH_FLAGS) is compiled for."""
    return KERNEL_PATH_FLAGS[path] <= cpu_flags()


def kernel_flags() -> list[str]:
    """The flags that choose kernel paths here (vector width, bf16), for saying which CPU a number was measured on,
    and BATCHSCALE_CPU_CAPABILITY's value where it hides some."""
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_bf16", "amx_tile")
    capability = capability_override()  # named, so a number measured under it never passes for an AVX2-only CPU's
    return [flag for flag in wanted if flag in cpu_flags()] + ([f"{CAPABILITY_ENV}={capability}"] if capability else [])
