"""Analytical roofline for decode and training: FLOPs, bytes, latency lower bound, bound type, KV-cache capacity.

Follows the per-layer analysis in the paper's appendix (generation-training asymmetry). Notation: B active sequences
(decode) or local batch (training), L context length, W = one layer's matmul weights (models.ModelShape.layer_params),
n_layers, h = hidden, V = vocab, d_q = heads * head_dim, d_kv = kv_heads * head_dim, s = bytes per element
(dtype_bytes, bf16 = 2).

Decode step (each of B sequences emits one token, attending over a KV cache of length L):
- layer FLOPs = 2 * B * W  +  4 * B * L * d_q      (matmuls; q.K^T and attn.V over L positions for every query head)
- layer bytes = s * W  +  B * 2 * L * d_kv * s     (weights read once per step, shared by all B; each sequence's K and V)
- model = n_layers * layer + LM head: FLOPs 2 * B * h * V, bytes s * h * V (+ s * B * h for the embedding-row gather)
- tokens/s = B / model_s

Training proxy (local batch B sequences of length L, T = B * L tokens, forward + backward = 3x forward):
- layer FLOPs = 3 * (2 * T * W  +  4 * B * L^2 * d_q)   (the 6 * params * tokens rule plus attention; causal masking is
  not credited, as in the PaLM MFU convention)
- layer bytes = 3 * s * W  +  2 * s * T * A,  A = 4h + 2 d_q + 2 d_kv + 3 * intermediate
  Simplification: weights are read in the forward pass, read again in the backward pass and their gradient written once
  (3 s W); every matmul's input and output activation (A elements per token) is written in the forward pass and read back
  in the backward pass (2 s T A). Attention scores are never materialized (flash attention), norms/elementwise ops fuse
  into the matmuls, optimizer-state traffic and recomputation are ignored.
- model = n_layers * layer + LM head: FLOPs 3 * 2 * T * h * V, bytes 3 s h V + 2 s T (h + V) (logits written and read)
- tokens/s = T / model_s

Latency lower bound = max(FLOPs / peak, bytes / bandwidth); the bound is "compute" when the FLOP term dominates, else
"memory". Ridge point = peak / bandwidth FLOP/byte: a kernel whose FLOPs/bytes is above it is compute-bound.

KV-cache capacity: kv_bytes_per_seq = 2 * n_layers * L * d_kv * s; the largest active batch that fits is
floor((memory * mem_util - s * params) / kv_bytes_per_seq), 0 when the weights alone do not fit. Activations and the
runtime's workspace are not subtracted beyond what (1 - mem_util) leaves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchscale.errors import UserError
from batchscale.systems.hardware import Hardware
from batchscale.systems.model_shapes import ModelShape


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.flops + other.flops, self.bytes + other.bytes)

    def scale(self, factor: float) -> "Cost":
        return Cost(self.flops * factor, self.bytes * factor)


def count_decode_layer(shape: ModelShape, batch: int, context: int, dtype_bytes: int = 2) -> Cost:
    """One transformer block, one decode step: B new tokens, each attending over L cached positions."""
    flops = 2 * batch * shape.layer_params + 4 * batch * context * shape.q_dim
    kv_read_bytes = batch * 2 * context * shape.kv_dim * dtype_bytes
    return Cost(flops, dtype_bytes * shape.layer_params + kv_read_bytes)


def count_decode_model(shape: ModelShape, batch: int, context: int, dtype_bytes: int = 2) -> Cost:
    """All blocks plus the LM head (and the embedding-row gather) for one decode step."""
    head = Cost(
        2 * batch * shape.hidden_size * shape.vocab_size,
        dtype_bytes * (shape.embedding_params + batch * shape.hidden_size),
    )
    return count_decode_layer(shape, batch, context, dtype_bytes).scale(shape.num_layers) + head


def count_activation_elements_per_token(shape: ModelShape) -> int:
    """Inputs and outputs of a block's matmuls per token (shared inputs counted once): the A of the docstring."""
    return 4 * shape.hidden_size + 2 * shape.q_dim + 2 * shape.kv_dim + 3 * shape.intermediate_size


def count_train_layer(shape: ModelShape, batch: int, context: int, dtype_bytes: int = 2) -> Cost:
    """One transformer block, one forward+backward over B sequences of length L."""
    tokens = batch * context
    forward_flops = 2 * tokens * shape.layer_params + 4 * batch * context**2 * shape.q_dim
    weight_bytes = 3 * dtype_bytes * shape.layer_params
    activation_bytes = 2 * dtype_bytes * tokens * count_activation_elements_per_token(shape)
    return Cost(3 * forward_flops, weight_bytes + activation_bytes)


def count_train_model(shape: ModelShape, batch: int, context: int, dtype_bytes: int = 2) -> Cost:
    """All blocks plus the LM head for one forward+backward."""
    tokens = batch * context
    head = Cost(
        3 * 2 * tokens * shape.hidden_size * shape.vocab_size,
        3 * dtype_bytes * shape.embedding_params + 2 * dtype_bytes * tokens * (shape.hidden_size + shape.vocab_size),
    )
    return count_train_layer(shape, batch, context, dtype_bytes).scale(shape.num_layers) + head


