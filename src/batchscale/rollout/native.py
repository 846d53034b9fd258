"""The engine's native kernels, kernels/*.c: compiled on first use, loaded with ctypes, chosen by the CPU's flags.

Two bf16 linear kernels, one per kind of CPU (cpu.KERNEL_PATH_FLAGS says which flags each needs):
- "avx2" (kernels/bf16_linear.c): float32 activations, bf16 weights widened in registers, FMA. For CPUs without native
  bf16, where the engine decodes a bf16 model in float32 arithmetic (`bf16_linear`). The same library holds
  `f32_linear` (kernels/f32_linear.c): float32 weights and activations, for a float32 model's small decode steps,
  using every thread it is given; the "avx512_bf16" library holds its 16-lane build, `f32_linear_avx512`. And the
  float32 fused ops of kernels/decode_avx2.c (the same ops and `decode_layer` as below, in float32, with bf16 or
  float32 matrices), for the small decode steps of both, and `sample` for float32 logits (kernels/sample_avx2.c).
- "avx512_bf16" (kernels/bf16_linear_avx512.c): bf16 activations, weights and output, vdpbf16ps. For CPUs with native
  bf16, where the engine decodes a bf16 model in bf16 (`bf16_linear_native`). The same library holds the fused small
  ops of such a decode step (kernels/decode_avx512.c: `add_rms_norm`, `rope`, `attention`, `silu_mul`), and
  `decode_layer`, a whole layer in one call for steps of a few sequences, and `sample` (kernels/sample_avx512.c): a
  token and its log-prob per row straight from bf16 logits.

Each is built with the system C compiler ($CC, else cc) into the batchscale cache, named by a hash of the sources, the
headers they share (kernels/*.h: avx2_common.h, copied beside them) and the flags, staged and renamed so a crash never
leaves a half-written library. No torch headers are involved (the kernels
see raw pointers), so a build takes about a second. OpenMP comes from the process's libgomp.so.1, which torch has
already loaded, so the kernels and torch share one thread runtime.

`bf16_linear_kernel(path)` returns None, and `unavailable_reason(path)` says why, when a kernel cannot be used: not
x86-64 Linux, the CPU lacks its flags, no compiler, or the build failed. The engine then uses torch alone there.

Every linear (and `decode_layer`) takes a `KernelPlan`: how it walks the weights (column tiles' rows side by side or one
after another, how far ahead it prefetches) and on how many threads. Which walk reads memory fastest depends on the
CPU's prefetchers, not on its flags, so rollout/tuning.py times the plans per CPU and model shape. No plan changes the
arithmetic: each accumulator sums the same products in the same order (tested bit for bit).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import torch

from batchscale.cpu import KERNEL_PATH_FLAGS, has_kernel_path
from batchscale.files import cache_root

COMMON_FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=c11")
KERNELS = {  # path -> (sources, the linear's symbol, ISA flags)
    "avx2": (("bf16_linear.c", "f32_linear.c", "decode_avx2.c", "sample_avx2.c"), "bf16_linear",
             ("-mavx2", "-mfma", "-fno-math-errno")),
    "avx512_bf16": (("bf16_linear_avx512.c", "decode_avx512.c", "sample_avx512.c", "f32_linear.c", "decode_avx2.c"),
                    "bf16_linear_bf16",
                    ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mfma", "-fno-math-errno")),
}
P, I64, F32, INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int
LINEAR = [P] * 4 + [I64] * 3 + [INT, INT, I64]  # x, w, b, y, M, N, K, threads, order, prefetch
SIGNATURES = {  # symbol -> argument types
    "bf16_linear": LINEAR, "bf16_linear_bf16": LINEAR, "f32_linear": LINEAR, "f32_linear_avx512": LINEAR,
    "add_rms_norm_bf16": [P] * 4 + [I64] * 2 + [F32], "rope_bf16": [P] * 4 + [I64] * 4,
    "attention_bf16": [P, I64, P, P, P, P] + [I64] * 5 + [F32, INT], "silu_mul_bf16": [P, P, I64, I64],
    "decode_layer_bf16": [P] * 11 + [I64, P, F32, F32, INT, INT, I64],
    "add_rms_norm_f32": [P] * 4 + [I64] * 2 + [F32], "rope_f32": [P] * 4 + [I64] * 4,
    "attention_f32": [P, I64, P, P, P, P] + [I64] * 5 + [F32, INT], "silu_mul_f32": [P, P, I64, I64],
    "decode_layer_f32": [P] * 11 + [I64, P, F32, F32, INT, INT, INT, I64],
    "sample_bf16": [P, P, I64, I64, F32, P, P, P, INT], "sample_f32": [P, P, I64, I64, F32, P, P, P, INT],
}
_reasons: dict[str, str] = {}
ORDERS = ("tiles", "rows")  # KernelPlan.order -> the kernels' `order` argument (its index)


@dataclass(frozen=True)
class KernelPlan:
    """How a linear kernel walks its weights: `order` "tiles" reads step k of a column tile's rows side by side (4-8
    interleaved streams), "rows" reads them one after another (one stream); `prefetch_bytes` ahead of every weight
    line read (0: none); `threads` (0: torch's thread count) split the output columns."""

    order: str = "tiles"
    prefetch_bytes: int = 0
    threads: int = 0

    def args(self) -> tuple[int, int, int]:
        """The kernels' trailing (threads, order, prefetch) arguments."""
        return self.threads or torch.get_num_threads(), ORDERS.index(self.order), self.prefetch_bytes


DEFAULT_PLAN = KernelPlan()


def _build(compiler: str, flags: tuple[str, ...], sources: dict[str, str], headers: dict[str, str],
           target: Path) -> None:
    """Compile `sources` (name -> text) into `target`, with `headers` (name -> text) beside them for their #includes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        for name, text in {**headers, **sources}.items():
            (Path(tmp) / name).write_text(text)
        files = [Path(tmp) / name for name in sources]
        out = Path(tmp) / target.name
        done = subprocess.run([compiler, *flags, *map(str, files), "-o", str(out), "-lm"], capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[:500]}")
        os.replace(out, target)


@lru_cache(maxsize=None)
def _sources(path: str) -> tuple[dict[str, str], dict[str, str], tuple[str, ...], str]:
    """Library `path`'s C sources and the headers beside them (name -> text), its compiler flags and their digest
    (which names the build)."""
    filenames, _, isa = KERNELS[path]
    flags = (*COMMON_FLAGS, *isa)
    kernels = resources.files("batchscale.rollout.kernels")
    sources = {name: kernels.joinpath(name).read_text() for name in filenames}
    headers = {f.name: f.read_text() for f in sorted(kernels.iterdir(), key=lambda f: f.name) if f.name.endswith(".h")}
    text = "".join([*headers.values(), *sources.values()]) + " ".join(flags)
    return sources, headers, flags, hashlib.sha256(text.encode()).hexdigest()[:16]


def source_digest(path: str) -> str:
    """A digest of library `path`'s sources and flags: what a build, or a plan timed on it, belongs to."""
    return _sources(path)[3]


@lru_cache(maxsize=None)
def _library(path: str) -> ctypes.CDLL:
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        raise RuntimeError(f"the kernels are for x86-64 Linux, not {platform.system()} {platform.machine()}")
    if not has_kernel_path(path):
        raise RuntimeError(f"this CPU lacks {' or '.join(sorted(KERNEL_PATH_FLAGS[path]))}")
    filenames = KERNELS[path][0]
    sources, headers, flags, digest = _sources(path)
    target = cache_root() / "kernels" / f"{Path(filenames[0]).stem}-{digest}.so"
    if not target.is_file():
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise RuntimeError("no C compiler (set CC, or install gcc)")
        _build(compiler, flags, sources, headers, target)
    library = ctypes.CDLL(str(target))
    for symbol, argtypes in SIGNATURES.items():
        if hasattr(library, symbol):
            fn = getattr(library, symbol)
            fn.restype, fn.argtypes = None, argtypes
    return library


def _load(path: str):
    return getattr(_library(path), KERNELS[path][1])


def bf16_linear_kernel(path: str = "avx2"):
    """The kernel function of `path` ("avx2" or "avx512_bf16"), or None if it is unavailable here."""
    try:
        return _load(path)
    except (RuntimeError, OSError) as e:
        _reasons.setdefault(path, str(e))
        return None


def unavailable_reason(path: str = "avx2") -> str | None:
    return _reasons.get(path)


def _call(path: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, x_dtype: torch.dtype,
          w_dtype: torch.dtype = torch.bfloat16, symbol: str | None = None, plan: KernelPlan = DEFAULT_PLAN):
    """y = x W^T + b through library `path`'s `symbol` (default: its bf16 linear), walking W as `plan` says."""
    fn = getattr(_library(path), symbol or KERNELS[path][1])
    shape = x.shape
    x = x.reshape(-1, shape[-1]).contiguous()
    rows, k = x.shape
    n = weight.shape[0]
    if x.dtype != x_dtype or weight.dtype != w_dtype or weight.shape[1] != k or x.device.type != "cpu":
        raise ValueError(f"native linear ({path}): x {tuple(shape)} {x.dtype} on {x.device} ({x_dtype}, CPU), "
                         f"weight {tuple(weight.shape)} {weight.dtype} ({w_dtype})")
    if not weight.is_contiguous() or (bias is not None and (bias.dtype != x_dtype or not bias.is_contiguous())):
        raise ValueError(f"native linear ({path}): weight and bias must be contiguous, bias {x_dtype}")
    y = torch.empty(rows, n, dtype=x_dtype)
    fn(x.data_ptr(), weight.data_ptr(), None if bias is None else bias.data_ptr(), y.data_ptr(), rows, n, k,
       *plan.args())
    return y.view(*shape[:-1], n)


def bf16_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                plan: KernelPlan = DEFAULT_PLAN) -> torch.Tensor:
    """F.linear(x, weight.float(), bias) for float32 x (..., K) on the CPU and a bf16 weight (N, K): the AVX2 kernel."""
    return _call("avx2", x, weight, bias, torch.float32, plan=plan)


