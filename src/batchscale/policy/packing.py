"""The training forward without padding: a micro-batch's prompts and responses packed end to end into a few rows.

A micro-batch of right-padded rows (prompt + response) computes every row at the longest row's width; when responses
vary in length (one hits `max_new_tokens`, the others stop early) most of that is padding. Here the tokens the
log-probs need are laid end to end instead, each distinct prompt once, in a few packed rows ("bins") of about equal
length: [prompt u1][prompt u2]...[response i1][response i2]..., with a block mask in which a prompt token attends to
the earlier tokens of its own prompt and a response token to its own prompt and the earlier tokens of its own
response, and position ids that restart with every prompt and continue into its responses. Every token therefore
sees exactly the keys, at exactly the positions, that it sees in the padded forward: the values equal it up to float
rounding (tests/test_packing.py), so this is execution only. A response's last token predicts nothing and is left out.

Cost: the matrices run on the packed tokens only, but attention runs dense over each bin (CPU SDPA has no
variable-length kernel), so a bin of T tokens costs T^2 attention pairs where its rows alone would cost the sum of
their own squares; `packing_cost` counts both, and `policy.shared_prompts.response_hidden_states` takes whichever of
the plain, shared-prompt and packed forwards its cost model says is cheapest. Bins are filled largest group first into
the least loaded one (LPT), their count set so that the dense attention adds at most about a quarter to a bin's matrix
work (`bin_capacity`).

Which models: those whose attention is exactly causal self-attention with rotary or absolute positions taken from
`position_ids` (the Llama, Qwen2/3 and Mistral families without a sliding window), running SDPA, the attention a custom
4-D boolean mask reaches unchanged (transformers' masking_utils passes a 4-D mask through as it is). Any other model
(a sliding window, ALiBi, soft-capped attention, flash-attention kernels) takes the padded forwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

PACKABLE_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
ATTENTION_SHARE = 0.25  # the most dense attention may add to a bin's matrix work, as a fraction


def packing_supported(body) -> bool:
    """Whether the body's attention is plain causal SDPA over `position_ids`, so a block mask reproduces it."""
    cfg = body.config
    return (cfg.model_type in PACKABLE_MODEL_TYPES and getattr(cfg, "_attn_implementation", None) == "sdpa"
            and getattr(cfg, "sliding_window", None) is None and not getattr(cfg, "use_sliding_window", False))


