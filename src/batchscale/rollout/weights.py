"""The weights a decode step reads, packed once per policy update: fused projections in the compute dtype.

A decode step at small active batch is a string of small matrix-vector products, so two things cost more than they
should if the decoder reads the model's modules as they are:
- per-call overhead: q, k and v (and gate and up) are separate products over the same input. Packing them into one
  weight each (`qkv`, `gate_up`) halves the number of matmuls per layer.
- the dtype: on a GPU with bf16 tensor cores "auto" decodes a float32 policy in bf16 (the float32 master weights
  stay with the optimizer; the pack is their bf16 copy). A CPU without native bf16 (no AVX512-BF16 or AMX:
  `native_bf16_cpu`) runs bf16 matmuls in emulation, 5-8x slower than float32 there (BENCHMARKS.md). With
  `compute_dtype = "auto"` such a CPU decodes a bf16 or fp16
  policy in float32: the same weights, upcast exactly, with float32 arithmetic instead of emulated half precision.
  A float32 copy doubles the bytes a decode step reads, though, and at a few active sequences those bytes are the
  cost. So for a bf16 policy the pack also keeps its matrices in bf16 (`small_batch`), which decode steps of at most
  SMALL_BATCH_ROWS sequences multiply with the "avx2" kernel of native.py (bf16 weights, float32 arithmetic); larger
  batches use the float32 matrices and torch's GEMM, which is compute-bound there.
  A CPU with native bf16 decodes a bf16 policy in bf16. Its decode steps of at most NATIVE_SMALL_BATCH_ROWS
  sequences use the "avx512_bf16" kernel (vdpbf16ps, near the memory roofline at one row) on the same bf16 matrices;
  larger ones, and prefill, torch's bf16 GEMM (oneDNN), which wins once a step is no longer bound by reading the
  weights.
- threads: torch's float32 matrix-vector product reads the weights at one core's rate however many threads it has.
  So a float32 policy's decode steps of at most F32_SMALL_BATCH_ROWS sequences use the float32 kernel of native.py
  (16 lanes where the CPU has the "avx512_bf16" path, else AVX2), which reads the weights faster on one core and
  splits the output columns over the threads.
- the layout: a plain F.linear makes oneDNN reorder the weight into its blocked layout at every call, a second pass
  over every weight per step. So on such a CPU the pack also holds each matrix pre-reordered once (`gemm`, made by
  `torch.ops.mkldnn._reorder_linear_weight`, what torch.compile's CPU freezing does), multiplied by
  `onednn_linear`: bit-identical to F.linear, and 15-30% less time per decode step at 8-64 sequences (BENCHMARKS.md).
  The price is memory: one more copy of every matrix and of the LM head (SmolLM2-135M: +268 MB), beside the plain
  ones the small-batch kernel reads.
- the pages: the matrices the small-batch kernel reads (and the LM head) are copied into one arena of 2 MiB pages
  (hugepages.py), where the hardware prefetchers run on past what would be 4 KiB page boundaries. Where the model's
  own parameters were read in place before (a bf16 model's o and down projections and tied head on a CPU with native
  bf16; a float32 model's), that copy costs their size once more (SmolLM2-135M: +130 MB in bf16, +260 MB in float32).
- the kernel, its walk over the weights and the row counts above are defaults: the decoder settles them per CPU and
  model shape by timing (tuning.py) and sets them with `PackedWeights.use`, without a re-pack.

The pack is a copy, so it must follow the optimizer: `PackedWeights.current(model)` re-packs whenever a parameter's
storage or in-place version counter changed since the last pack (an optimizer step bumps every updated parameter's
version), and otherwise returns the cached pack. Packing the 135M SmolLM2 takes ~0.1-0.3 s on one core, paid once per
rollout batch; the tiny model's pack is negligible.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Callable

import torch
import torch.nn.functional as F

from batchscale.cpu import native_bf16_cpu
from batchscale.device import native_bf16
from batchscale.rollout import native
from batchscale.rollout.hugepages import HugePageArena, arena_bytes
from batchscale.rollout.native import KernelPlan, bf16_linear, bf16_linear_kernel, bf16_linear_native

HALF_DTYPES = (torch.bfloat16, torch.float16)
KERNEL_MATRICES = {"avx2": "bf16 copies", "avx512_bf16": "pack", "f32": "pack", "f32_avx512": "pack"}  # what each reads


SMALL_BATCH_ROWS = 16  # up to here the AVX2 kernel beat float32 GEMM on an AVX2-only CPU (BENCHMARKS.md)
NATIVE_SMALL_BATCH_ROWS = 2  # above this the packed oneDNN GEMM beat the AVX512-BF16 layer call (BENCHMARKS.md)
F32_SMALL_BATCH_ROWS = 16  # the float32 kernel beat torch's float32 GEMM at 1-256 rows with AVX-512; 16 is the
# conservative side for AVX2-only CPUs, where torch's float32 GEMM was relatively stronger (BENCHMARKS.md)


def f32_linear_avx512(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                      plan: KernelPlan = native.DEFAULT_PLAN) -> torch.Tensor:
    return native.f32_linear(x, weight, bias, "avx512_bf16", plan)


# the kernel a small decode step uses -> (the native library it lives in, its linear): "avx2" multiplies float32
# activations by bf16 weights, "avx512_bf16" bf16 by bf16, "f32" and "f32_avx512" float32 by float32
KERNEL_LINEAR = {"avx2": ("avx2", bf16_linear), "avx512_bf16": ("avx512_bf16", bf16_linear_native),
                 "f32": ("avx2", native.f32_linear), "f32_avx512": ("avx512_bf16", f32_linear_avx512)}
# how each kernel walks its weights until a timed plan says otherwise (rollout/tuning.py): as each was tuned, the
# AVX2 builds with the prefetch about one column tile ahead that the Sapphire Rapids VM needed
DEFAULT_WALKS = {"avx2": KernelPlan(prefetch_bytes=4096), "f32": KernelPlan(prefetch_bytes=4096),
                 "avx512_bf16": KernelPlan(), "f32_avx512": KernelPlan()}


def kernel_candidates(setting: str, model_dtype: torch.dtype, compute_dtype: torch.dtype,
                      device: torch.device) -> list[tuple[str, int]]:
    """[(kernel, rows)]: the native kernels small decode steps may use here (keys of KERNEL_LINEAR, the default
    first) and the most sequences a step may hold to use each until a timed plan says otherwise. Only "auto" uses a
    kernel, only on a CPU, and only where its library builds (rollout/native.py): "avx2" for a bf16 model decoded in
    float32, "avx512_bf16" for one decoded in bf16, "f32_avx512" and "f32" (AVX2) for a float32 model; those last two
    read the same matrices, so a timed plan may pick either."""
    if setting != "auto" or device.type != "cpu":
        return []
    candidates = {(torch.bfloat16, torch.float32): [("avx2", SMALL_BATCH_ROWS)],
                  (torch.bfloat16, torch.bfloat16): [("avx512_bf16", NATIVE_SMALL_BATCH_ROWS)],
                  (torch.float32, torch.float32): [("f32_avx512", F32_SMALL_BATCH_ROWS), ("f32", F32_SMALL_BATCH_ROWS)],
                  }.get((model_dtype, compute_dtype), [])
    return [(kernel, rows) for kernel, rows in candidates if bf16_linear_kernel(KERNEL_LINEAR[kernel][0])]


def resolve_kernel(setting: str, model_dtype: torch.dtype, compute_dtype: torch.dtype,
                   device: torch.device) -> tuple[str | None, int]:
    """(kernel, rows): the default of kernel_candidates ((None, 0): no kernel)."""
    return next(iter(kernel_candidates(setting, model_dtype, compute_dtype, device)), (None, 0))


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, W, bias) for bf16 x (..., K) and W (N, K) pre-reordered by `onednn_pack`: the same oneDNN kernel
    F.linear runs, without reordering W at every call."""
    shape = x.shape
    y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, shape[-1]), weight, bias, "none", [], "")
    return y.view(*shape[:-1], y.shape[-1])


