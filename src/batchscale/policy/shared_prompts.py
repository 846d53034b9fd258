"""The training forward with each distinct prompt computed once: the G responses of a GRPO group share one prompt.

A micro-batch's rows are prompt + response. When several rows carry the same prompt (a group's G samples), the body
runs on each distinct prompt once, with the KV cache on, and the responses then run on top of that cache, each row
reading its own prompt's keys and values (gathered by row; autograd sums their gradients back into the one prompt
forward). The values equal the plain forward's up to float rounding: every token sees the same keys at the same
positions. Prompts are left-padded to the longest distinct prompt (padding masked, positions counted from each
prompt's first token) and responses right-padded to the longest response, so this costs U * L_prompt + n * L_response
token positions (U distinct prompts among n rows) against n * L for the plain forward. With a 40-token chat prompt,
G = 4 and 16-token responses that is ~2x fewer positions. `response_hidden_states` takes whichever of the plain forward,
this one and the packed one (`policy.packing`: no padding at all) costs the fewest FLOPs by `forward_costs`.

This is the one place training talks to the model's KV cache; it uses only what every Hugging Face decoder's forward
takes (`position_ids`, a KV cache, a 2-D `attention_mask` over past + new tokens) and `DynamicCache`'s own
`batch_select_indices`.
"""

from __future__ import annotations

import inspect
from functools import lru_cache

import torch
from transformers.cache_utils import DynamicCache

from batchscale.policy.packing import layer_costs, packed_hidden_states, packing_cost, packing_supported


def prompt_owners(batch) -> tuple[list[int], list[int], torch.Tensor, torch.Tensor]:
    """(first row of each distinct prompt, each row's distinct-prompt index, prompt lengths (n,), response lengths
    (n,))."""
    response_lengths = batch.response_mask.sum(dim=1).long()  # (n,)
    prompt_lengths = batch.attention_mask.sum(dim=1) - response_lengths  # (n,)
    index: dict[tuple, int] = {}
    firsts, owner = [], []
    for row, (ids, length) in enumerate(zip(batch.input_ids.tolist(), prompt_lengths.tolist())):
        key = tuple(ids[:length])
        if key not in index:
            index[key] = len(firsts)
            firsts.append(row)
        owner.append(index[key])
    return firsts, owner, prompt_lengths, response_lengths


@lru_cache(maxsize=None)
def _forward_takes_cache(forward_cls: type) -> bool:
    return "cache" in inspect.signature(forward_cls.forward).parameters


def cache_keyword(body) -> str:
    """The keyword the body's forward takes a KV cache under: "cache" in recent transformers, "past_key_values" in
    earlier 5.x releases (deprecated since)."""
    return "cache" if _forward_takes_cache(type(body)) else "past_key_values"


def response_hidden_states(body, batch, positions: torch.Tensor) -> torch.Tensor:
    """(M, H) the body's last hidden state at the M target positions of `positions` (N, L - 1), row-major: the state
    that predicts each response token. Runs whichever forward the cost model counts cheapest (`forward_costs`): the
    plain one, each distinct prompt once under a KV cache, or prompts and responses packed without padding
    (`policy.packing`, where the model's attention allows it)."""
    firsts, owner, prompt_lengths, response_lengths = prompt_owners(batch)
    if int(response_lengths.max()) == 0:
        out = body(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
        return out.last_hidden_state[:, :-1][positions]  # (M, H)
    costs = forward_costs(body, batch, firsts, owner, prompt_lengths, response_lengths)
    chosen = min(costs, key=costs.get)
    if chosen == "packed":
        return packed_hidden_states(body, batch, firsts, owner, prompt_lengths, response_lengths)
    if chosen == "shared":
        return shared_prompt_hidden_states(body, batch, firsts, owner, prompt_lengths, response_lengths)
    out = body(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    return out.last_hidden_state[:, :-1][positions]  # (M, H)


def forward_costs(body, batch, firsts: list[int], owner: list[int], prompt_lengths: torch.Tensor,
                  response_lengths: torch.Tensor) -> dict[str, float]:
    """Forward FLOPs per layer of each way to run the micro-batch (`policy.packing.layer_costs`): "plain" (n rows of
    width L), "shared" (U prompts of width Lp, then n responses of width Lr reading them) and, where the model allows
    it, "packed". Ties go to the first listed."""
    per_token, per_pair = layer_costs(body)
    n, length = batch.input_ids.shape
    distinct = len(firsts)
    prompt_width, response_width = int(prompt_lengths[firsts].max()), int(response_lengths.max())
    costs = {"plain": n * length * (per_token + length * per_pair)}
    if distinct < n:
        costs["shared"] = (distinct * prompt_width * (per_token + prompt_width * per_pair)
                           + n * response_width * (per_token + (prompt_width + response_width) * per_pair))
    if packing_supported(body):
        rows_of = [[row for row, u in enumerate(owner) if u == v] for v in range(distinct)]
        costs["packed"] = packing_cost(body, prompt_lengths[firsts].tolist(), response_lengths.tolist(), rows_of)
    return costs


def shared_prompt_hidden_states(body, batch, firsts: list[int], owner: list[int], prompt_lengths: torch.Tensor,
                                response_lengths: torch.Tensor) -> torch.Tensor:
    """(M, H) as `response_hidden_states`, computing each distinct prompt once."""
    device = batch.input_ids.device
    owner = torch.tensor(owner, device=device)  # (n,)
    prompt_width, response_width = int(prompt_lengths[firsts].max()), int(response_lengths.max())
    columns = torch.arange(prompt_width, device=device)  # (Lp,)
    # distinct prompts, left-padded so that every prompt ends in the last column
    starts = prompt_width - prompt_lengths[firsts]  # (U,)
    prompt_mask = (columns >= starts[:, None]).long()  # (U, Lp)
    source = (columns - starts[:, None]).clamp(min=0)  # (U, Lp) column in the batch row
    prompt_ids = batch.input_ids[firsts].gather(1, source) * prompt_mask  # (U, Lp)
    cache = DynamicCache(config=body.config)
    keyword = cache_keyword(body)
    prompt_out = body(input_ids=prompt_ids, attention_mask=prompt_mask, use_cache=True, **{keyword: cache},
                      position_ids=(prompt_mask.cumsum(dim=1) - 1).clamp(min=0))
    cache.batch_select_indices(owner)  # each row reads its own prompt's keys and values
    # responses, right-padded, at positions that continue each row's prompt
    steps = torch.arange(response_width, device=device)  # (Lr,)
    response_mask = (steps < response_lengths[:, None]).long()  # (n, Lr)
    source = (prompt_lengths[:, None] + steps).clamp(max=batch.input_ids.shape[1] - 1)  # (n, Lr)
    response_ids = batch.input_ids.gather(1, source) * response_mask  # (n, Lr)
    response_out = body(input_ids=response_ids, attention_mask=torch.cat([prompt_mask[owner], response_mask], dim=1),
                        position_ids=prompt_lengths[:, None] + steps, use_cache=True, **{keyword: cache})
    # step t's state predicts response token t: the prompt's last state for t = 0, response token t - 1's after that
    hidden = torch.cat([prompt_out.last_hidden_state[owner, -1:], response_out.last_hidden_state[:, :-1]], dim=1)
    return hidden[response_mask.bool()]  # (M, H), row-major like `positions`
