"""Packing a micro-batch without padding (policy.packing) changes no value: log-probs and gradients equal the plain
padded forward's, across bins, with groups split between bins, on every model family it is enabled for; and it is
refused where a block mask would not reproduce the model's attention."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, \
    Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from batchscale.policy import packing, shared_prompts
from batchscale.policy.forward import token_logprobs
from batchscale.policy.sequences import collate

SHAPE = dict(vocab_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128, max_position_embeddings=128, pad_token_id=0, attn_implementation="sdpa")
FAMILIES = {
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**SHAPE)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**SHAPE)),
    "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(head_dim=16, **SHAPE)),
    "mistral": lambda: MistralForCausalLM(MistralConfig(sliding_window=None, **SHAPE)),
}


def ragged_batch(prompt_lengths=(5, 9, 13), group=4, seed=1):
    """Groups of `group` rows per prompt, responses of 1 to 11 tokens (a 1-token response: only the prompt's last
    state predicts it)."""
    g = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for length in prompt_lengths:
        prompt = torch.randint(4, 60, (length,), generator=g).tolist()
        for _ in range(group):
            prompts.append(prompt)
            responses.append(torch.randint(4, 60, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist())
    return collate(prompts, responses, 0)


def logprobs_and_grads(model, batch, path, monkeypatch, capacity=None):
    model = copy.deepcopy(model)
    with monkeypatch.context() as m:
        m.setattr(shared_prompts, "forward_costs", lambda *a: {"plain": 1.0, path: 0.0})
        if capacity is not None:
            m.setattr(packing, "bin_capacity", lambda body: capacity)
        logp = token_logprobs(model, batch)
    (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
    return logp.detach(), [p.grad for p in model.parameters()]


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("capacity", [None, 24, 6])  # one bin; several; groups split and prompts repeated
def test_packed_forward_equals_the_padded_one(family, capacity, monkeypatch):
    torch.manual_seed(0)
    model = FAMILIES[family]()
    assert packing.packing_supported(model.base_model)
    batch = ragged_batch()
    plain, plain_grads = logprobs_and_grads(model, batch, "plain", monkeypatch)
    packed, packed_grads = logprobs_and_grads(model, batch, "packed", monkeypatch, capacity)
    assert plain.abs().sum() > 0
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-5)
    for got, expected in zip(packed_grads, plain_grads):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_bins_hold_each_response_token_once_and_pad_only_their_tails():
    model = FAMILIES["llama"]()
    batch = ragged_batch()
    firsts, owner, prompt_lengths, response_lengths = shared_prompts.prompt_owners(batch)
    packed = packing.pack_rows(batch, firsts, owner, prompt_lengths, response_lengths, capacity=24)
    bins, width = packed.input_ids.shape
    assert bins > 1
    assert len(packed.gather) == int(batch.response_mask.sum())  # one state per response token
    is_first = [t == 0 for n in response_lengths.tolist() for t in range(n)]
    later = [g for g, first in zip(packed.gather.tolist(), is_first) if not first]
    assert len(set(later)) == len(later) == int((response_lengths - 1).sum())  # each response token once
    flat = packed.input_ids.flatten()
    assert all(flat[g] != 0 for g in packed.gather.tolist())  # ids 0 are padding here (the batch's are 4..59)
    for row in packed.input_ids.tolist():  # padding only after a bin's tokens
        real = [i for i, t in enumerate(row) if t != 0]
        assert real == list(range(len(real)))
    hidden = model.base_model(input_ids=packed.input_ids, attention_mask=packed.mask,
                              position_ids=packed.position_ids).last_hidden_state
    assert torch.isfinite(hidden).all()  # a padding token attends to itself: no empty softmax row, no NaN


def test_a_response_token_reads_its_own_prompt_and_its_own_earlier_tokens_only():
    batch = collate([[10, 11, 12], [20, 21]], [[30, 31, 32], [40, 41]], 0)
    owners = shared_prompts.prompt_owners(batch)
    packed = packing.pack_rows(batch, *owners, capacity=1000)
    assert packed.input_ids.tolist() == [[10, 11, 12, 20, 21, 30, 31, 40]]  # last response tokens left out
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 1, 3, 4, 2]]
    mask = packed.mask[0, 0].int().tolist()
    assert mask[6] == [1, 1, 1, 0, 0, 1, 1, 0]  # token 31: prompt 1 and token 30
    assert mask[7] == [0, 0, 0, 1, 1, 0, 0, 1]  # token 40: prompt 2 and itself
    assert mask[4] == [0, 0, 0, 1, 1, 0, 0, 0]  # prompt 2 never reads prompt 1
    # targets: 30 from prompt 1's last token (2), 31 and 32 from 30 and 31 (5, 6); 40 from 21 (4), 41 from 40 (7)
    assert packed.gather.tolist() == [2, 5, 6, 4, 7]


@pytest.mark.parametrize("change", ["eager", "sliding window", "other family"])
def test_packing_is_refused_where_a_block_mask_would_not_reproduce_attention(change):
    if change == "eager":
        model = LlamaForCausalLM(LlamaConfig(**{**SHAPE, "attn_implementation": "eager"}))
    elif change == "sliding window":
        model = MistralForCausalLM(MistralConfig(sliding_window=8, **SHAPE))
    else:
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=64, n_layer=2, n_head=4, n_positions=128))
    assert not packing.packing_supported(model.base_model)
    batch = ragged_batch()
    costs = shared_prompts.forward_costs(model.base_model, batch, *shared_prompts.prompt_owners(batch))
    assert "packed" not in costs