def onednn_pack(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 matrix (N, K) in oneDNN's blocked layout for `onednn_linear` (its layout does not depend on the rows
    it will meet: BENCHMARKS.md times hints of 1 to 256 alike)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, 16)


@lru_cache(maxsize=1)
def onednn_packing_available() -> bool:
    """Whether this torch can pre-pack bf16 weights for oneDNN here (a build with mkldnn on a CPU with native bf16),
    checked once by multiplying with a packed matrix."""
    if not (native_bf16_cpu() and torch.backends.mkldnn.is_available()):
        return False
    try:
        weight = torch.arange(48, dtype=torch.float32).view(3, 16).bfloat16()
        x = torch.ones(2, 16, dtype=torch.bfloat16)
        return torch.equal(onednn_linear(x, onednn_pack(weight)), F.linear(x, weight))
    except (RuntimeError, AttributeError):
        return False


def resolve_gemm(setting: str, compute_dtype: torch.dtype, device: torch.device) -> bool:
    """Whether larger decode steps and prefill multiply with pre-packed oneDNN matrices: only "auto", bf16 on a CPU
    with native bf16 where torch can pack ("model" stays plain torch)."""
    return (setting == "auto" and device.type == "cpu" and compute_dtype == torch.bfloat16
            and onednn_packing_available())