def bound_latency(cost: Cost, hardware: Hardware) -> tuple[float, str]:
    """Roofline lower bound on time and which resource binds: max(FLOPs / peak, bytes / bandwidth)."""
    compute_s = cost.flops / hardware.peak_flops_per_s
    memory_s = cost.bytes / hardware.bandwidth_bytes_per_s
    return (compute_s, "compute") if compute_s >= memory_s else (memory_s, "memory")


def _summarize(layer: Cost, model: Cost, tokens: int, hardware: Hardware) -> dict:
    layer_s, layer_bound = bound_latency(layer, hardware)
    model_s, bound = bound_latency(model, hardware)
    return {
        "layer_s": layer_s,
        "model_s": model_s,
        "tokens_per_s": tokens / model_s,
        "bound": bound,
        "layer_bound": layer_bound,
        "layer_flops": layer.flops,
        "layer_bytes": layer.bytes,
        "flops": model.flops,
        "bytes": model.bytes,
        "intensity_flops_per_byte": model.flops / model.bytes,
    }


def estimate_decode(shape: ModelShape, hardware: Hardware, batch: int, context: int, dtype_bytes: int = 2) -> dict:
    """Decode step at active batch B and context L: per-layer and model latency bound, tokens/s, bound type."""
    layer = count_decode_layer(shape, batch, context, dtype_bytes)
    model = count_decode_model(shape, batch, context, dtype_bytes)
    return _summarize(layer, model, batch, hardware)


def estimate_train(shape: ModelShape, hardware: Hardware, batch: int, context: int, dtype_bytes: int = 2) -> dict:
    """Training step (forward+backward) at local batch B of length-L sequences: latency bound, tokens/s, bound."""
    layer = count_train_layer(shape, batch, context, dtype_bytes)
    model = count_train_model(shape, batch, context, dtype_bytes)
    return _summarize(layer, model, batch * context, hardware)


def count_kv_bytes_per_sequence(shape: ModelShape, context: int, dtype_bytes: int = 2) -> int:
    """K and V for every layer at context L: 2 * n_layers * L * d_kv * s."""
    return 2 * shape.num_layers * context * shape.kv_dim * dtype_bytes


def compute_kv_max_batch(
    shape: ModelShape, hardware: Hardware, context: int, dtype_bytes: int = 2, mem_util: float = 0.9
) -> int:
    """Largest active batch whose KV cache at context L fits in memory * mem_util after the weights (0 if none)."""
    free_bytes = hardware.memory_bytes * mem_util - dtype_bytes * shape.params
    if not math.isfinite(free_bytes) or free_bytes <= 0:
        return 0
    return int(free_bytes // count_kv_bytes_per_sequence(shape, context, dtype_bytes))


def validate_roofline_inputs(shape: ModelShape, context: int, batches: list[int], dtype_bytes: int, mem_util: float):
    """Raise UserError on inputs the formulas cannot honour, before computing anything."""
    if context < 1:
        raise UserError("context", f"must be >= 1, got {context}", "pass --context with a positive token count")
    if context > shape.max_positions:
        raise UserError(
            "context", f"{context} exceeds {shape.name}'s max positions {shape.max_positions}",
            f"pass --context <= {shape.max_positions}",
        )
    if not batches:
        raise UserError("batches", "is empty", "pass a comma list such as 1,2,4,8")
    for batch in batches:
        if batch < 1:
            raise UserError("batches", f"every batch must be >= 1, got {batch}", "pass positive integers, e.g. 1,2,4,8")
    if dtype_bytes not in (1, 2, 4):
        raise UserError("dtype_bytes", f"must be 1, 2 or 4, got {dtype_bytes}", "use 2 for bf16/fp16, 4 for fp32")
    if not 0 < mem_util <= 1:
        raise UserError("mem_util", f"must be in (0, 1], got {mem_util}", "pass a fraction such as 0.9")


def build_roofline(
    shape: ModelShape, hardware: Hardware, context: int, batches: list[int], dtype_bytes: int = 2,
    mem_util: float = 0.9,
) -> dict:
    """The `batchscale roofline` result: one row per batch with decode and training bounds, plus KV capacity."""
    validate_roofline_inputs(shape, context, batches, dtype_bytes, mem_util)
    kv_max_batch = compute_kv_max_batch(shape, hardware, context, dtype_bytes, mem_util)
    rows = [
        {
            "batch": batch,
            "kv_fits": batch <= kv_max_batch,
            "decode": estimate_decode(shape, hardware, batch, context, dtype_bytes),
            "train": estimate_train(shape, hardware, batch, context, dtype_bytes),
        }
        for batch in batches
    ]
    return {
        "model": shape.name,
        "hardware": hardware.name,
        "context": context,
        "rows": rows,
        "kv_max_batch": kv_max_batch,
        "kv_bytes_per_seq": count_kv_bytes_per_sequence(shape, context, dtype_bytes),
        "weights_bytes": dtype_bytes * shape.params,
        "params": shape.params,
        "dtype_bytes": dtype_bytes,
        "mem_util": mem_util,
        "ridge_flops_per_byte": hardware.ridge_flops_per_byte,
        "hardware_spec": hardware.to_dict(),
        "model_shape": shape.to_dict(),
    }