F32_SYMBOLS = {"avx2": "f32_linear", "avx512_bf16": "f32_linear_avx512"}  # library -> its float32 kernel


def f32_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               path: str = "avx2", plan: KernelPlan = DEFAULT_PLAN) -> torch.Tensor:
    """F.linear(x, weight, bias) for float32 x (..., K), weight (N, K) and bias on the CPU: the float32 kernel of
    library `path` (8 lanes in "avx2", 16 in "avx512_bf16"), output columns split over the plan's threads."""
    return _call(path, x, weight, bias, torch.float32, torch.float32, F32_SYMBOLS[path], plan)


def bf16_linear_native(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                       plan: KernelPlan = DEFAULT_PLAN) -> torch.Tensor:
    """F.linear(x.float(), weight.float(), bias.float()) rounded to bf16, for bf16 x (..., K), weight (N, K) and bias
    on the CPU: the AVX512-BF16 kernel (float32 accumulation)."""
    return _call("avx512_bf16", x, weight, bias, torch.bfloat16, plan=plan)


# The fused small ops of a decode step, on contiguous CPU tensors: bf16 ones in the "avx512_bf16" library
# (kernels/decode_avx512.c), float32 ones in the "avx2" library (kernels/decode_avx2.c). Each function picks by the
# dtype of its activations.
FUSED_OPS = {torch.bfloat16: ("avx512_bf16", "bf16"), torch.float32: ("avx2", "f32")}  # dtype -> library, suffix


