"""A decode loop for Hugging Face Llama-style models over packed weights, with a preallocated per-slot KV cache.

The engine (engine.py) owns scheduling; this module owns the arithmetic. It reads the model's weights through a
`PackedWeights` (weights.py: q/k/v and gate/up fused, in the compute dtype), refreshed by `sync()` at the start of
every generate call, so an optimizer step on the policy is seen by the next call. It re-implements what Hugging Face's
`LlamaDecoderLayer` computes: RMSNorm, rotary embeddings (the model's own tables), attention over the KV cache, the
gated MLP.

Where a bf16 model decodes in bf16 on a CPU with AVX512-BF16 (weights.kernel_candidates offers "avx512_bf16"), a
decode step instead makes one native call per small op (`_fused_layers`: residual add + RMSNorm, RoPE, attention over
each row's own cached positions, silu * up; kernels/decode_avx512.c) and multiplies with the AVX512-BF16 kernel up to
the plan's row count (there a whole layer is one call), torch's bf16 GEMM over pre-packed matrices above
(weights.onednn_linear, also for prefill). It departs from HF's bf16 arithmetic in rounding only:
each fused op rounds its float32 result once to bf16, where torch rounds after every elementwise op.
The float32 kernels ("avx2": a bf16 model decoded in float32; "f32" and "f32_avx512": a float32 model, 8 or 16 lanes)
take the same route in float32 (kernels/decode_avx2.c): one call per layer up to the plan's row count, the fused
small ops around torch's float32 GEMM above; the result is torch's float32 decode up to summation order.
Which kernel, how it walks the weights and up to how many sequences is the decode plan: timed at the first `sync` and
cached per CPU and model shape (tuning.py), or set by `use_plan`; `probe_step` is what the timing runs.

The cache is one (slots, kv_heads, length, head_dim) tensor per layer for keys and one for values, allocated once and
grown only when a call needs more slots or a longer context. A row of the cache belongs to one sequence while it
decodes; `move_row` lets the scheduler keep the active rows contiguous (rows 0..B-1), so a decode step works on a
view of the cache, never a gathered copy.

Supported: decoder-only models whose layers look like Llama's (llama, qwen2 with q/k/v biases, qwen3 with q/k norms,
mistral without a sliding window), a gated MLP, and static RoPE. Anything else raises a UserError naming the `hf`
backend as the way out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

from batchscale.errors import UserError
from batchscale.rollout import native, tuning
from batchscale.rollout.weights import (KERNEL_LINEAR, LayerWeights, Matrices, PackedWeights, kernel_candidates,
                                        resolve_gemm, resolve_generation_dtype)

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def check_supported(model) -> None:
    config = model.config
    fix = "set rollout.backend = 'hf' (Hugging Face generate) for this model"
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise UserError("rollout.backend", f"the engine supports {', '.join(SUPPORTED_MODEL_TYPES)} models, "
                        f"not {config.model_type!r}", fix)
    if "sliding_attention" in (getattr(config, "layer_types", None) or []) or (
        config.model_type == "mistral" and getattr(config, "sliding_window", None)
    ):
        raise UserError("rollout.backend", "the engine does not implement sliding-window attention", fix)
    rope_type = getattr(model.model.rotary_emb, "rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        raise UserError("rollout.backend", f"the engine supports static RoPE ({', '.join(STATIC_ROPE_TYPES)}), "
                        f"not {rope_type!r}", fix)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class SlotDecoder:
    """Prefill and decode over cache rows. Tensors are on the model's device; logits come back in float32.

    `compute_dtype` ("auto", "model" or "float32"; see weights.resolve_generation_dtype) is the dtype of the packed
    weights, the activations and the KV cache."""

    def __init__(self, model, compute_dtype: str = "auto"):
        check_supported(model)
        self.model, self.body = model, model.model
        config = model.config
        attn = self.body.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads or self.num_heads
        self.scaling = getattr(attn, "scaling", self.head_dim**-0.5)
        self.gqa = self.num_heads != self.num_kv_heads
        self.eps = config.rms_norm_eps
        self.act = F.silu if config.hidden_act == "silu" else ACT2FN[config.hidden_act]
        weight = self.body.embed_tokens.weight
        self.dtype = resolve_generation_dtype(compute_dtype, weight.dtype, weight.device)
        self.kernels = kernel_candidates(compute_dtype, weight.dtype, self.dtype, weight.device)  # [(kernel, rows)]
        kernel, rows = self.kernels[0] if self.kernels else (None, 0)
        self.packed = PackedWeights(self.dtype, rows, kernel,
                                    onednn=resolve_gemm(compute_dtype, self.dtype, weight.device))
        self.plan: tuning.DecodePlan | None = None  # the timed choice among the kernels' plans, made at the first sync
        tuning.tuning_mode()  # a bad BATCHSCALE_DECODE_TUNING fails here, before any compute
        # the native kernels' decode: the fused small ops of kernels/decode_avx512.c (bf16 on a CPU with native bf16)
        # or kernels/decode_avx2.c (float32 arithmetic, bf16 or float32 matrices); not for qwen3's q/k norms or a gate
        # activation other than silu, which keep the torch path
        self.fused = (kernel is not None and config.hidden_act == "silu"
                      and getattr(attn, "q_norm", None) is None)
        self.bf16_matrices = kernel in ("avx2", "avx512_bf16")  # what the small-batch matrices hold
        self._pointers, self._pointer_key = [], None  # native.layer_pointers of the current pack (fused path)
        self.weights = None
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.slots = self.length = 0
        self.cos = self.sin = None  # (length, head_dim) rotary tables, position-indexed

    @property
    def device(self):
        return self.body.embed_tokens.weight.device

    def sync(self) -> None:
        """Read the model's current weights (re-packs only what an optimizer step changed since the last call). The
        first call also settles how small steps decode (tuning.choose_plan: a cached or freshly timed plan)."""
        self.weights = self.packed.current(self.model)
        if self.plan is None and self.fused and self.packed.kernel is not None:
            self.use_plan(tuning.choose_plan(self))

    def use_plan(self, plan: tuning.DecodePlan) -> None:
        """Decode small steps as `plan` says from now on (before the first sync: no timing happens)."""
        self.plan = plan
        self.packed.use(plan.kernel, plan.walk, plan.small_batch_rows)

    def reserve(self, slots: int, length: int) -> None:
        """Make the cache hold at least `slots` rows of `length` positions (reallocates only to grow)."""
        if slots > self.slots or length > self.length:
            self.slots, self.length = max(slots, self.slots), max(length, self.length)
            shape = (self.slots, self.num_kv_heads, self.length, self.head_dim)
            layers = len(self.body.layers)
            self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(layers)]
            self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(layers)]
            positions = torch.arange(self.length, device=self.device)[None]  # (1, length)
            dummy = torch.zeros((), dtype=self.dtype, device=self.device)
            cos, sin = self.body.rotary_emb(dummy, positions)  # (1, length, head_dim), the model's own RoPE
            self.cos, self.sin = cos[0], sin[0]

    def drop_cache(self) -> None:
        """Free the cache (the next reserve allocates what it asks for): after tuning.py's probes, so their 16 rows
        do not stay with a decoder that decodes one sequence at a time."""
        self.keys, self.values, self.slots, self.length = [], [], 0, 0

    def move_row(self, src: int, dst: int, length: int) -> None:
        """Copy one sequence's cache (its first `length` positions) from row src to row dst."""
        for cache in (*self.keys, *self.values):
            cache[dst, :, :length] = cache[src, :, :length]

    def copy_rows(self, src: torch.Tensor, dst: torch.Tensor, length: int) -> None:
        """Copy the first `length` positions of rows src (K,) into rows dst (K,): a shared prompt's cache."""
        for cache in (*self.keys, *self.values):
            cache[dst, :, :length] = cache[src, :, :length]

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, self.eps)

    def _project(self, w: LayerWeights, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, linear=F.linear):
        """q (B, H, L, D), k and v (B, H_kv, L, D) for x (B, L, d), RoPE applied to q and k (one pass over both:
        they are adjacent in the fused projection). cos, sin broadcast against (B, L, heads, D)."""
        batch, width = x.shape[:2]
        heads, dim = self.num_heads + self.num_kv_heads, self.head_dim
        qkv = linear(self._norm(x, w.input_norm), w.qkv, w.qkv_bias)  # (B, L, (H + 2 H_kv) D)
        qk = qkv[..., : heads * dim].view(batch, width, heads, dim)
        v = qkv[..., heads * dim:].view(batch, width, self.num_kv_heads, dim)
        if w.q_norm is not None:  # qwen3: RMSNorm over each head before RoPE
            q, k = qk.split((self.num_heads, self.num_kv_heads), dim=2)
            qk = torch.cat((self._norm(q, w.q_norm), self._norm(k, w.k_norm)), dim=2)
        qk = qk * cos + rotate_half(qk) * sin
        q, k = qk.split((self.num_heads, self.num_kv_heads), dim=2)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _mlp(self, w: LayerWeights, x: torch.Tensor, linear=F.linear) -> torch.Tensor:
        gate, up = linear(self._norm(x, w.post_norm), w.gate_up, w.gate_up_bias).chunk(2, dim=-1)
        return linear(self.act(gate) * up, w.down, w.down_bias)

    def _logits(self, hidden: torch.Tensor, lm_head: torch.Tensor, linear=F.linear) -> torch.Tensor:
        return linear(self._norm(hidden, self.weights.final_norm), lm_head, None).float()  # (B, V)

    def prefill(self, rows: torch.Tensor, input_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Run right-padded prompts (B, L) into cache rows `rows` (B,); return each prompt's last-token logits (B, V).

        A prompt attends only to itself, so attention uses the fresh keys with a causal mask (right padding keeps every
        real query's keys real); the cache is written for later decode steps. Padded positions write garbage past a
        prompt's end, which its own decode steps overwrite before they ever attend to it.
        """
        batch, width = input_ids.shape
        cos, sin = self.cos[:width, None], self.sin[:width, None]  # (L, 1, D)
        matrices = self.weights.gemm
        linear = matrices.linear
        x = F.embedding(input_ids, self.weights.embed)  # (B, L, d)
        for w, key_cache, value_cache in zip(matrices.layers, self.keys, self.values):
            q, k, v = self._project(w, x, cos, sin, linear)
            key_cache[rows, :, :width] = k
            value_cache[rows, :, :width] = v
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling, enable_gqa=self.gqa)
            x = x + linear(out.transpose(1, 2).reshape(batch, width, -1), w.o, w.o_bias)  # (B, L, d)
            x = x + self._mlp(w, x, linear)
        last = x[torch.arange(batch, device=x.device), lengths - 1]  # (B, d)
        return self._logits(last, matrices.lm_head, linear)

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token for each of rows 0..B-1: tokens (B,) at positions (B,). Returns next-token logits (B, V): float32,
        or bf16 on the bf16 fused path."""
        if self.fused:
            return self._decode_fused(tokens, positions)
        batch = tokens.shape[0]
        context = int(positions.max()) + 1
        rows = torch.arange(batch, device=tokens.device)
        cos, sin = self.cos[positions][:, None, None], self.sin[positions][:, None, None]  # (B, 1, 1, D)
        mask = (torch.arange(context, device=tokens.device) <= positions[:, None])[:, None, None]  # (B, 1, 1, ctx)
        matrices = self.weights.for_batch(batch)  # the bf16 kernel's at a few sequences
        layers, lm_head, linear = matrices.layers, matrices.lm_head, matrices.linear
        x = F.embedding(tokens[:, None], self.weights.embed)  # (B, 1, d)
        for w, key_cache, value_cache in zip(layers, self.keys, self.values):
            q, k, v = self._project(w, x, cos, sin, linear)
            key_cache[rows, :, positions] = k[:, :, 0]  # (B, H_kv, D)
            value_cache[rows, :, positions] = v[:, :, 0]
            keys, values = key_cache[:batch, :, :context], value_cache[:batch, :, :context]  # (B, H_kv, ctx, D)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scaling,
                                                 enable_gqa=self.gqa)  # (B, H, 1, D)
            x = x + linear(out.transpose(1, 2).reshape(batch, 1, -1), w.o, w.o_bias)
            x = x + self._mlp(w, x, linear)
        return self._logits(x[:, 0], lm_head, linear)

    def _decode_fused(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """decode() with one native call per small op (rollout/native.py): what a layer computes is the same; in bf16
        each op's result is rounded once to bf16, in float32 only the summation order differs. The residual add is
        fused into the next RMSNorm. The logits are the LM head's own output (bf16 ones go to sampling's native
        pass)."""
        matrices = self.weights.for_batch(tokens.shape[0])
        x = F.embedding(tokens, self.weights.embed)  # (B, d), updated in place by add_rms_norm
        delta = self._fused_layers(x, matrices, positions.contiguous())
        return matrices.linear(native.add_rms_norm(x, delta, self.weights.final_norm, self.eps), matrices.lm_head, None)

    def probe_step(self, batch: int, small: bool, layer_count: int, head: bool = True) -> None:
        """The first `layer_count` layers of a decode step of `batch` sequences (and the LM head), through the
        kernel's one-call layers (`small`) or the GEMM path: what tuning.py times. Writes cache rows 0..batch-1 at
        position 31, so call it only while no row holds a prompt (before a generate call's schedule starts)."""
        self.reserve(batch, 32)
        matrices = self.weights.small_batch if small else self.weights.gemm
        x = F.embedding(torch.zeros(batch, dtype=torch.long), self.weights.embed)  # (B, d)
        delta = self._fused_layers(x, matrices, torch.full((batch,), 31), layer_count)
        if head:
            matrices.linear(native.add_rms_norm(x, delta, self.weights.final_norm, self.eps), matrices.lm_head, None)

    def _fused_layers(self, x: torch.Tensor, matrices: Matrices, positions: torch.Tensor,
                      layer_count: int | None = None) -> torch.Tensor:
        """The layers (the first `layer_count`) of a fused decode step for rows 0..B-1 of x (B, d) at positions (B,):
        x updated in place, the last layer's MLP output (B, d) returned, not yet added to x."""
        batch, heads, kv_heads, dim = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        rows, lengths = torch.arange(batch), positions + 1  # (B,) cache positions each row attends to
        layers, linear = matrices.layers[:layer_count], matrices.linear
        if matrices is self.weights.small_batch:  # a few sequences: each layer is one native call (same ops, order)
            return self._decode_layers(x, layers, positions, lengths)
        delta = None  # the previous layer's MLP output, added to x by the next norm
        for w, key_cache, value_cache in zip(layers, self.keys, self.values):
            qkv = linear(native.add_rms_norm(x, delta, w.input_norm, self.eps), w.qkv, w.qkv_bias)  # (B, (H+2H_kv)D)
            native.rope(qkv, self.cos, self.sin, positions, heads + kv_heads)
            kv = qkv[:, heads * dim:].view(batch, 2, kv_heads, dim)
            key_cache[rows, :, positions] = kv[:, 0]  # (B, H_kv, D)
            value_cache[rows, :, positions] = kv[:, 1]
            out = native.attention(qkv, heads, key_cache, value_cache, lengths, self.scaling)  # (B, H D)
            hidden = native.add_rms_norm(x, linear(out, w.o, w.o_bias), w.post_norm, self.eps)  # (B, d)
            delta = linear(native.silu_mul(linear(hidden, w.gate_up, w.gate_up_bias)), w.down, w.down_bias)
        return delta

    def _decode_layers(self, x: torch.Tensor, layers, positions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Each of `layers` (the small-batch set's, or its first few) through native.decode_layer; returns the last
        one's MLP output (B, d), not yet added to x."""
        small_batch = self.weights.small_batch.layers
        if self._pointer_key != (self.packed.key, id(small_batch)):  # re-made after every re-pack
            self._pointers = [native.layer_pointers(w) for w in small_batch]
            self._pointer_key = (self.packed.key, id(small_batch))
        batch, d = x.shape
        heads, kv_heads, dim = self.num_heads, self.num_kv_heads, self.head_dim
        ffn = layers[0].down.shape[1]
        shape = torch.tensor([d, heads, kv_heads, dim, ffn, self.length])
        scratch = torch.empty(batch * (2 * d + (2 * heads + 2 * kv_heads) * dim + 3 * ffn), dtype=x.dtype)
        delta = torch.empty_like(x)
        for i, (pointers, key_cache, value_cache) in enumerate(zip(self._pointers[: len(layers)], self.keys,
                                                                   self.values)):
            native.decode_layer(x, delta if i else None, pointers, key_cache, value_cache, self.cos, self.sin,
                                positions, lengths, scratch, delta, shape, self.eps, self.scaling, self.bf16_matrices,
                                self.packed.walk, KERNEL_LINEAR[self.packed.kernel][0])
        return delta
