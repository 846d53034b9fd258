"""The sweep-fitted B_noise (analysis.noise_fit) on synthetic sweeps with a known B_noise: point, interval, coverage."""

import math

import numpy as np
import pytest

from batchscale.analysis.intervals import summarize_censored
from batchscale.analysis.noise_fit import fit_noise_scale_interval
from batchscale.telemetry.gradnoise import predict_samples_penalty

TRUTH, B_REF, N_REF = 300.0, 32, 2000.0


def synthetic_sweep(rng, batches, seeds: int, sigma: float) -> dict:
    """Labels of one lr rule whose seeds' N* scatter by a factor exp(sigma z) around N_REF * rN_true(B)."""
    configs = {}
    for b in (B_REF, *batches):
        n_star = N_REF * predict_samples_penalty(b, B_REF, TRUTH) * np.exp(sigma * rng.standard_normal(seeds))
        configs[f"P{b}"] = {"samples_per_update": b, "lr_rule": "sqrt", "samples_to_target": summarize_censored(
            n_star.tolist())}
    reference_mean = configs[f"P{B_REF}"]["samples_to_target"]["mean"]
    for config in configs.values():
        config["r_n"] = config["samples_to_target"]["mean"] / reference_mean
    return configs


@pytest.mark.parametrize("batches, seeds", [((64,), 2), ((64, 128, 256), 2), ((64, 128, 256), 4)])
def test_the_fitted_interval_covers_the_truth_at_its_nominal_80_percent(batches, seeds):
    rng = np.random.default_rng(7)
    covered, log_errors = [], []
    for _ in range(600):
        fit = fit_noise_scale_interval(synthetic_sweep(rng, batches, seeds, sigma=0.2), f"P{B_REF}")
        low, high = fit.low or 0.0, fit.high or math.inf
        covered.append(low <= TRUTH <= high)
        # a fit at the range's end (no value) counts as that end: the median over all fits, not the resolved ones
        if fit.value is not None:
            log_errors.append(math.log(fit.value / TRUTH))
        else:  # at the upper end the interval is open above; at the lower end it is not
            log_errors.append(math.inf if fit.high is None else -math.inf)
    assert 0.74 <= np.mean(covered) <= 0.86
    assert abs(math.exp(np.median(log_errors)) - 1) < 0.10  # median-unbiased within 10%


def test_an_exact_sweep_gives_the_truth_and_a_point_interval():
    configs = synthetic_sweep(np.random.default_rng(0), (64, 128, 256), seeds=3, sigma=1e-6)
    fit = fit_noise_scale_interval(configs, f"P{B_REF}")
    assert fit.value == pytest.approx(TRUTH, rel=1e-3)
    assert fit.low == pytest.approx(TRUTH, rel=0.02) and fit.high == pytest.approx(TRUTH, rel=0.02)
    assert (fit.labels, fit.degrees_of_freedom) == (3, 8)


def test_more_labels_and_seeds_narrow_the_interval():
    def width(batches, seeds):
        widths = []
        rng = np.random.default_rng(3)
        for _ in range(100):
            fit = fit_noise_scale_interval(synthetic_sweep(rng, batches, seeds, sigma=0.2), f"P{B_REF}")
            widths.append(math.log((fit.high or 1e8) / (fit.low or 1.0)))
        return np.median(widths)

    assert width((64, 128, 256), 4) < 0.6 * width((64,), 2)


def test_one_seed_per_label_gives_a_point_and_no_interval():
    configs = synthetic_sweep(np.random.default_rng(1), (64, 128), seeds=1, sigma=0.2)
    fit = fit_noise_scale_interval(configs, f"P{B_REF}")
    assert fit.value is not None and (fit.low, fit.high, fit.degrees_of_freedom) == (None, None, 0)


def test_rn_that_does_not_grow_leaves_the_upper_end_open():
    configs = synthetic_sweep(np.random.default_rng(2), (64, 128), seeds=3, sigma=0.2)
    for label in ("P64", "P128"):  # every label needs the reference's samples: pure noise, B_noise -> infinity
        configs[label]["samples_to_target"] = configs[f"P{B_REF}"]["samples_to_target"]
        configs[label]["r_n"] = 1.0
    fit = fit_noise_scale_interval(configs, f"P{B_REF}")
    assert fit.value is None and fit.high is None and fit.low is not None