def _op(name: str, dtype: torch.dtype):
    if dtype not in FUSED_OPS:
        raise ValueError(f"the fused decode ops take bfloat16 or float32 activations, not {dtype}")
    path, suffix = FUSED_OPS[dtype]
    return getattr(_library(path), f"{name}_{suffix}")


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x += delta in place (x (M, D) contiguous, bf16 or float32 as delta and weight; delta None: no add), then
    RMSNorm(x) * weight (M, D)."""
    y = torch.empty_like(x)
    _op("add_rms_norm", x.dtype)(x.data_ptr(), None if delta is None else delta.contiguous().data_ptr(),
                                 weight.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], eps)
    return y


def rope(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, heads: int) -> None:
    """RoPE in place on the first `heads` heads of qkv (M, width) at positions (M,), tables cos, sin (length, D)."""
    _op("rope", qkv.dtype)(qkv.data_ptr(), cos.data_ptr(), sin.data_ptr(), positions.data_ptr(), qkv.shape[0],
                           qkv.shape[1], heads, cos.shape[1])


def attention(qkv: torch.Tensor, heads: int, keys: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor,
              scale: float) -> torch.Tensor:
    """One query per row (the first `heads` heads of qkv (M, width)) over rows 0..M-1 of the caches (slots, H_kv, L,
    D), lengths[m] positions each. Returns (M, heads * D)."""
    slots, kv_heads, length, dim = keys.shape
    out = torch.empty(qkv.shape[0], heads * dim, dtype=qkv.dtype)
    _op("attention", qkv.dtype)(qkv.data_ptr(), qkv.shape[1], keys.data_ptr(), values.data_ptr(), lengths.data_ptr(),
                                out.data_ptr(), qkv.shape[0], heads, kv_heads, length, dim, scale,
                                torch.get_num_threads())
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gate_up (M, 2F) = [gate | up]. Returns (M, F)."""
    rows, width = gate_up.shape
    y = torch.empty(rows, width // 2, dtype=gate_up.dtype)
    _op("silu_mul", gate_up.dtype)(gate_up.data_ptr(), y.data_ptr(), rows, width // 2)
    return y


def layer_pointers(w) -> ctypes.Array:
    """The weights a decode_layer call reads, as the C array it takes (w: a weights.LayerWeights: all bf16, or float32
    with float32 or bf16 matrices)."""
    tensors = (w.input_norm, w.qkv, w.qkv_bias, w.o, w.o_bias, w.post_norm, w.gate_up, w.gate_up_bias, w.down,
               w.down_bias)
    return (ctypes.c_void_p * len(tensors))(*(None if t is None else t.data_ptr() for t in tensors))


def decode_layer(x: torch.Tensor, delta: torch.Tensor | None, pointers: ctypes.Array, key_cache: torch.Tensor,
                 value_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                 lengths: torch.Tensor, scratch: torch.Tensor, delta_out: torch.Tensor, shape: torch.Tensor,
                 eps: float, scale: float, bf16_weights: bool = True, plan: KernelPlan = DEFAULT_PLAN,
                 path: str | None = None) -> None:
    """One decoder layer for rows 0..M-1 of x (M, d) in one call: x += delta in place, the layer's MLP output into
    delta_out; k and v written into the caches. shape: int64 (d, H, H_kv, D, F, L); scratch: x's dtype, at least
    M * (2 d + (2 H + 2 H_kv) D + 3 F) elements. bf16 x: everything bf16 (kernels/decode_avx512.c); float32 x:
    everything float32 but the four matrices, bf16 if `bf16_weights` (kernels/decode_avx2.c). `plan` walks the
    matrices (its threads also split attention). `path`: the library (default: FUSED_OPS's for x's dtype); float32 x
    in "avx512_bf16" multiplies float32 matrices with its 16-lane kernel."""
    if path == "avx512_bf16" and x.dtype == torch.float32 and bf16_weights:
        raise ValueError("the AVX-512 library's float32 decode_layer takes float32 matrices only")
    args = (x.data_ptr(), None if delta is None else delta.data_ptr(), pointers, key_cache.data_ptr(),
            value_cache.data_ptr(), cos.data_ptr(), sin.data_ptr(), positions.data_ptr(), lengths.data_ptr(),
            scratch.data_ptr(), delta_out.data_ptr(), x.shape[0], shape.data_ptr(), eps, scale)
    if x.dtype == torch.float32:
        args += (int(bf16_weights),)
    if path is None:
        fn = _op("decode_layer", x.dtype)
    else:
        fn = getattr(_library(path), f"decode_layer_{FUSED_OPS[x.dtype][1]}")
    fn(*args, *plan.args())


def sample(logits: torch.Tensor, uniforms: torch.Tensor | None, temperature: float):
    """(tokens (B,) int64, log-probs (B,) float32) for bf16 or float32 logits (B, V): sampling.sample_tokens with
    top_p = 1 on logits.float(), in one native pass per row (uniforms (B,) float32, None: greedy); bf16 logits in the
    "avx512_bf16" library (kernels/sample_avx512.c), float32 ones in the "avx2" library (kernels/sample_avx2.c)."""
    rows, vocab = logits.shape
    logits = logits.contiguous()
    threads = torch.get_num_threads()
    tokens = torch.empty(rows, dtype=torch.int64)
    logprobs = torch.empty(rows, dtype=torch.float32)
    scratch = torch.empty(threads * (vocab + 16) if uniforms is not None else 0, dtype=torch.float32)
    if uniforms is not None:
        uniforms = uniforms.to(torch.float32).contiguous()
    _op("sample", logits.dtype)(logits.data_ptr(), None if uniforms is None else uniforms.data_ptr(), rows, vocab,
                                temperature, tokens.data_ptr(), logprobs.data_ptr(), scratch.data_ptr(), threads)
    return tokens, logprobs
