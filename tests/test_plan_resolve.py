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


# --- the answer's kind: a single winner, a near-optimal set, or unresolved (plan/resolve.py) --------------------------

def tight(label: str, n_star: float, q: float, p: int, spread=(1.0, 1.02, 0.98)) -> ConfigMeasurement:
    """Three seeds whose ln N* spreads by ~2%: differences of 10% or more in T are resolved."""
    return seeded(label, [n_star * f for f in spread], q, p, step_sd=0.01)


def test_a_clear_winner_is_the_answer_winner():
    plan = compute_plan([tight("ref", 1e5, 10.0, 128), tight("mid", 1e5, 14.0, 256), tight("big", 1e5, 30.0, 512)],
                        "ref")
    assert (plan.answer, plan.near_optimal, plan.resolved) == ("winner", (), True)


def test_two_tied_points_that_both_beat_the_reference_are_a_near_optimal_set():
    wide = (1.0, 1.1, 0.9)  # the two contenders' seeds scatter by ~10%: 5% apart in T cannot be told apart
    ref = tight("ref", 1e5, 10.0, 128)
    p8 = seeded("p8", [1e5 * f for f in wide], 16.0, 256)
    p16 = seeded("p16", [1.05e5 * f for f in wide], 16.0, 512)
    slow = tight("slow", 1.5e5, 12.0, 1024)  # clearly worse than p8
    plan = compute_plan([ref, p8, p16, slow], "ref")
    assert plan.best == "p8" and plan.answer == "near_optimal" and plan.near_optimal == ("p8", "p16")
    assert not plan.resolved  # resolved stays a single winner's
    assert "no single winner" in plan.why_unresolved and "each of them beats the reference" in plan.why_unresolved
    text = explain_decision(plan)
    assert text.startswith("Any of p8, p16 (T/T_ref 0.62-0.66; each beats the reference; the difference between them "
                           "is within the noise)")
    assert "add seeds" not in text and "p16 loses" not in text and "slow loses" in text


def test_a_tie_whose_other_member_does_not_beat_the_reference_is_unresolved():
    ref = seeded("ref", [1e5, 1.02e5, 0.98e5], 10.0, 128)
    fast = seeded("fast", [0.5e5, 0.51e5, 0.49e5], 10.0, 256)  # T/T_ref 0.5, tight: beats the reference
    vague = seeded("vague", [0.3e5, 1.2e5, 0.6e5], 10.0, 512)  # too wide to be beaten by fast, or to beat ref
    plan = compute_plan([ref, fast, vague], "ref")
    assert plan.best == "fast" and plan.answer == "unresolved" and plan.near_optimal == ()
    assert "no near-optimal set: vague, which fast does not beat, does not beat the reference ref" in plan.why_unresolved


def test_a_third_point_neither_beaten_by_the_best_nor_beating_the_reference_is_unresolved():
    wide = (1.0, 1.1, 0.9)
    ref = tight("ref", 1e5, 10.0, 128)
    p8 = seeded("p8", [1e5 * f for f in wide], 16.0, 256)
    p16 = seeded("p16", [1.05e5 * f for f in wide], 16.0, 512)
    third = seeded("third", [0.9e5, 2.0e5, 1.3e5], 11.0, 1024)  # slower than p8, spread too wide to call either way
    assert compare_log_time(third, ref)[2] >= 0 and compare_log_time(p8, third)[2] >= 0
    plan = compute_plan([ref, p8, p16, third], "ref")
    assert plan.answer == "unresolved" and "third, which p8 does not beat, does not beat the reference" in \
        plan.why_unresolved


def test_one_seed_is_unresolved_not_a_set():
    plan = compute_plan([seeded("ref", [1e5], 10.0, 128), seeded("a", [1e5], 20.0, 256),
                         seeded("b", [1.02e5], 20.0, 512)], "ref")
    assert plan.answer == "unresolved" and plan.near_optimal == () and "one seed" in plan.why_unresolved
    table = compute_plan([ConfigMeasurement("ref", 1e5, 10.0), ConfigMeasurement("a", 1e5, 20.0),
                          ConfigMeasurement("b", 1.02e5, 20.0)], "ref")
    assert table.answer == "unresolved" and "uncertainty unknown" in table.why_unresolved


def test_no_eligible_row_is_the_answer_none():
    plan = compute_plan([seeded("ref", [1e5, 1.1e5], 10.0, 128),
                         replace(seeded("big", [1e5, 1.1e5], 40.0, 512), samples_to_target=None)], "ref")
    assert plan.best == "ref" and plan.answer != "none"  # the reference itself is eligible
    nothing = compute_plan([ConfigMeasurement("ref", 1e5, 10.0, seeds_reached=1, seeds_censored=1)], "ref")
    assert (nothing.best, nothing.answer) == (None, "none")


def test_plan_json_console_and_report_say_the_same_set(capsys):
    from batchscale.plan.cli import print_plan
    from batchscale.plan.explain import classify_regime, describe_verdict
    from batchscale.plan.make import plan_document
    from batchscale.report.tables import headline, verdict

    wide = (1.0, 1.1, 0.9)
    plan = compute_plan([tight("ref", 1e5, 10.0, 128), seeded("p8", [1e5 * f for f in wide], 16.0, 256),
                         seeded("p16", [1.05e5 * f for f in wide], 16.0, 512)], "ref")
    explanation, regime = explain_decision(plan), classify_regime(None, None)
    document = plan_document(plan, explanation, regime, {"source": "table", "throughput_method": "given"}).to_json()
    assert (document["answer"], document["near_optimal"], document["resolved"]) == ("near_optimal", ["p8", "p16"], False)
    sentence = describe_verdict(document)
    assert sentence.startswith("Resolved as a near-optimal set") and "any of p8, p16 (T/T_ref 0.62-0.66" in sentence
    assert verdict(document) == sentence
    assert headline(document) == "Best configuration: p8, the fastest of a near-optimal set: any of p8, p16"
    print_plan(plan, explanation, regime, document)
    out = " ".join(capsys.readouterr().out.split())
    assert "Best: any of p8, p16 (fastest: p8)." in out and f"Verdict: {sentence}" in out and "~ p16" in out
