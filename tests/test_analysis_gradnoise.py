"""Gradient-noise scale: B_simple recovered from a + b/B data, the B^-1/2 slope, and a <= 0 handled."""

import numpy as np
import pytest

from batchscale.analysis.gradnoise import analyze_grad_noise, fit_log_log_slope, fit_noise_scale, select_slope_range

BATCHES = np.array([64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0])


def test_b_simple_recovered_exactly_from_noise_free_data():
    a, b = 0.02, 30.0  # B_simple = 1500
    fit = fit_noise_scale(BATCHES, a + b / BATCHES)
    assert fit["a"] == pytest.approx(a, rel=1e-9)
    assert fit["b"] == pytest.approx(b, rel=1e-9)
    assert fit["b_simple"] == pytest.approx(1500.0, rel=1e-9)


def test_b_simple_recovered_from_noisy_data():
    rng = np.random.default_rng(1)
    a, b = 1e-3, 0.5  # B_simple = 500
    squared_norms = (a + b / BATCHES) * np.exp(0.03 * rng.standard_normal(BATCHES.size))
    assert fit_noise_scale(BATCHES, squared_norms)["b_simple"] == pytest.approx(500.0, rel=0.25)


def test_pure_noise_has_no_floor_and_no_b_simple():
    fit = fit_noise_scale(BATCHES, 4.0 / BATCHES * np.array([1.0, 1.02, 0.97, 1.01, 0.99, 1.03, 0.96]))
    assert fit["b_simple"] is None
    assert "a <= 0" in fit["note"] or "b <= 0" in fit["note"]


def test_negative_intercept_reported_not_inverted():
    # |g|^2 falling faster than 1/B pushes the intercept below zero: b/a would be a meaningless negative number.
    fit = fit_noise_scale(BATCHES, 1.0 / BATCHES**1.3)
    assert fit["a"] < 0
    assert fit["b_simple"] is None
    assert "a <= 0" in fit["note"]


def test_one_batch_size_gives_no_fit_and_no_slope():
    assert fit_noise_scale(np.array([64.0, 64.0]), np.array([1.0, 1.1]))["b_simple"] is None
    assert fit_log_log_slope(np.array([64.0]), np.array([1.0])) is None


def test_slope_is_minus_half_in_noise_regime_and_flattens_past_b_simple():
    norms = np.sqrt(1e-4 + 1e-4 * 1e4 / BATCHES)  # B_simple = 10^4 >> every batch: nearly pure noise
    assert fit_log_log_slope(BATCHES, norms) == pytest.approx(-0.5, abs=0.05)
    flat = np.sqrt(1e-4 + 1e-4 * 16 / BATCHES)  # B_simple = 16 << every batch: gradient dominates
    assert fit_log_log_slope(BATCHES, flat) > -0.1


def test_analyze_grad_noise_averages_shared_batches_and_uses_range():
    batches = [64, 64, 256, 1024]
    proxies = [{"norm": np.sqrt(1 + 512 / b), "squared_norm": 1 + 512 / b} for b in batches]
    result = analyze_grad_noise(batches, proxies, select_slope_range(np.array(batches, float), [64, 256]))
    assert result["samples_per_update"] == [64.0, 256.0, 1024.0]
    assert result["slope_range"] == [64.0, 256.0]
    assert result["b_simple"] == pytest.approx(512.0, rel=1e-6)
    assert select_slope_range(np.array([64.0, 1024.0]), [64]) == (64.0, 1024.0)
    assert select_slope_range(np.array([64.0, 1024.0]), [64], slope_range=(100, 200)) == (100.0, 200.0)