def resolve_generation_dtype(setting: str, model_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype decode runs in: "model" keeps the model's, "float32" forces it, "auto" upcasts a half-precision
    model on a CPU that would emulate it, and decodes a float32 model in bf16 on a GPU with bf16 tensor cores (what
    vLLM and every GPU RL stack do: decode reads the weights once per step, so 2-byte weights halve its cost)."""
    if setting == "float32":
        return torch.float32
    if setting == "auto" and device.type == "cpu" and model_dtype in HALF_DTYPES and not native_bf16_cpu():
        return torch.float32
    if setting == "auto" and device.type == "cuda" and model_dtype == torch.float32 and native_bf16("cuda"):
        return torch.bfloat16
    return model_dtype


@dataclass
class LayerWeights:
    input_norm: torch.Tensor  # (d,)
    qkv: torch.Tensor  # (H*D + 2*H_kv*D, d): q, k and v projections stacked
    qkv_bias: torch.Tensor | None
    q_norm: torch.Tensor | None  # (D,) qwen3's per-head RMSNorm weights, else None
    k_norm: torch.Tensor | None
    o: torch.Tensor  # (d, H*D)
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor  # (d,)
    gate_up: torch.Tensor  # (2*F, d): gate and up projections stacked
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor  # (d, F)
    down_bias: torch.Tensor | None


def _cat(tensors, dtype) -> torch.Tensor | None:
    if any(t is None for t in tensors):
        return None
    return torch.cat([t.detach().to(dtype) for t in tensors])


def _cast(tensor, dtype) -> torch.Tensor | None:
    return None if tensor is None else tensor.detach().to(dtype)


def _matrices(layer, dtype: torch.dtype) -> dict:
    attn, mlp = layer.self_attn, layer.mlp
    return dict(qkv=_cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight], dtype),
                o=_cast(attn.o_proj.weight, dtype),
                gate_up=_cat([mlp.gate_proj.weight, mlp.up_proj.weight], dtype),
                down=_cast(mlp.down_proj.weight, dtype))


def pack_layer(layer, dtype: torch.dtype) -> LayerWeights:
    attn, mlp = layer.self_attn, layer.mlp
    return LayerWeights(
        input_norm=_cast(layer.input_layernorm.weight, dtype),
        qkv_bias=_cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias], dtype),
        q_norm=_cast(getattr(getattr(attn, "q_norm", None), "weight", None), dtype),
        k_norm=_cast(getattr(getattr(attn, "k_norm", None), "weight", None), dtype),
        o_bias=_cast(attn.o_proj.bias, dtype),
        post_norm=_cast(layer.post_attention_layernorm.weight, dtype),
        gate_up_bias=_cat([mlp.gate_proj.bias, mlp.up_proj.bias], dtype),
        down_bias=_cast(mlp.down_proj.bias, dtype),
        **_matrices(layer, dtype),
    )


def pack_matrices(layer, packed: LayerWeights, dtype: torch.dtype) -> LayerWeights:
    """`packed` with its four matrices re-made from `layer` in `dtype` (its norms and biases stay as they are)."""
    return replace(packed, **_matrices(layer, dtype))


@dataclass
class Matrices:
    """The layers and LM head one kind of step reads, with the linear that multiplies by their matrices:
    - the small-batch set (decode steps of at most `max_rows` sequences): bf16 matrices (a copy for the "avx2" path,
      the main pack's for "avx512_bf16") and the kernel's linear;
    - the main pack with F.linear, or its oneDNN-packed copy with `onednn_linear` (max_rows None: any step).
    Norms and biases are the main pack's."""

    layers: list[LayerWeights]
    lm_head: torch.Tensor
    max_rows: int | None
    linear: Callable


def _onednn_matrices(layers: list[LayerWeights], lm_head: torch.Tensor) -> Matrices:
    packed = [replace(w, qkv=onednn_pack(w.qkv), o=onednn_pack(w.o), gate_up=onednn_pack(w.gate_up),
                      down=onednn_pack(w.down)) for w in layers]
    return Matrices(packed, onednn_pack(lm_head), None, onednn_linear)


MATRIX_NAMES = ("qkv", "o", "gate_up", "down")


class PackedWeights:
    """The model's decode weights in `dtype`, re-packed only when a parameter changed; `small_batch` holds what the
    native kernel `kernel` (a key of KERNEL_LINEAR, or None) reads, walked as `walk` says, when `small_batch_rows` > 0
    (in huge pages where the OS gives them: `huge_page_bytes`), `gemm` (with `onednn`) the oneDNN-packed matrices
    every other step reads. `use` switches kernel, walk and rows without a re-pack (rollout/tuning.py's plan)."""

    def __init__(self, dtype: torch.dtype, small_batch_rows: int = 0, kernel: str | None = None,
                 onednn: bool = False, walk: KernelPlan | None = None):
        self.dtype, self.small_batch_rows, self.kernel, self.onednn = dtype, small_batch_rows, kernel, onednn
        self.walk = walk or DEFAULT_WALKS.get(kernel, KernelPlan())
        self.key: tuple | None = None
        self.layers: list[LayerWeights] = []
        self.embed = self.final_norm = self.lm_head = None
        self.small_batch: Matrices | None = None
        self.gemm: Matrices | None = None
        self.huge_pages = True  # whether the kernel's matrices go to huge pages (False: to compare, engine_variants.py)
        self.arena: HugePageArena | None = None  # where they live, reused by every re-pack
        self.huge_page_bytes = 0

    def _arena_for(self, layers: list[LayerWeights], head: torch.Tensor) -> HugePageArena | None:
        """The arena for the kernel's matrices (the previous pack's where they fit: it holds nothing else), or None
        where huge pages are not wanted or the OS has none to give."""
        if not (self.huge_pages and HugePageArena.available()):
            return None
        nbytes = arena_bytes([getattr(w, name) for w in layers for name in MATRIX_NAMES] + [head])
        if self.arena is None or not self.arena.reuse(nbytes):
            self.arena = None  # the old one goes with the old pack's tensors
            self.arena = HugePageArena(nbytes)
        return self.arena

    def _place(self, layers: list[LayerWeights], head: torch.Tensor) -> tuple[list[LayerWeights], torch.Tensor]:
        """The kernel's matrices, in huge pages where the OS gives them."""
        arena = self._arena_for(layers, head)
        if arena is None:
            self.huge_page_bytes = 0
            return layers, head
        layers = [replace(w, **{name: arena.take(getattr(w, name)) for name in MATRIX_NAMES}) for w in layers]
        head = arena.take(head)
        self.huge_page_bytes = arena.huge_bytes()
        return layers, head

    def kernel_linear(self) -> Callable:
        """The kernel's linear, walking the weights as `walk` says."""
        return partial(KERNEL_LINEAR[self.kernel][1], plan=self.walk)

    def use(self, kernel: str, walk: KernelPlan, small_batch_rows: int) -> None:
        """Decode small steps with `kernel` (one that reads the same matrices as the current one), walked as `walk`
        says, up to `small_batch_rows` sequences."""
        if KERNEL_MATRICES.get(kernel) != KERNEL_MATRICES.get(self.kernel):
            raise ValueError(f"kernel {kernel!r} reads other matrices than {self.kernel!r}: it needs its own pack")
        self.kernel, self.walk, self.small_batch_rows = kernel, walk, small_batch_rows
        if self.small_batch is not None:
            self.small_batch.linear, self.small_batch.max_rows = self.kernel_linear(), small_batch_rows

    @staticmethod
    def version_key(model) -> tuple:
        return tuple((p.data_ptr(), p._version) for p in model.parameters())

    def current(self, model) -> PackedWeights:
        key = self.version_key(model)
        if key != self.key:
            with torch.no_grad():
                body, dtype = model.model, self.dtype
                self.layers, self.small_batch, self.gemm = [], None, None  # drop the old pack first
                self.layers = [pack_layer(layer, dtype) for layer in body.layers]
                self.embed = _cast(body.embed_tokens.weight, dtype)
                self.final_norm = _cast(body.norm.weight, dtype)
                head = model.lm_head.weight
                tied = head.data_ptr() == body.embed_tokens.weight.data_ptr()
                self.lm_head = self.embed if tied else _cast(head, dtype)
                if self.kernel == "avx2":  # bf16 copies of the matrices for the float32 decode of a bf16 model
                    layers, small_head = self._place([pack_matrices(layer, packed, torch.bfloat16)
                                                      for layer, packed in zip(body.layers, self.layers)],
                                                     _cast(head, torch.bfloat16))
                    self.small_batch = Matrices(layers, small_head, self.small_batch_rows, self.kernel_linear())
                elif self.kernel:  # the kernel reads the main pack's matrices: they move to huge pages
                    self.layers, small_head = self._place(self.layers, self.lm_head)
                    self.embed = small_head if tied else self.embed
                    self.lm_head = small_head
                    self.small_batch = Matrices(self.layers, self.lm_head, self.small_batch_rows,
                                                self.kernel_linear())
                self.gemm = (_onednn_matrices(self.layers, self.lm_head) if self.onednn
                             else Matrices(self.layers, self.lm_head, None, F.linear))
            self.key = key
        return self

    def for_batch(self, batch: int) -> Matrices:
        """What a decode step over `batch` sequences reads and multiplies with (prefill always reads `gemm`)."""
        if self.small_batch is not None and batch <= self.small_batch.max_rows:
            return self.small_batch
        return self.gemm
