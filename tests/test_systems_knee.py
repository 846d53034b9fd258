"""Knee fitting on synthetic curves with a known knee, and the linear training-cost fit."""

import numpy as np
import pytest

from batchscale.errors import UserError
from batchscale.systems.knee import (
    find_doubling_knee,
    fit_saturating_throughput,
    fit_training_cost,
    saturating_throughput,
)

CONCURRENCY = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_exact_curve_recovers_parameters_and_knees():
    q = saturating_throughput(np.array(CONCURRENCY, dtype=float), 1000.0, 12.0)
    fit = fit_saturating_throughput(CONCURRENCY, q)
    assert fit.q_max == pytest.approx(1000.0, rel=1e-4)
    assert fit.b_half == pytest.approx(12.0, rel=1e-4)
    assert fit.b_90 == pytest.approx(108.0, rel=1e-4)
    assert fit.r2 == pytest.approx(1.0)
    assert not fit.extrapolated
    # q(2B)/q(B) = 2(B + 12)/(2B + 12) < 1.1  <=>  B > 54: the first measured such B is 64
    assert fit.doubling_knee == 64
    assert fit.method == "curve_fit"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_curve_recovers_b_half(seed):
    rng = np.random.default_rng(seed)
    b = np.array(CONCURRENCY, dtype=float)
    q = saturating_throughput(b, 500.0, 20.0) * (1 + 0.03 * rng.standard_normal(b.size))
    fit = fit_saturating_throughput(b, q)
    assert fit.b_half == pytest.approx(20.0, rel=0.25)
    assert fit.q_max == pytest.approx(500.0, rel=0.1)
    assert fit.r2 > 0.97


def test_few_points_and_unsorted_input():
    b = np.array([64.0, 4.0])
    fit = fit_saturating_throughput(b, saturating_throughput(b, 300.0, 8.0))  # 2 points: exactly determined
    assert fit.b_half == pytest.approx(8.0, rel=1e-3)
    b3 = [16, 1, 4]
    fit3 = fit_saturating_throughput(b3, saturating_throughput(np.array(b3, float), 300.0, 8.0))
    assert fit3.q_max == pytest.approx(300.0, rel=1e-3)


def test_unsaturated_curve_is_flagged_extrapolated():
    b = np.array([1.0, 2.0, 4.0, 8.0])
    fit = fit_saturating_throughput(b, 10.0 * b)  # still linear: the knee lies beyond the data
    assert np.isfinite(fit.b_half) and fit.b_half > 8
    assert fit.extrapolated
    assert fit.doubling_knee is None


def test_doubling_rule_on_uneven_grid():
    # 8 -> 32 is two doublings; a 1.21x gain is exactly 10% per doubling (not below), 1.2x is below
    assert find_doubling_knee([8, 32], [100.0, 121.0 + 1e-9]) is None
    assert find_doubling_knee([8, 32], [100.0, 120.0]) == 8
    assert find_doubling_knee([1, 2, 4], [10.0, 19.0, 20.0], threshold=0.10) == 2
    assert find_doubling_knee([1, 2, 4], [10.0, 19.0, 20.0], threshold=0.01) is None


def test_saturating_fit_rejects_bad_points():
    with pytest.raises(UserError, match="at least 2"):
        fit_saturating_throughput([4], [10.0])
    with pytest.raises(UserError, match="> 0"):
        fit_saturating_throughput([1, 2], [0.0, 5.0])
    with pytest.raises(UserError, match="equal-length"):
        fit_saturating_throughput([1, 2, 3], [1.0, 2.0])


def test_linear_training_fit():
    tokens = np.array([1000, 2000, 4000, 8000, 16000], dtype=float)
    exact = fit_training_cost(tokens, 2.0 + 1e-3 * tokens)
    assert (exact.seconds_fixed, exact.seconds_per_token, exact.r2) == (pytest.approx(2.0), pytest.approx(1e-3), pytest.approx(1.0))
    assert exact.tokens_per_s == pytest.approx(1000.0)
    rng = np.random.default_rng(0)
    noisy = fit_training_cost(tokens, (2.0 + 1e-3 * tokens) * (1 + 0.02 * rng.standard_normal(tokens.size)))
    assert noisy.seconds_per_token == pytest.approx(1e-3, rel=0.1)
    assert noisy.r2 > 0.98
    with pytest.raises(UserError, match="2 distinct"):
        fit_training_cost([1000, 1000], [1.0, 1.1])
