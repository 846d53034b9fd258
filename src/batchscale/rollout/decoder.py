"""A decode loop over a Hugging Face Llama-style model's own modules, with a preallocated per-slot KV cache.

The engine (engine.py) owns scheduling; this module owns the arithmetic. It calls the model's modules directly
(embeddings, RMSNorms, q/k/v/o projections, MLPs, lm_head) and re-implements only the glue Hugging Face's
`LlamaDecoderLayer` does around them: rotary embeddings, the KV cache and attention. Because every weight is read
through the live modules, an optimizer step on the policy is seen by the next `generate` call with no copy.

The cache is one (slots, kv_heads, length, head_dim) tensor per layer for keys and one for values, allocated once and
grown only when a call needs more slots or a longer context. A row of the cache belongs to one sequence while it
decodes; `move_row` lets the scheduler keep the active rows contiguous (rows 0..B-1), so a decode step works on a
view of the cache, never a gathered copy.

Supported: decoder-only models whose layers look like Llama's (llama, qwen2, qwen3 with q/k norms, mistral without a
sliding window) and whose RoPE is static. Anything else raises a UserError naming the `hf` backend as the way out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from batchscale.errors import UserError

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
    """Prefill and decode over cache rows. Tensors are on the model's device; logits come back in float32."""

    def __init__(self, model):
        check_supported(model)
        self.model, self.body = model, model.model
        attn = self.body.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.num_heads = model.config.num_attention_heads
        self.num_kv_heads = model.config.num_key_value_heads or self.num_heads
        self.scaling = getattr(attn, "scaling", self.head_dim**-0.5)
        self.gqa = self.num_heads != self.num_kv_heads
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.slots = self.length = 0
        self.cos = self.sin = None  # (length, head_dim) rotary tables, position-indexed

    @property
    def device(self):
        return self.body.embed_tokens.weight.device

    @property
    def dtype(self):
        return self.body.embed_tokens.weight.dtype

    def reserve(self, slots: int, length: int) -> None:
        """Make the cache hold at least `slots` rows of `length` positions (reallocates only to grow)."""
        if slots > self.slots or length > self.length or (self.keys and self.keys[0].dtype != self.dtype):
            self.slots, self.length = max(slots, self.slots), max(length, self.length)
            shape = (self.slots, self.num_kv_heads, self.length, self.head_dim)
            layers = len(self.body.layers)
            self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(layers)]
            self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(layers)]
            positions = torch.arange(self.length, device=self.device)[None]  # (1, length)
            dummy = torch.zeros((), dtype=self.dtype, device=self.device)
            cos, sin = self.body.rotary_emb(dummy, positions)  # (1, length, head_dim), the model's own RoPE
            self.cos, self.sin = cos[0], sin[0]

    def move_row(self, src: int, dst: int, length: int) -> None:
        """Copy one sequence's cache (its first `length` positions) from row src to row dst."""
        for cache in (*self.keys, *self.values):
            cache[dst, :, :length] = cache[src, :, :length]

    def copy_rows(self, src: torch.Tensor, dst: torch.Tensor, length: int) -> None:
        """Copy the first `length` positions of rows src (K,) into rows dst (K,): a shared prompt's cache."""
        for cache in (*self.keys, *self.values):
            cache[dst, :, :length] = cache[src, :, :length]

    def _project(self, attn, h: torch.Tensor, shape: tuple[int, int]):
        """q (B, H, L, D), k and v (B, H_kv, L, D), before RoPE."""
        q = attn.q_proj(h).view(*shape, self.num_heads, self.head_dim)  # (B, L, H, D)
        k = attn.k_proj(h).view(*shape, self.num_kv_heads, self.head_dim)  # (B, L, H_kv, D)
        v = attn.v_proj(h).view(*shape, self.num_kv_heads, self.head_dim)
        if hasattr(attn, "q_norm"):  # qwen3: RMSNorm over each head before RoPE
            q, k = attn.q_norm(q), attn.k_norm(k)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.body.norm(hidden)).float()  # (B, V)

    def prefill(self, rows: torch.Tensor, input_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Run right-padded prompts (B, L) into cache rows `rows` (B,); return each prompt's last-token logits (B, V).

        A prompt attends only to itself, so attention uses the fresh keys with a causal mask (right padding keeps every
        real query's keys real); the cache is written for later decode steps. Padded positions write garbage past a
        prompt's end, which its own decode steps overwrite before they ever attend to it.
        """
        batch, width = input_ids.shape
        cos, sin = self.cos[:width], self.sin[:width]  # (L, D)
        x = self.body.embed_tokens(input_ids)  # (B, L, d)
        for layer, key_cache, value_cache in zip(self.body.layers, self.keys, self.values):
            attn = layer.self_attn
            q, k, v = self._project(attn, layer.input_layernorm(x), (batch, width))
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            key_cache[rows, :, :width] = k
            value_cache[rows, :, :width] = v
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling, enable_gqa=self.gqa)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(batch, width, -1))  # (B, L, d)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        last = x[torch.arange(batch, device=x.device), lengths - 1]  # (B, d)
        return self._logits(last)

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token for each of rows 0..B-1: tokens (B,) at positions (B,). Returns next-token logits (B, V)."""
        batch = tokens.shape[0]
        context = int(positions.max()) + 1
        rows = torch.arange(batch, device=tokens.device)
        cos, sin = self.cos[positions][:, None, None], self.sin[positions][:, None, None]  # (B, 1, 1, D)
        mask = (torch.arange(context, device=tokens.device) <= positions[:, None])[:, None, None]  # (B, 1, 1, ctx)
        x = self.body.embed_tokens(tokens[:, None])  # (B, 1, d)
        for layer, key_cache, value_cache in zip(self.body.layers, self.keys, self.values):
            attn = layer.self_attn
            q, k, v = self._project(attn, layer.input_layernorm(x), (batch, 1))
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            key_cache[rows, :, positions] = k[:, :, 0]  # (B, H_kv, D)
            value_cache[rows, :, positions] = v[:, :, 0]
            keys, values = key_cache[:batch, :, :context], value_cache[:batch, :, :context]  # (B, H_kv, ctx, D)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scaling,
                                                 enable_gqa=self.gqa)  # (B, H, 1, D)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(batch, 1, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self._logits(x[:, 0])
