"""Computing each distinct prompt once per micro-batch changes no value: log-probs and gradients equal the plain
forward's, for groups of equal prompts, prompts of different lengths (left-padded), and responses of different lengths.
The packed forward (policy.packing) is held to the same here and, bin by bin, in tests/test_packing.py."""

from __future__ import annotations

import copy

import pytest
import torch

from batchscale.config import ModelConfig, TaskConfig
from batchscale.policy import forward, shared_prompts
from batchscale.policy.forward import token_logprobs
from batchscale.policy.load import load_policy
from batchscale.policy.sequences import collate


@pytest.fixture(scope="module")
def policy(random_model_dir):
    return load_policy(ModelConfig(name=str(random_model_dir)), TaskConfig(), log=lambda s: None)


def grouped_batch(tokenizer, prompts=("10+0=", "147+7=", "2841+14="), group=4, seed=0):
    """Groups of `group` rows per prompt; prompts of different lengths, responses of 1 to 8 tokens + <eos>."""
    g = torch.Generator().manual_seed(seed)
    prompt_ids, responses = [], []
    for text in prompts:
        for _ in range(group):
            prompt_ids.append(tokenizer(text)["input_ids"])
            length = int(torch.randint(1, 9, (1,), generator=g))
            responses.append(torch.randint(4, 20, (length,), generator=g).tolist() + [tokenizer.eos_token_id])
    return collate(prompt_ids, responses, tokenizer.pad_token_id)


def plain_hidden_states(body, batch, positions):
    out = body(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    return out.last_hidden_state[:, :-1][positions]


def logprobs_and_grads(model, batch, share: bool, monkeypatch):
    model = copy.deepcopy(model)
    if not share:
        monkeypatch.setattr(forward, "response_hidden_states", plain_hidden_states)
    logp = token_logprobs(model, batch)
    monkeypatch.undo()
    (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
    return logp.detach(), [p.grad for p in model.parameters()]


def test_prompt_owners_group_rows_by_prompt(policy):
    batch = grouped_batch(policy.tokenizer)
    firsts, owner, prompt_lengths, response_lengths = shared_prompts.prompt_owners(batch)
    assert firsts == [0, 4, 8] and owner == [0] * 4 + [1] * 4 + [2] * 4
    assert prompt_lengths.tolist() == [len(policy.tokenizer(t)["input_ids"]) for t in ("10+0=", "147+7=", "2841+14=")
                                       for _ in range(4)]
    assert response_lengths.tolist() == batch.response_mask.sum(dim=1).long().tolist()


def forced(path):
    """forward_costs that makes `path` the cheapest of the forwards response_hidden_states chooses among."""
    return lambda *a: {"plain": 1.0, path: 0.0}


@pytest.mark.parametrize("path", ["shared", "packed"])
@pytest.mark.parametrize("rows", [slice(0, 12), slice(2, 10), slice(2, 6)])
def test_shared_prompt_forward_equals_plain_forward(policy, monkeypatch, rows, path):
    batch = grouped_batch(policy.tokenizer)
    mb, _ = batch.select(torch.arange(12)[rows])
    calls = []
    name = {"shared": "shared_prompt_hidden_states", "packed": "packed_hidden_states"}[path]
    monkeypatch.setattr(shared_prompts, name, lambda *a, f=getattr(shared_prompts, name): calls.append(1) or f(*a))
    monkeypatch.setattr(shared_prompts, "forward_costs", forced(path))
    shared, shared_grads = logprobs_and_grads(policy.model, mb, True, monkeypatch)
    assert calls  # the path under test ran
    plain, plain_grads = logprobs_and_grads(policy.model, mb, False, monkeypatch)
    torch.testing.assert_close(shared, plain, rtol=1e-5, atol=1e-5)
    for got, expected in zip(shared_grads, plain_grads):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_without_packing_distinct_prompts_take_the_plain_forward(policy, monkeypatch):
    """A model whose attention a block mask cannot reproduce, and rows with nothing to share: the plain forward."""
    batch = grouped_batch(policy.tokenizer, prompts=("1+1=", "22+22=", "333+333="), group=1)
    monkeypatch.setattr(shared_prompts, "packing_supported", lambda body: False)
    monkeypatch.setattr(shared_prompts, "shared_prompt_hidden_states",
                        lambda *a: pytest.fail("nothing to share: the plain forward computes fewer positions"))
    with torch.no_grad():
        token_logprobs(policy.model, batch)


def test_ragged_responses_of_shared_prompts_take_the_packed_forward(policy):
    """Groups whose responses range from 1 to 8 tokens: packing drops the padding, and costs the least."""
    batch = grouped_batch(policy.tokenizer)
    costs = shared_prompts.forward_costs(policy.model.base_model, batch, *shared_prompts.prompt_owners(batch))
    assert min(costs, key=costs.get) == "packed"
    assert costs["packed"] < costs["shared"] < costs["plain"]