def layer_costs(body) -> tuple[float, float]:
    """(matrix FLOPs per token, attention FLOPs per query-key pair) of one layer, forward: 2 x its matrix parameters,
    and 4 x the attention width (scores and the weighted sum). Read from the config's standard names; a config that
    lacks them is costed as a 4x-MLP transformer of its width."""
    cfg = body.config
    hidden = getattr(cfg, "hidden_size", None) or body.get_input_embeddings().embedding_dim
    heads = getattr(cfg, "num_attention_heads", None) or max(1, hidden // 64)
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    intermediate = getattr(cfg, "intermediate_size", None) or 4 * hidden
    attention = hidden * head_dim * (2 * heads + 2 * kv)  # q, o; k, v
    mlp = 3 * hidden * intermediate  # gate, up, down
    return 2.0 * (attention + mlp), 4.0 * heads * head_dim


def bin_capacity(body) -> int:
    """Tokens per bin at which dense attention adds ATTENTION_SHARE to its matrix work: T^2 c_att = share T c_tok."""
    per_token, per_pair = layer_costs(body)
    return max(64, int(ATTENTION_SHARE * per_token / per_pair))


@dataclass
class PackedRows:
    """A micro-batch packed into bins: what the body runs on, and where each target's hidden state lands."""

    input_ids: torch.Tensor  # (k, T) token ids, 0 past a bin's end
    position_ids: torch.Tensor  # (k, T)
    mask: torch.Tensor  # (k, 1, T, T) bool: query attends to key
    gather: torch.Tensor  # (M,) flat index into (k * T) of the state that predicts each response token, row-major


def pack_rows(batch, firsts: list[int], owner: list[int], prompt_lengths: torch.Tensor,
              response_lengths: torch.Tensor, capacity: int) -> PackedRows:
    """Pack `batch`'s rows (distinct prompts `firsts`, each row's prompt `owner`; `policy.shared_prompts.prompt_owners`)
    into bins of about `capacity` tokens."""
    ids = batch.input_ids.tolist()
    p_len, r_len = prompt_lengths.tolist(), response_lengths.tolist()
    rows_of = [[] for _ in firsts]
    for row, u in enumerate(owner):
        rows_of[u].append(row)
    items = split_groups(rows_of, [p_len[f] for f in firsts], r_len, capacity)
    prompt_sizes = [p_len[f] for f in firsts]
    bins = assign_bins(items, capacity)
    width = max(bin_length(b, prompt_sizes) for b in bins)
    k = len(bins)
    input_ids = torch.zeros((k, width), dtype=torch.long)
    position_ids = torch.zeros((k, width), dtype=torch.long)
    segment = torch.full((k, width), -1, dtype=torch.long)  # each prompt and each response its own segment
    prompt_segment = torch.full((k, width), -1, dtype=torch.long)  # the prompt segment a token may also read
    where = {}  # row -> (bin, offset of its prompt's last token, offset of its response's first token)
    for b, contents in enumerate(bins):
        offset, segments = 0, 0
        prompt_at = {}
        for _, u, _ in contents:  # prompts first, each once per bin
            if u in prompt_at:
                continue
            n = p_len[firsts[u]]
            input_ids[b, offset:offset + n] = torch.tensor(ids[firsts[u]][:n])
            position_ids[b, offset:offset + n] = torch.arange(n)
            segment[b, offset:offset + n] = prompt_segment[b, offset:offset + n] = segments
            prompt_at[u] = (offset + n - 1, segments)
            offset, segments = offset + n, segments + 1
        for _, u, rows in contents:
            last, seg = prompt_at[u]
            for row in rows:
                n, start = r_len[row] - 1, p_len[row]  # the response's last token predicts nothing
                input_ids[b, offset:offset + n] = torch.tensor(ids[row][start:start + n])
                position_ids[b, offset:offset + n] = torch.arange(start, start + n)
                segment[b, offset:offset + n], prompt_segment[b, offset:offset + n] = segments, seg
                where[row] = (b, last, offset)
                offset, segments = offset + n, segments + 1
        segment[b, offset:] = torch.arange(segments, segments + width - offset)  # padding: each token alone
    causal = torch.ones((width, width), dtype=torch.bool).tril()  # (T, T)
    same = segment[:, :, None] == segment[:, None, :]  # (k, T, T)
    reads_prompt = prompt_segment[:, :, None] == segment[:, None, :]  # (k, T, T)
    mask = ((same | reads_prompt) & causal)[:, None]  # (k, 1, T, T)
    gather = []
    for row in range(len(owner)):
        b, last, first = where[row]
        gather.append(b * width + last)  # the prompt's last state predicts the response's first token
        gather.extend(b * width + first + t for t in range(r_len[row] - 1))
    device = batch.input_ids.device
    return PackedRows(input_ids.to(device), position_ids.to(device), mask.to(device),
                      torch.tensor(gather, dtype=torch.long, device=device))


def split_groups(rows_of: list[list[int]], prompt_sizes: list[int], response_lengths: list[int],
                 capacity: int) -> list[tuple[int, int, list[int]]]:
    """Items (tokens, prompt, rows) to bin: each prompt with its rows, split into several items (each carrying the
    prompt) where one would exceed `capacity`."""
    items = []
    for u, rows in enumerate(rows_of):
        size, taken = prompt_sizes[u], []
        for row in rows:
            need = response_lengths[row] - 1
            if taken and size + need > capacity:
                items.append((size, u, taken))
                size, taken = prompt_sizes[u], []
            size, taken = size + need, taken + [row]
        items.append((size, u, taken))
    return items


def assign_bins(items: list[tuple[int, int, list[int]]], capacity: int) -> list[list[tuple[int, int, list[int]]]]:
    """Longest-processing-time first: as many bins as the total needs at `capacity`, each item into the least loaded.
    A bin holding two items of one prompt computes that prompt once (`bin_length`; counted twice here)."""
    total = sum(size for size, _, _ in items)
    k = max(1, min(len(items), math.ceil(total / capacity)))
    bins, loads = [[] for _ in range(k)], [0] * k
    for item in sorted(items, key=lambda it: -it[0]):
        b = loads.index(min(loads))
        bins[b].append(item)
        loads[b] += item[0]
    return [b for b in bins if b]


def bin_length(contents: list[tuple[int, int, list[int]]], prompt_sizes: list[int]) -> int:
    """Tokens of one bin: its items, less the repeats of a prompt that two of them carry."""
    prompts = {u for _, u, _ in contents}
    return sum(size for size, _, _ in contents) - sum(prompt_sizes[u] for _, u, _ in contents) + sum(
        prompt_sizes[u] for u in prompts)


def packed_hidden_states(body, batch, firsts: list[int], owner: list[int], prompt_lengths: torch.Tensor,
                         response_lengths: torch.Tensor) -> torch.Tensor:
    """(M, H) the body's last hidden state at each response target, row-major, from one forward over packed bins."""
    packed = pack_rows(batch, firsts, owner, prompt_lengths, response_lengths, bin_capacity(body))
    out = body(input_ids=packed.input_ids, attention_mask=packed.mask, position_ids=packed.position_ids,
               use_cache=False)
    return out.last_hidden_state.flatten(0, 1)[packed.gather]  # (M, H)


def packing_cost(body, prompt_sizes: list[int], response_lengths: list[int], rows_of: list[list[int]]) -> float:
    """Forward FLOPs per layer of the packed bins (matrices on every bin position, attention dense per bin)."""
    per_token, per_pair = layer_costs(body)
    capacity = bin_capacity(body)
    bins = assign_bins(split_groups(rows_of, prompt_sizes, response_lengths, capacity), capacity)
    width = max(bin_length(b, prompt_sizes) for b in bins)
    return len(bins) * width * (per_token + width * per_pair)
