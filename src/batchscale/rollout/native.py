"""The engine's one native kernel, kernels/bf16_linear.c: compiled on first use, loaded with ctypes.

Built with the system C compiler ($CC, else cc) into the batchscale cache, named by a hash of the source and flags,
staged and renamed so a crash never leaves a half-written library. No torch headers are involved (the kernel sees raw
pointers), so the build takes about a second. OpenMP comes from the process's libgomp.so.1, which torch has already
loaded, so the kernel and torch share one thread runtime.

`bf16_linear_kernel()` returns None, and says why once through `unavailable_reason()`, when the kernel cannot be
used: not x86-64 Linux, no AVX2/FMA, no compiler, or the build failed. The engine then decodes with torch alone.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

import torch

from batchscale.cpu import cpu_flags

FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC", "-std=c11")
_reason: list[str] = []


def _build(source: str, target: Path) -> None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (set CC, or install gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src, out = Path(tmp) / "bf16_linear.c", Path(tmp) / target.name
        src.write_text(source)
        done = subprocess.run([compiler, *FLAGS, str(src), "-o", str(out)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[:500]}")
        os.replace(out, target)


@lru_cache(maxsize=1)
def _load():
    from batchscale.policy.tiny import cache_root

    if platform.system() != "Linux" or platform.machine() != "x86_64":
        raise RuntimeError(f"the kernel is for x86-64 Linux, not {platform.system()} {platform.machine()}")
    if not {"avx2", "fma"} <= cpu_flags():
        raise RuntimeError("this CPU lacks AVX2 or FMA")
    source = resources.files("batchscale.rollout.kernels").joinpath("bf16_linear.c").read_text()
    digest = hashlib.sha256((source + " ".join(FLAGS)).encode()).hexdigest()[:16]
    target = cache_root() / "kernels" / f"bf16_linear-{digest}.so"
    if not target.is_file():
        _build(source, target)
    fn = ctypes.CDLL(str(target)).bf16_linear
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 3 + [ctypes.c_int]
    return fn


def bf16_linear_kernel():
    """The kernel function, or None if it is unavailable here."""
    try:
        return _load()
    except (RuntimeError, OSError) as e:
        if not _reason:
            _reason.append(str(e))
        return None


def unavailable_reason() -> str | None:
    return _reason[0] if _reason else None


def bf16_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight.float(), bias) for float32 x (..., K) on the CPU and a bf16 weight (N, K)."""
    fn = _load()
    shape = x.shape
    x = x.reshape(-1, shape[-1]).contiguous()
    rows, k = x.shape
    n = weight.shape[0]
    if x.dtype != torch.float32 or weight.dtype != torch.bfloat16 or weight.shape[1] != k or x.device.type != "cpu":
        raise ValueError(f"bf16_linear: x {tuple(shape)} {x.dtype} on {x.device} (float32, CPU), "
                         f"weight {tuple(weight.shape)} {weight.dtype} (bfloat16)")
    if not weight.is_contiguous() or (bias is not None and (bias.dtype != torch.float32 or not bias.is_contiguous())):
        raise ValueError("bf16_linear: weight and bias must be contiguous, bias float32")
    y = torch.empty(rows, n, dtype=torch.float32)
    fn(x.data_ptr(), weight.data_ptr(), None if bias is None else bias.data_ptr(), y.data_ptr(), rows, n, k,
       torch.get_num_threads())
    return y.view(*shape[:-1], n)
