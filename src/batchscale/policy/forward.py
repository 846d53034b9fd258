"""The policy's training forward: per-token log-probs of the response tokens, with the LM head on response positions.

The LM head and the log-softmax run only on the positions whose target is a response token (`token_logprobs`): prompt
and padding positions get no (M x V) logits, which at a 49k-token vocabulary is a fifth of a small model's forward FLOPs
and most of its activation memory. Rows that share a prompt (a GRPO group's G samples) run the body over that prompt
once (`policy.shared_prompts`), when that computes fewer token positions than the plain forward. Both are
execution-only: the values equal the plain forward's up to float rounding (tests/test_shared_prompts.py,
tests/test_microbatch_equivalence.py).
"""

from __future__ import annotations

import torch

from batchscale.policy.sequences import SequenceBatch
from batchscale.policy.shared_prompts import response_hidden_states


def lm_head_applies_alone(model) -> bool:
    """Whether the model's logits are exactly its output embedding applied to the body's last hidden state, so the
    head can run on a subset of positions. Families that scale or soft-cap logits after the head (Gemma 2's
    final_logit_softcapping, Cohere's logit_scale, Granite's logits_scaling) take the full forward instead."""
    cfg = model.config
    post = (getattr(cfg, name, None) for name in ("final_logit_softcapping", "logit_scale", "logits_scaling"))
    return (model.get_output_embeddings() is not None and model.base_model is not model
            and all(value in (None, 1, 1.0) for value in post))


def response_logits(model, batch: SequenceBatch, positions: torch.Tensor) -> torch.Tensor:
    """(M, V) float32 logits at the M target positions marked in `positions` (N, L - 1), in row-major order."""
    if not lm_head_applies_alone(model):
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]  # (N, L-1, V)
        return logits[positions].float()
    hidden = response_hidden_states(model.base_model, batch, positions)  # (M, H)
    return model.get_output_embeddings()(hidden).float()  # (M, V)


def token_logprobs(model, batch: SequenceBatch) -> torch.Tensor:
    """(N, L - 1) log-prob of each response token, 0 at every other position, in float32 whatever the model dtype.
    The LM head and log-softmax run on response positions only."""
    positions = batch.response_mask > 0  # (N, L-1)
    logits = response_logits(model, batch, positions)  # (M, V)
    targets = batch.input_ids[:, 1:][positions]  # (M,)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # (M,)
    return torch.zeros(positions.shape, dtype=logp.dtype, device=logp.device).masked_scatter(positions, logp)
