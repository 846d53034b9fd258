"""The online gradient noise scale against a known answer, and its independence of micro-batching.

Linear regression y = x.w* + eps with x ~ N(0, I_d), eps ~ N(0, s^2), per-sample loss (x.w - y)^2 / 2, evaluated at a
fixed w = w* + delta: the per-sample gradient is x (x.delta - eps), so G = delta and (Gaussian fourth moment)
Sigma = (|delta|^2 + s^2) I + delta delta^T, i.e. |G|^2 = |delta|^2 and tr(Sigma) = (d + 1)|delta|^2 + d s^2.
With prompt groups, the G samples of a group share a latent part of x, so only whole groups are independent.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from batchscale.policy.sequences import SequenceBatch
from batchscale.telemetry.gradnoise import (NoiseScaleEMA, estimate_noise_terms, estimate_weighted_noise_terms,
                                            predict_samples_penalty, summarize_noise_scale)
from batchscale.train.chunk_norms import ChunkNorms
from batchscale.train.micro_batches import iter_gradient_chunks

DIM, NOISE_SD = 10, 1.0
TRUE_GRAD_SQ = 1.0  # |delta|^2
TRUE_TRACE_SIGMA = (DIM + 1) * TRUE_GRAD_SQ + DIM * NOISE_SD ** 2


def flat_batch(rows: int) -> SequenceBatch:
    """Rows of equal length with one response token each: the row index is all the update looks at."""
    ones = torch.ones(rows, 2, dtype=torch.long)
    return SequenceBatch(ones, ones, torch.ones(rows, 1))


def regression_step(model, generator, rows, micro_batch_size, group=1, group_share=0.0, chunk_norms=None):
    """One accumulated update's gradient over `rows` fresh samples (groups of `group` sharing a latent part of x)."""
    latent = torch.randn(rows // group, DIM, generator=generator).repeat_interleave(group, dim=0)  # (N, d)
    x = (group_share ** 0.5) * latent + ((1 - group_share) ** 0.5) * torch.randn(rows, DIM, generator=generator)
    y = x @ model.target + NOISE_SD * torch.randn(rows, generator=generator)  # (N,)
    for chunk in iter_gradient_chunks(flat_batch(rows), micro_batch_size, group):  # as train.update runs them
        chunk_rows = torch.cat(chunk)
        # sequence-mean: the chunk's share of the loss weights is its rows / all rows
        share = torch.tensor(len(chunk_rows) / rows)
        with chunk_norms.chunk(share) if chunk_norms else contextlib.nullcontext():
            for mb in chunk:
                loss = 0.5 * ((model(x[mb]).squeeze(-1) - y[mb]) ** 2).sum() / rows  # the micro-batch's share
                loss.backward()
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]).item()


