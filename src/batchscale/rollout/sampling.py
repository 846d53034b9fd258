"""Token sampling: greedy, or temperature + nucleus (top_p) by inverse-CDF with one uniform per (sample, position).

The nucleus rule matches Hugging Face's TopPLogitsWarper: sorted by probability, a token is kept when the mass of the
tokens strictly more probable than it is below top_p (so at least one token always survives); top_k is not applied.
Temperature scales the logits before the nucleus is cut, as in HF.

Departure from HF: instead of `torch.multinomial` on whatever rows happen to share a step, each sample's token at
position t is drawn with its own uniform u[sample, t], drawn for the whole call up front. The draw therefore does not
depend on which other sequences share the decode step, so (up to float rounding at a CDF boundary) the sampled
responses do not depend on `max_concurrency`: scheduling changes execution, never the samples.

bf16 logits (the engine's bf16 decode on a CPU with native bf16) with top_p = 1 go to one native pass per row
(native.sample: the same draw on the same logits upcast to float32, without five full-size float32 tensors), and so
do float32 logits on a CPU that takes the AVX2 path (no AVX-512 one: kernels/sample_avx2.c); everything else is
computed here in torch, in float32.

Reported log-probs are those of the model itself (log_softmax of the raw logits, temperature 1, no nucleus), the
quantity a training forward pass computes with `policy.forward.token_logprobs`.
"""

from __future__ import annotations

import torch

from batchscale.rollout import native


def native_sampler(dtype: torch.dtype) -> bool:
    """Whether CPU logits of `dtype` go to native.sample here: bf16 where the "avx512_bf16" library builds; float32
    where only the "avx2" one does (the AVX2 decode path; a CPU with the AVX-512 path keeps torch's float32 sampler)."""
    if dtype == torch.bfloat16:
        return native.bf16_linear_kernel("avx512_bf16") is not None
    return (dtype == torch.float32 and native.bf16_linear_kernel("avx512_bf16") is None
            and native.bf16_linear_kernel("avx2") is not None)


def sample_tokens(logits: torch.Tensor, uniforms: torch.Tensor | None, temperature: float, top_p: float):
    """logits (B, V) float32 (or bf16); uniforms (B,) in [0, 1), or None for greedy. Returns tokens (B,) and their
    log-probs (B,)."""
    if logits.device.type == "cpu" and (top_p >= 1.0 or uniforms is None) and native_sampler(logits.dtype):
        return native.sample(logits, uniforms, temperature if uniforms is not None else 1.0)
    logits = logits.float()
    if uniforms is None:
        tokens = logits.argmax(dim=-1)  # (B,)
    else:
        probs = torch.softmax(logits / temperature, dim=-1)  # (B, V)
        order = None
        if top_p < 1.0:
            probs, order = probs.sort(dim=-1, descending=True)
            mass_before = probs.cumsum(dim=-1) - probs  # (B, V) mass of strictly more probable tokens
            probs = probs.masked_fill(mass_before >= top_p, 0.0)
        cdf = probs.cumsum(dim=-1)  # (B, V)
        targets = (uniforms.to(cdf.dtype) * cdf[:, -1])[:, None]  # (B, 1)
        index = torch.searchsorted(cdf, targets, right=True).clamp_(max=cdf.shape[-1] - 1)  # (B, 1)
        tokens = (order.gather(-1, index) if order is not None else index)[:, 0]  # (B,)
    logprobs = logits.gather(-1, tokens[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)  # (B,)
    return tokens, logprobs
