"""N*'s interval over seeds: the t-interval on log N* holds its coverage with 3 and 5 seeds (simulation with known
truth), the percentile bootstrap it replaced does not; the censoring summary; one seed gives no interval."""

import numpy as np
import pytest

from batchscale.analysis.bootstrap import bootstrap_mean_ci
from batchscale.analysis.coverage import measure_coverage
from batchscale.analysis.intervals import ONE_SEED, compute_log_t_interval, summarize_censored


def test_t_interval_on_log_n_star_holds_coverage_with_few_seeds():
    """400 simulated sweeps per seed count; binomial sd of a 95% coverage is about 0.011, so >= 0.90 leaves 4 sd."""
    coverage = measure_coverage(seed_counts=(3, 5), repeats=400, seed=0)["coverage"]
    for seeds in (3, 5):
        assert coverage[seeds]["sweeps"] == 400
        assert coverage[seeds]["t_log"] >= 0.90, coverage
    assert coverage[3]["percentile_bootstrap"] < 0.85, coverage  # the old interval: the simulation tells them apart


def test_log_t_interval_matches_the_formula_and_vectorizes():
    values = np.array([1000.0, 1500.0, 1200.0])
    low, high = compute_log_t_interval(values)
    logs = np.log(values)
    half = 4.302652729911275 * logs.std(ddof=1) / np.sqrt(3)  # t(0.975, 2 df)
    assert (low, high) == pytest.approx((np.exp(logs.mean() - half), np.exp(logs.mean() + half)))
    lows, highs = compute_log_t_interval(np.stack([values, values * 2]))
    assert lows.tolist() == pytest.approx([low, 2 * low]) and highs.tolist() == pytest.approx([high, 2 * high])
    assert compute_log_t_interval(np.array([5.0])) is None


def test_bootstrap_covers_truth_at_about_nominal_rate():
    rng = np.random.default_rng(0)
    true_mean, repetitions, covered = 10.0, 200, 0
    for repetition in range(repetitions):
        seeds = rng.normal(true_mean, 2.0, size=20)
        _, low, high = bootstrap_mean_ci(seeds, confidence=0.9, n_resamples=1000, seed=repetition)
        covered += low <= true_mean <= high
    coverage = covered / repetitions
    # Percentile bootstrap with 20 seeds under-covers slightly (about 0.87 for 0.90); the band allows for that and for
    # the binomial spread of 200 repetitions (sd about 0.024), but catches a broken interval (0.5 or 1.0).
    assert 0.80 <= coverage <= 0.96, coverage


def test_bootstrap_is_reproducible_and_brackets_mean():
    values = np.array([3.0, 5.0, 4.0, 6.0])
    first, second = bootstrap_mean_ci(values, seed=7), bootstrap_mean_ci(values, seed=7)
    assert first == second
    mean, low, high = first
    assert mean == pytest.approx(4.5)
    assert 3.0 <= low < mean < high <= 6.0


def test_single_value_has_no_interval():
    assert bootstrap_mean_ci(np.array([2.0])) == (2.0, None, None)


def test_censored_summary_counts_and_means_reached_seeds():
    summary = summarize_censored([100.0, None, 300.0])
    assert summary["reached"] == 2 and summary["censored"] == 1
    assert summary["mean"] == pytest.approx(200.0)
    assert summary["ci_low"] is not None and summary["ci_low"] <= 200.0 <= summary["ci_high"]
    assert summary["log_mean"] == pytest.approx(np.log([100.0, 300.0]).mean())
    assert "t-interval on log N*" in summary["interval"]


def test_one_reached_seed_gives_mean_without_interval_and_none_reached_gives_nothing():
    one = summarize_censored([150.0, None])
    assert (one["mean"], one["ci_low"], one["ci_high"], one["reached"], one["censored"]) == (150.0, None, None, 1, 1)
    assert one["interval"] == ONE_SEED == "one seed: uncertainty unknown"
    none = summarize_censored([None, None])
    assert (none["mean"], none["ci_low"], none["reached"], none["censored"]) == (None, None, 0, 2)


def test_n_star_zero_in_a_seed_gives_no_log_interval_and_no_crash():
    summary = summarize_censored([0.0, 500.0, 800.0])
    assert summary["mean"] == pytest.approx(1300.0 / 3) and summary["ci_low"] is None and summary["log_mean"] is None
    assert "N* = 0" in summary["interval"]