def regression_model(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(DIM, 1, bias=False)
    model.target = torch.randn(DIM)
    delta = torch.randn(DIM)
    with torch.no_grad():
        model.weight.copy_(model.target + delta / delta.norm() * TRUE_GRAD_SQ ** 0.5)
    return model


def simulate(steps, rows, micro_batch_size, group=1, group_share=0.0, seed=0):
    """Step records of `steps` updates at the same w: the gns keys as the trainer logs them."""
    model, generator, ema = regression_model(), torch.Generator().manual_seed(seed), NoiseScaleEMA()
    records = []
    for step in range(steps):
        chunk_norms = ChunkNorms(model.parameters())
        grad_norm = regression_step(model, generator, rows, micro_batch_size, group, group_share, chunk_norms)
        model.zero_grad(set_to_none=True)
        stats = chunk_norms.noise_terms(grad_norm, rows)
        records.append({"step": step + 1, **stats, **ema.observe(stats)})
    return records


def test_estimators_match_the_closed_form_within_10_percent():
    records = simulate(steps=600, rows=64, micro_batch_size=8)
    grad_sq = np.mean([r["gns/grad_sq"] for r in records])
    trace_sigma = np.mean([r["gns/trace_sigma"] for r in records])
    assert grad_sq == pytest.approx(TRUE_GRAD_SQ, rel=0.10)
    assert trace_sigma == pytest.approx(TRUE_TRACE_SIGMA, rel=0.10)
    b_noise = summarize_noise_scale(records)
    assert b_noise.value == pytest.approx(TRUE_TRACE_SIGMA / TRUE_GRAD_SQ, rel=0.10)
    assert b_noise.low < b_noise.value < b_noise.high
    assert b_noise.steps == 300  # the second half


def test_one_micro_batch_per_update_splits_the_update_in_two_halves():
    records = simulate(steps=600, rows=64, micro_batch_size=64)
    assert np.mean([r["gns/trace_sigma"] for r in records]) == pytest.approx(TRUE_TRACE_SIGMA, rel=0.10)


@pytest.mark.parametrize("micro_batch_size", [4, 8, 16, 32, 64])
def test_micro_batch_size_does_not_change_the_expectation_with_correlated_groups(micro_batch_size):
    """Groups of 8 whose samples share half their x: chunks of whole groups make the group the unit whatever the
    micro-batch, so every micro-batch size estimates the same tr(Sigma) (in samples), the covariance of group means
    times G computed directly from 20000 groups, and the same |G|^2."""
    group, share, rows = 8, 0.5, 64
    records = simulate(steps=800, rows=rows, micro_batch_size=micro_batch_size, group=group, group_share=share)
    baseline = simulate(steps=800, rows=rows, micro_batch_size=rows, group=group, group_share=share)
    for key in ("gns/grad_sq", "gns/trace_sigma"):  # the same two halves at every size: equal up to float rounding
        assert np.mean([r[key] for r in records]) == pytest.approx(np.mean([r[key] for r in baseline]), rel=1e-4)
    # direct: covariance of independent group means, times G (samples per group), from 20000 groups
    model, generator = regression_model(), torch.Generator().manual_seed(123)
    latent = torch.randn(20000, DIM, generator=generator).repeat_interleave(group, dim=0)
    x = share ** 0.5 * latent + (1 - share) ** 0.5 * torch.randn(20000 * group, DIM, generator=generator)
    eps = NOISE_SD * torch.randn(20000 * group, generator=generator)
    delta = (model.weight.detach().squeeze(0) - model.target)
    per_sample = x * (x @ delta - eps)[:, None]  # (N, d)
    means = per_sample.view(20000, group, DIM).mean(dim=1)  # (groups, d)
    expected_trace = float(means.var(dim=0).sum()) * group
    expected_grad_sq = float(delta.square().sum())
    assert np.mean([r["gns/trace_sigma"] for r in records]) == pytest.approx(expected_trace, rel=0.10)
    assert np.mean([r["gns/grad_sq"] for r in records]) == pytest.approx(expected_grad_sq, rel=0.15)


def test_chunked_accumulation_gives_the_plain_gradient():
    model, generator = regression_model(), torch.Generator().manual_seed(5)
    regression_step(model, generator, 48, 8, group=4, group_share=0.5, chunk_norms=ChunkNorms(model.parameters()))
    chunked = model.weight.grad.clone()
    model.zero_grad(set_to_none=True)
    regression_step(model, torch.Generator().manual_seed(5), 48, 48, group=4, group_share=0.5)
    torch.testing.assert_close(chunked, model.weight.grad, rtol=1e-6, atol=1e-7)


def test_estimator_arithmetic():
    # two chunks of 4 whose mean gradients have |g|^2 = 3 and 5; the batch of 8 has |g|^2 = 2.5
    grad_sq, trace_sigma = estimate_noise_terms([3.0, 5.0], [4, 4], 2.5, 8)
    assert grad_sq == pytest.approx((8 * 2.5 - 4 * 4.0) / 4)
    assert trace_sigma == pytest.approx((4.0 - 2.5) / (1 / 4 - 1 / 8))
    assert estimate_noise_terms([3.0], [8], 3.0, 8) is None
    # unequal chunks of equal-weight samples: E|g_b|^2 = |G|^2 + tr(Sigma)/b holds exactly for this input
    g2, tr = 1.0, 20.0
    sizes = [8, 8, 16]
    chunk_sq = [g2 + tr / b for b in sizes]
    assert estimate_noise_terms(chunk_sq, sizes, g2 + tr / 32, 32) == pytest.approx((g2, tr))


@pytest.mark.parametrize("shares", [(0.5, 0.5), (2 / 3, 1 / 3), (0.2, 0.3, 0.5)])
def test_weighted_estimator_is_exact_in_expectation_whatever_each_chunks_noise(shares):
    """Chunks holding shares W_k of the loss weights, with noises V_k of their increments that follow neither W_k
    nor the Kish size (long groups less noisy per token): fed E|d_k|^2 = W_k^2 |G|^2 + V_k and E|g_B|^2 = |G|^2 +
    sum V_k, the estimator returns |G|^2 and tr(Sigma) = N sum V_k exactly (telemetry.gradnoise, departure 2)."""
    g2, samples = 1.5, 48
    noises = [0.7, 0.2, 1.1][:len(shares)]  # V_k
    chunk_grad_sq = [(w * w * g2 + v) / w ** 2 for w, v in zip(shares, noises)]  # |g_k|^2 = |d_k|^2 / W_k^2
    batch_sq = g2 + sum(noises)
    assert estimate_weighted_noise_terms(chunk_grad_sq, list(shares), batch_sq, samples) == pytest.approx(
        (g2, samples * sum(noises)))
    scaled = [3.0 * w for w in shares]  # the shares' scale does not matter
    assert estimate_weighted_noise_terms(chunk_grad_sq, scaled, batch_sq, samples) == pytest.approx(
        (g2, samples * sum(noises)))
    assert estimate_weighted_noise_terms(chunk_grad_sq, [0.0] + list(shares[1:]), batch_sq, samples) is None


def test_ema_ratio_and_its_gaps():
    ema = NoiseScaleEMA()
    assert ema.observe({}) == {}
    assert ema.observe({"gns/grad_sq": 2.0, "gns/trace_sigma": 10.0}) == {"gns/b_noise": pytest.approx(5.0)}
    assert ema.observe({"gns/grad_sq": -50.0, "gns/trace_sigma": 10.0}) == {"gns/b_noise": None}  # unresolved
    assert NoiseScaleEMA().observe({"gns/grad_sq": 1.0, "gns/trace_sigma": -1.0}) == {"gns/b_noise": 0.0}
    critic = NoiseScaleEMA("critic")
    assert critic.observe({"gns/critic/grad_sq": 1.0, "gns/critic/trace_sigma": 3.0}) == {
        "gns/critic/b_noise": pytest.approx(3.0)}


def test_unresolved_steps_count_as_infinite_in_the_summary():
    records = [{"gns/b_noise": 100.0}] * 4 + [{"gns/b_noise": v} for v in (50.0, None, 200.0, None, None)]
    b_noise = summarize_noise_scale(records)  # the second half: 50, None, 200, None, None
    assert b_noise.value == float("inf") and b_noise.high == float("inf") and b_noise.unresolved_steps == 3
    assert b_noise.to_json()["value"] is None
    assert summarize_noise_scale([{"step": 1}]) is None  # never logged
    assert predict_samples_penalty(4096, 128, float("inf")) == 1.0


def test_predicted_penalty_formula():
    assert predict_samples_penalty(128, 128, 500.0) == 1.0
    assert predict_samples_penalty(1024, 128, 512.0) == pytest.approx((1 + 2) / (1 + 0.25))
