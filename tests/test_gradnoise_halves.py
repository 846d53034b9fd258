"""The one-run B_noise against synthetic gradient processes with a known truth (issue 38): random halves of whole groups
and the loss's own weights make it unbiased where halves by length and row counts were not.

Each step draws an update of P prompt groups of G responses and, for every response token, a gradient vector in
DIMS dimensions: G_true + a group's length-class shift (+-delta, the class also setting its responses' length) + a group
part + a response part + a token part, independent Gaussians. A linear model p whose micro-batch loss is
sum(token_weights * (p . v)) has exactly these vectors as token gradients, so the update runs through the training code
itself: `iter_gradient_chunks` (the halves drawn from the run's seed and the step, as `train.update`
draws them), `ChunkNorms`, and `noise_terms` (`telemetry.gradnoise.estimate_weighted_noise_terms`), with the losses'
own weights (`algorithms.losses.token_weights`, token-mean or sequence-mean). The truth, per step, is the update's
noise given its lengths, V = sum_i (group weight)^2 (s_group^2 + delta^2) + sum_rows (row weight)^2 s_response^2 +
sum_tokens (token weight)^2 s_token^2, so tr(Sigma) = N V and |G|^2 = |G_true|^2 (the class sign is drawn +-1 per
group, independent of the weights under sequence-mean); with token-mean and a length class the weights depend on the
class, so the truth is measured from the steps' own update gradients instead (their mean and covariance).

The split used before issue 38 is replayed beside it (`legacy_terms`: groups sorted by their longest row, the longer
half first, b and B counted in rows, McCandlish's estimators), on the same draws: it fails where the new one passes.
At 1,000 steps of seed 0 (docs/LOG.md, 2026-12-03): the new estimate 0.93-1.00x the truth in every case (the P = 4 cases
share that seed's draws; over six other seeds the no-effect case's mean |G|^2 was 0.99-1.04, +-0.027, and its
tr(Sigma) within 0.3%); the old one 1.11x / 1.49x with a class explaining 1% / 3% of the group variance at P = 4, 14.7x
at P = 16, 0.48x with token-mean 2- vs 4-token groups at P = 4 (0.70x at P = 16), 0.60x with token-mean and the class.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from batchscale.algorithms.losses import loss_normalizer, token_weights
from batchscale.policy.sequences import SequenceBatch
from batchscale.telemetry.gradnoise import estimate_noise_terms, ratio_of_means
from batchscale.train.chunk_norms import ChunkNorms
from batchscale.train.micro_batches import derive_halves_seed, iter_gradient_chunks

DIMS = 1024  # a model's gradient has millions; 1024 already concentrates the squared norms (10 ms a step here)
G = 8  # the demo's samples per prompt
SHORT, LONG = 2, 4  # response tokens of the two length classes
# variances (traces) of the group, response and token parts: a group's mean gradient under sequence-mean has
# 24 + 128 / 8 + 170.7 * E[1/L] / 8 = 48, so B_noise = G * 48 = 384 samples at |G|^2 = 1 without a class effect: the
# regime of the demo's reference (P4 x G8, B_noise ~300-400 samples)
GROUP_VAR, RESPONSE_VAR, TOKEN_VAR = 24.0, 128.0, 170.7
GROUP_MEAN_VAR = GROUP_VAR + RESPONSE_VAR / G + TOKEN_VAR * (1 / SHORT + 1 / LONG) / 2 / G
TRUE_GRAD_SQ = 1.0  # |G_true|^2
TOLERANCE = 0.25  # the issue's: each estimate within 25% of the truth


def draw_update(gen: torch.Generator, prompts: int, aggregation: str, class_share: float):
    """One update: (batch, token gradients (N, L, DIMS), the update's noise V given its lengths)."""
    rows = prompts * G
    sign = torch.randint(0, 2, (prompts,), generator=gen).float() * 2 - 1  # (P,) the length class, +-1
    lengths = torch.where(sign > 0, LONG, SHORT).repeat_interleave(G)  # (N,) the class sets the length
    delta_sq = class_share / (1 - class_share) * GROUP_MEAN_VAR  # the class's share of a group's variance
    true_grad, shift = torch.zeros(DIMS), torch.zeros(DIMS)
    true_grad[0], shift[1] = math.sqrt(TRUE_GRAD_SQ), math.sqrt(delta_sq)
    group = sign[:, None] * shift + torch.randn(prompts, DIMS, generator=gen) * math.sqrt(GROUP_VAR / DIMS)
    response = torch.randn(rows, DIMS, generator=gen) * math.sqrt(RESPONSE_VAR / DIMS)
    token = torch.randn(rows, LONG, DIMS, generator=gen) * math.sqrt(TOKEN_VAR / DIMS)
    vectors = true_grad + group.repeat_interleave(G, dim=0)[:, None] + response[:, None] + token  # (N, L, DIMS)
    response_mask = (torch.arange(LONG)[None, :] < lengths[:, None]).float()  # (N, L)
    attention = torch.cat([torch.ones(rows, 1), response_mask], dim=1).long()  # one prompt token
    batch = SequenceBatch(attention.clone(), attention, response_mask)
    weights = token_weights(response_mask, aggregation, max(loss_normalizer(response_mask, aggregation), 1.0))
    row_weights = weights.sum(dim=1)  # (N,)
    noise = float(row_weights.view(prompts, G).sum(dim=1).square().sum() * (GROUP_VAR + delta_sq)
                  + row_weights.square().sum() * RESPONSE_VAR + weights.square().sum() * TOKEN_VAR)
    return batch, vectors, noise


def update_terms(batch: SequenceBatch, vectors: torch.Tensor, aggregation: str, seed: int, step: int):
    """The training code's estimate for one update of the linear model, and its gradient g_B."""
    p = torch.zeros(DIMS, requires_grad=True)
    norms = ChunkNorms([p], derive_halves_seed(seed, step))
    normalizer = max(loss_normalizer(batch.response_mask, aggregation), 1.0)
    shares = token_weights(batch.response_mask, aggregation, normalizer).sum(dim=1)  # (N,) as train.update weighs
    for chunk in iter_gradient_chunks(batch, 64, G, True, norms.halves_seed):
        with norms.chunk(shares[torch.cat(chunk)].sum()):
            for rows in chunk:
                mb, width = batch.select(rows)
                weights = token_weights(mb.response_mask, aggregation, normalizer)  # (n, width)
                ((weights[..., None] * vectors[rows, :width]).sum(dim=(0, 1)) @ p).backward()
    terms = norms.noise_terms(float(p.grad.norm()), len(batch))
    return (terms["gns/grad_sq"], terms["gns/trace_sigma"]), p.grad.detach().clone()


def legacy_terms(batch: SequenceBatch, vectors: torch.Tensor, aggregation: str):
    """The estimate before issue 38: halves by length (groups sorted by their longest row, the longer half first),
    b and B counted in rows, McCandlish's estimators on the chunks' own mean gradients."""
    weights = token_weights(batch.response_mask, aggregation,
                            max(loss_normalizer(batch.response_mask, aggregation), 1.0))
    row_grads = (weights[..., None] * vectors).sum(dim=1)  # (N, DIMS) each row's share of the update's gradient
    group_lengths = batch.attention_mask.sum(dim=1).view(-1, G).max(dim=1).values
    order = torch.argsort(group_lengths, descending=True, stable=True)
    chunk_sq, sizes = [], []
    for groups in order.tensor_split(2):
        rows = (groups[:, None] * G + torch.arange(G)).flatten()
        chunk_sq.append(float(row_grads[rows].sum(dim=0).square().sum()) / float(weights[rows].sum()) ** 2)
        sizes.append(len(rows))
    return estimate_noise_terms(chunk_sq, sizes, float(row_grads.sum(dim=0).square().sum()), len(batch))


def simulate(prompts: int, aggregation: str, class_share: float, steps: int, seed: int = 0):
    """(B_noise new, B_noise legacy, the truth): ratios of the per-step estimates' means, as `plan --predict` reads a
    run, against the truth's."""
    gen = torch.Generator().manual_seed(seed)
    new, legacy, noise, grads = [], [], [], []
    for step in range(1, steps + 1):
        batch, vectors, step_noise = draw_update(gen, prompts, aggregation, class_share)
        terms, grad = update_terms(batch, vectors, aggregation, seed, step)
        new.append(terms)
        legacy.append(legacy_terms(batch, vectors, aggregation))
        noise.append(step_noise)
        grads.append(grad)
    samples = prompts * G
    truth = samples * float(np.mean(noise)) / TRUE_GRAD_SQ  # tr(Sigma) / |G|^2
    if aggregation == "token-mean" and class_share > 0:  # the weights follow the class: measure the truth instead
        grads = torch.stack(grads).double()  # (steps, DIMS)
        trace = float(grads.var(dim=0).sum()) * samples
        truth = trace / (float(grads.mean(dim=0).square().sum()) - trace / samples / steps)
    return ratio_of_means([np.array(new)]).value, ratio_of_means([np.array(legacy)]).value, truth


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Small tensors: more threads only add overhead (and oversubscribe shared cores)."""


def test_token_mean_weights_with_2_and_4_token_groups():
    """Token-mean, groups of 2- and 4-token responses, P = 4: the loss weighs the long groups twice, which row counts
    ignore; the old split read 0.48x the truth at 1,000 steps."""
    new, legacy, truth = simulate(4, "token-mean", 0.0, steps=200)
    assert new == pytest.approx(truth, rel=TOLERANCE), (new, truth)
    assert abs(legacy / truth - 1) > TOLERANCE, (legacy, truth)


CASES = {  # prompts, aggregation, class share, steps; does the old split fail here
    "no length effect, P = 4": (4, "sequence-mean", 0.0, 300, False),
    "a length class explaining 3%, P = 4": (4, "sequence-mean", 0.03, 300, True),
    "a length class explaining 3%, P = 16": (16, "sequence-mean", 0.03, 200, True),
    "token-mean, 2- vs 4-token groups, P = 16": (16, "token-mean", 0.0, 200, False),
    "token-mean and a length class explaining 3%, P = 4": (4, "token-mean", 0.03, 300, True),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_within_25_percent_of_the_truth_where_the_old_split_was_not(case):
    prompts, aggregation, class_share, steps, legacy_fails = CASES[case]
    new, legacy, truth = simulate(prompts, aggregation, class_share, steps)
    assert new == pytest.approx(truth, rel=TOLERANCE), (new, truth)
    if legacy_fails:
        assert abs(legacy / truth - 1) > TOLERANCE, (legacy, truth)


def lengths_batch(lengths: list[int]) -> SequenceBatch:
    """Rows with the given response lengths (one prompt token each)."""
    mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
    attention = torch.cat([torch.ones(len(lengths), 1, dtype=torch.long), mask], dim=1)
    return SequenceBatch(attention.clone(), attention, mask.float())


def first_half_groups(batch: SequenceBatch, seed: int, samples_per_prompt: int) -> set[int]:
    first = next(iter(iter_gradient_chunks(batch, 4, samples_per_prompt, True, seed)))
    return {int(r) // samples_per_prompt for r in torch.cat(first)}


def test_halves_are_drawn_reproducibly_and_never_from_the_global_streams():
    """The same (seed, step, update) gives the same halves; another step or update another draw; the global torch and
    numpy generators (which sampling uses) are left exactly where they were."""
    batch = lengths_batch([1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8])  # 8 groups of 2, lengths rising
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()[1].copy()
    draws = {(step, update): first_half_groups(batch, derive_halves_seed(3, step, update), 2)
             for step in range(1, 6) for update in range(2)}
    assert torch.equal(torch.get_rng_state(), torch_state) and np.array_equal(np.random.get_state()[1], numpy_state)
    assert first_half_groups(batch, derive_halves_seed(3, 2, 1), 2) == draws[(2, 1)]
    assert len({frozenset(d) for d in draws.values()}) > 5  # 70 possible halves: ten draws are not all one
    assert derive_halves_seed(3, 2) != derive_halves_seed(4, 2) != derive_halves_seed(3, 3)


def test_halves_do_not_follow_length_and_rows_stay_sorted_inside_each():
    """Over many draws every group lands in the first half about half of the time, the longest as often as the
    shortest; inside a half the rows run longest first (the padding gain); the halves cover the batch once."""
    lengths = [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8]
    batch = lengths_batch(lengths)
    counts = np.zeros(8)
    for step in range(1, 401):
        chunks = list(iter_gradient_chunks(batch, 3, 2, True, derive_halves_seed(0, step)))
        rows = [torch.cat(chunk) for chunk in chunks]
        assert sorted(torch.cat(rows).tolist()) == list(range(16))
        for half in rows:
            assert [lengths[r] for r in half.tolist()] == sorted((lengths[r] for r in half.tolist()), reverse=True)
            assert len({int(r) // 2 for r in half}) * 2 == len(half)  # whole groups
        counts[list({int(r) // 2 for r in rows[0]})] += 1
    share = counts / 400
    assert np.all(np.abs(share - 0.5) < 0.1), share  # binomial sd 0.025 at 400 draws
