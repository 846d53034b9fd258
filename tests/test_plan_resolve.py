"""The decision statement tests what it claims: resolved only when the winner beats the runner-up and the reference on
log T at the 95% level (plan/resolve.py), checked by simulation for its false-resolution rate; one seed and tables are
never resolved."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from batchscale.plan.decide import compute_plan
from batchscale.plan.explain import explain_decision
from batchscale.plan.resolve import compare_log_time
from batchscale.plan.rows import ConfigMeasurement


def seeded(label: str, n_star_per_seed, q: float, p: int, step_sd: float = 0.02, steps: int = 50) -> ConfigMeasurement:
    """A configuration measured over seeds: the analysis's mean and log statistics of N*, and q's step spread."""
    values = np.asarray(n_star_per_seed, dtype=float)
    logs = np.log(values)
    return ConfigMeasurement(
        label, float(values.mean()), q, seeds_reached=len(values), prompts_per_step=p, samples_per_prompt=8,
        samples_per_step=8 * p, log_samples_to_target_mean=float(logs.mean()),
        log_samples_to_target_sd=float(logs.std(ddof=1)) if len(values) > 1 else None,
        log_throughput_sd=step_sd, throughput_steps=steps)


def test_clear_win_is_resolved_against_runner_up_and_reference():
    ref = seeded("ref", [1.00e5, 1.05e5, 0.95e5], 10.0, 128)
    mid = seeded("mid", [1.00e5, 1.04e5, 0.97e5], 14.0, 256)
    big = seeded("big", [1.00e5, 1.03e5, 0.98e5], 30.0, 512)
    plan = compute_plan([ref, mid, big], "ref")
    assert (plan.best, plan.runner_up, plan.resolved, plan.why_unresolved) == ("big", "mid", True, None)
    assert "not yet resolved" not in explain_decision(plan)


def test_close_call_is_unresolved_and_says_against_whom():
    ref = seeded("ref", [1.0e5, 1.3e5, 0.8e5], 10.0, 128)
    close = seeded("close", [1.0e5, 1.3e5, 0.8e5], 11.0, 256)
    plan = compute_plan([ref, close], "ref")
    assert plan.best == "close" and plan.runner_up == "ref" and not plan.resolved
    assert "does not beat the runner-up ref" in plan.why_unresolved and "includes 1" in plan.why_unresolved
    assert "not yet resolved" in explain_decision(plan)
    d, low, high = compare_log_time(plan.row("close").measurement, plan.row("ref").measurement)
    assert d == pytest.approx(-math.log(1.1)) and low < 0 < high


def test_one_seed_and_tables_are_never_resolved():
    one = compute_plan([seeded("ref", [1e5], 10.0, 128), seeded("big", [1e5], 40.0, 512)], "ref")
    assert one.best == "big" and not one.resolved and "one seed: uncertainty unknown" in one.why_unresolved
    table = compute_plan([ConfigMeasurement("ref", 1e5, 10.0), ConfigMeasurement("big", 1e5, 40.0)], "ref")
    assert not table.resolved and "uncertainty unknown" in table.why_unresolved


def test_q_noise_counts_too():
    ref = seeded("ref", [1.00e5, 1.01e5, 0.99e5], 10.0, 128, step_sd=0.0)
    big = seeded("big", [1.00e5, 1.01e5, 0.99e5], 11.0, 256, step_sd=0.0)
    assert compute_plan([ref, big], "ref").resolved  # N* agrees closely; q's 10% gain is noise-free
    noisy = [replace(m, log_throughput_sd=1.0, throughput_steps=5) for m in (ref, big)]
    assert not compute_plan(noisy, "ref").resolved  # the same means, but q's steps scatter by a factor e


@pytest.mark.parametrize("seeds", [2, 3])
def test_equal_truth_is_rarely_called_resolved(seeds):
    """Two configurations with the same true T: the percentile-bootstrap overlap rule called 34% of them resolved at 2
    seeds; the test on log T must stay near its 5% (400 simulated sweeps, binomial sd ~1.1%)."""
    rng = np.random.default_rng(seeds)
    resolved = 0
    for _ in range(400):
        a, b = (1e5 * np.exp(0.15 * rng.standard_normal(seeds)) for _ in range(2))
        plan = compute_plan([seeded("a", a, 10.0, 128), seeded("b", b, 10.0, 256)], "a")
        resolved += plan.resolved
    assert resolved / 400 <= 0.08
