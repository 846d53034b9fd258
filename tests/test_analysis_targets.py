"""Samples-to-target N*: first crossing with interpolation, censoring, noisy curves; rN and update-ratio arithmetic."""

import numpy as np
import pytest

from batchscale.analysis.targets import (
    choose_default_target,
    compute_ratio,
    compute_updates_to_target,
    find_samples_to_target,
)


def test_crossing_is_interpolated_between_eval_points():
    samples = np.array([0.0, 100.0, 200.0, 300.0])
    scores = np.array([0.0, 0.2, 0.6, 0.9])
    # 0.5 lies 3/4 of the way from 0.2 (N=100) to 0.6 (N=200).
    assert find_samples_to_target(samples, scores, 0.5) == pytest.approx(175.0)


def test_exact_hit_and_target_met_at_first_eval():
    samples = np.array([0.0, 100.0, 200.0])
    scores = np.array([0.1, 0.5, 0.7])
    assert find_samples_to_target(samples, scores, 0.5) == pytest.approx(100.0)
    assert find_samples_to_target(samples, scores, 0.05) == 0.0


def test_never_reached_is_censored():
    samples = np.array([0.0, 100.0, 200.0])
    scores = np.array([0.1, 0.3, 0.4])
    assert find_samples_to_target(samples, scores, 0.45) is None


def test_non_monotone_curve_keeps_first_crossing():
    # Crosses 0.5 between 100 and 200, dips below again, crosses again later: the first crossing counts.
    samples = np.array([0.0, 100.0, 200.0, 300.0, 400.0])
    scores = np.array([0.0, 0.4, 0.6, 0.3, 0.8])
    assert find_samples_to_target(samples, scores, 0.5) == pytest.approx(150.0)


def test_noisy_curve_crossing_close_to_truth():
    # Linear J = N / 1000 plus small noise: the crossing of 0.5 sits near N = 500, within what the noise allows.
    rng = np.random.default_rng(3)
    samples = np.arange(0, 1001, 10, dtype=float)
    scores = samples / 1000 + 0.005 * rng.standard_normal(samples.size)
    n_star = find_samples_to_target(samples, scores, 0.5)
    assert 480 <= n_star <= 505
    # First crossing: no earlier eval reached the target.
    assert np.all(scores[samples < n_star - 10] < 0.5)


def test_updates_and_ratios():
    assert compute_updates_to_target(4096.0, 256) == pytest.approx(16.0)
    assert compute_updates_to_target(None, 256) is None
    # Doubled batch reaching the target at 1.2x the samples: rN = 1.2, update ratio = 1.2 / 2 = 0.6.
    n_ref, n_big = 4096.0, 4915.2
    r_n = compute_ratio(n_big, n_ref)
    update_ratio = compute_ratio(compute_updates_to_target(n_big, 512), compute_updates_to_target(n_ref, 256))
    assert r_n == pytest.approx(1.2)
    assert update_ratio == pytest.approx(0.6)
    assert compute_ratio(None, n_ref) is None
    assert compute_ratio(n_big, None) is None
    assert compute_ratio(n_big, 0.0) is None


def test_default_target_is_fraction_of_reference_rise():
    grid = np.array([0.0, 1.0, 2.0, 3.0])
    mean_scores = np.array([0.2, 0.5, 0.7, 0.65])
    assert choose_default_target(grid, mean_scores) == pytest.approx(0.2 + 0.8 * (0.7 - 0.2))
