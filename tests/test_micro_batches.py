"""Execution choices in `policy.forward` and `train.micro_batches` change no value: the LM head on response positions
only gives the full head's log-probs, length-sorted micro-batches cover every row once, keep row order in what they
return, and compute fewer padded positions."""

from __future__ import annotations

import copy

import pytest
import torch

from batchscale.config import ModelConfig, TaskConfig
from batchscale.policy.forward import lm_head_applies_alone, token_logprobs
from batchscale.policy.load import load_policy
from batchscale.policy.sequences import collate
from batchscale.train.micro_batches import forward_in_micro_batches, iter_micro_batches


@pytest.fixture(scope="module")
def policy(random_model_dir):
    return load_policy(ModelConfig(name=str(random_model_dir)), TaskConfig(), log=lambda s: None)


@pytest.fixture(scope="module")
def batch(policy):
    """Prompts and responses of different lengths, in an order that is not sorted by length."""
    tok, g = policy.tokenizer, torch.Generator().manual_seed(0)
    prompts, responses = [], []
    for i in range(10):
        prompts.append(tok(f"{i * 37}+{i}=")["input_ids"])
        length = int(torch.randint(1, 9, (1,), generator=g))
        responses.append(torch.randint(4, 20, (length,), generator=g).tolist() + [tok.eos_token_id])
    return collate(prompts, responses, tok.pad_token_id)


def full_head_logprobs(model, batch) -> torch.Tensor:
    """The reference: logits at every position, log-softmax over the vocabulary, the target's entry."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()  # (N, L-1, V)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return logp * batch.response_mask  # (N, L-1)


def perturbed(model, scale=0.05, seed=1):
    """A differently weighted copy, like the KL reference model after some training."""
    other = copy.deepcopy(model)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn_like(p))
    return other


@pytest.mark.parametrize("which", ["policy", "reference"])
def test_response_only_head_equals_full_head(policy, batch, which):
    model = policy.model if which == "policy" else perturbed(policy.model)
    assert lm_head_applies_alone(model)
    with torch.no_grad():
        got, expected = token_logprobs(model, batch), full_head_logprobs(model, batch)
    assert got.shape == batch.response_mask.shape
    assert torch.all(got[batch.response_mask == 0] == 0)
    assert torch.all(got[batch.response_mask > 0] < 0)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_response_only_head_gradient_equals_full_head(policy, batch):
    grads = []
    for fn in (token_logprobs, full_head_logprobs):
        model = copy.deepcopy(policy.model)
        (fn(model, batch) * torch.linspace(-1, 1, batch.response_mask.numel()).view_as(batch.response_mask)).sum().backward()
        grads.append([p.grad for p in model.parameters()])
    for got, expected in zip(*grads):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_models_that_rescale_logits_take_the_full_forward(policy, batch):
    model = copy.deepcopy(policy.model)
    model.config.final_logit_softcapping = 30.0  # Llama ignores it, so both paths must still agree
    assert not lm_head_applies_alone(model)
    with torch.no_grad():
        torch.testing.assert_close(token_logprobs(model, batch), full_head_logprobs(model, batch), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("micro_batch_size", [1, 2, 5, 10])
def test_sorted_micro_batches_cover_every_row_once_longest_first(batch, micro_batch_size):
    chunks = list(iter_micro_batches(batch, micro_batch_size))
    assert all(len(rows) == micro_batch_size for rows in chunks)
    rows = torch.cat(chunks)
    assert sorted(rows.tolist()) == list(range(len(batch)))
    lengths = batch.attention_mask.sum(dim=1)[rows]
    assert torch.all(lengths[:-1] >= lengths[1:])
    unsorted = torch.cat(list(iter_micro_batches(batch, micro_batch_size, sort_by_length=False)))
    assert unsorted.tolist() == list(range(len(batch)))


def padded_positions(batch, micro_batch_size, sort_by_length):
    return sum(batch.select(rows)[0].input_ids.numel()
               for rows in iter_micro_batches(batch, micro_batch_size, sort_by_length))


def test_sorting_computes_fewer_padded_positions(batch):
    real = int(batch.attention_mask.sum())
    assert padded_positions(batch, 10, True) == padded_positions(batch, 10, False)  # one micro-batch: nothing to gain
    assert padded_positions(batch, 1, True) == real  # one row each: no padding at all
    assert real <= padded_positions(batch, 2, True) < padded_positions(batch, 2, False)


@pytest.mark.parametrize("micro_batch_size", [1, 2, 5, 10])
def test_forward_in_micro_batches_returns_rows_in_batch_order(policy, batch, micro_batch_size):
    expected = torch.zeros(batch.response_mask.shape)  # (N, L-1): each row computed alone
    with torch.no_grad():
        for i in range(len(batch)):
            row, width = batch.rows(i, i + 1)
            expected[i, :width] = token_logprobs(policy.model, row)[0]
    got = forward_in_micro_batches(lambda mb: token_logprobs(policy.model, mb), batch, micro_batch_size)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
