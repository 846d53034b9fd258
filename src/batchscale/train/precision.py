"""The arithmetic dtype of training: bf16 autocast over float32 master weights where the hardware computes bf16.

`optim.compute_dtype` chooses it: "float32", "bfloat16", or "auto" = bfloat16 where bf16 matmuls run natively (a CPU
with AVX512-BF16 or AMX-BF16, a CUDA device that supports bf16: `device.native_bf16`), else float32. On a
CPU without native bf16 torch emulates bf16 matmuls, many times slower than float32, so "auto" never picks it there.

bfloat16 is mixed precision (Micikevicius et al. 2018) under `torch.autocast`: the forward's matmuls (linear layers,
attention) run in bf16, while parameters, their gradients and the Adam state stay float32 (the model is loaded in
`model.dtype`, float32 by default), so every update is applied to float32 master weights. Log-probs, the losses and the
reductions run in float32 (`policy.forward.token_logprobs` upcasts the logits). Departure from the paper's recipe: bf16
has float32's exponent range, so no loss scaling. A model loaded in bf16 (`model.dtype = "bfloat16"`) has no float32
master weights; it trains in bf16 whatever "auto" says (config rejects asking for float32 arithmetic on it).
"""

from __future__ import annotations

import contextlib

import torch

from batchscale.device import native_bf16

COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_training_dtype(name: str, model_dtype: torch.dtype, device_type: str) -> torch.dtype:
    """The training arithmetic dtype for `optim.compute_dtype` = name."""
    if model_dtype == torch.bfloat16:  # no float32 master weights to autocast from
        return torch.bfloat16
    if name == "auto":
        return torch.bfloat16 if native_bf16(device_type) else torch.float32
    return COMPUTE_DTYPES[name]


def autocast(compute_dtype: torch.dtype, device_type: str):
    """The context a training forward runs in: bf16 autocast, or nothing for float32."""
    if compute_dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=compute_dtype)
