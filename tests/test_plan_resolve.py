"""The decision statement tests what it claims, with the seed as the unit (plan/log_time.py, plan/resolve.py): a winner
only when it beats every other configuration on ln T_s = ln N*_s - ln q_s at the 95% level, a near-optimal set whose
ties are called ties only when shown, censored points ruled out only by their bound, and more dispersion never more
confident. Checked on synthetic data with a known truth, coverage by simulation."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from batchscale.plan.decide import compute_plan
from batchscale.plan.explain import explain_decision
from batchscale.plan.log_time import SeedTime, compare, estimate_point, pool_variance, resolution_variance
from batchscale.plan.resolve import NoComparison, compare_log_time
from batchscale.plan.rows import ConfigMeasurement, Decision


def seeded(label: str, n_star_per_seed, q, p: int, censored_at=None) -> ConfigMeasurement:
    """A configuration measured over seeds: each seed's N* (None: censored at `censored_at` samples) and its own q (a
    number for every seed alike, or one per seed); N* and q the geometric means, as plan/sweep_inputs.py forms them."""
    qs = [q] * len(n_star_per_seed) if np.isscalar(q) else list(q)
    times = tuple(SeedTime(math.log(n if n is not None else censored_at), math.log(qq), n is not None)
                  for n, qq in zip(n_star_per_seed, qs))
    reached = [n for n in n_star_per_seed if n is not None]
    return ConfigMeasurement(
        label, float(np.exp(np.mean(np.log(reached)))) if reached else None, float(np.exp(np.mean(np.log(qs)))),
        seeds_reached=len(reached), seeds_censored=len(n_star_per_seed) - len(reached), prompts_per_step=p,
        samples_per_prompt=8, samples_per_step=8 * p, seed_times=times, budget_samples=censored_at)


def pooled(*measurements):
    return pool_variance([m.seed_times for m in measurements])


def test_clear_win_is_resolved_against_every_other_configuration():
    ref = seeded("ref", [1.00e5, 1.05e5, 0.95e5], 10.0, 128)
    mid = seeded("mid", [1.00e5, 1.04e5, 0.97e5], 14.0, 256)
    big = seeded("big", [1.00e5, 1.03e5, 0.98e5], 30.0, 512)
    plan = compute_plan([ref, mid, big], "ref")
    assert (plan.best, plan.runner_up, plan.answer, plan.resolved, plan.why_unresolved) == \
        ("big", "mid", "winner", True, None)
    assert "not yet resolved" not in explain_decision(plan)


def test_close_call_is_unresolved_and_says_against_whom():
    ref = seeded("ref", [1.0e5, 1.3e5, 0.8e5], 10.0, 128)
    close = seeded("close", [1.0e5, 1.3e5, 0.8e5], 11.0, 256)
    plan = compute_plan([ref, close], "ref")
    assert plan.best == "close" and plan.runner_up == "ref" and not plan.resolved
    assert "does not beat the runner-up ref" in plan.why_unresolved and "includes 1" in plan.why_unresolved
    assert "not yet resolved" in explain_decision(plan)
    compared = compare_log_time(plan.row("close").measurement, plan.row("ref").measurement, plan.pool)
    assert compared.difference == pytest.approx(-math.log(1.1)) and compared.low < 0 < compared.high


def test_one_seed_and_tables_are_never_resolved():
    one = compute_plan([seeded("ref", [1e5], 10.0, 128), seeded("big", [1e5], 40.0, 512)], "ref")
    assert one.best == "big" and not one.resolved and "one seed: uncertainty unknown" in one.why_unresolved
    table = compute_plan([ConfigMeasurement("ref", 1e5, 10.0), ConfigMeasurement("big", 1e5, 40.0)], "ref")
    assert not table.resolved and "uncertainty unknown" in table.why_unresolved
    # a one-seed point among two-seed ones: its own spread is unknown, so it is neither beaten nor best
    mixed = compute_plan([seeded("ref", [1e5, 1.02e5], 10.0, 128), seeded("big", [1e5, 1.01e5], 40.0, 512),
                          seeded("lone", [1e5], 5.0, 1024)], "ref")
    assert mixed.answer == "unresolved" and "lone: one seed" in mixed.why_unresolved and "lone" in mixed.contenders


def test_run_level_throughput_scatter_counts_like_seed_scatter():
    """Two runs of a point at 224 and 349 samples/s (load on the machine, not the configuration) are two draws of q;
    the same mean q from steady runs is one sharp value."""
    ref = seeded("ref", [1.00e5, 1.01e5, 0.99e5], 10.0, 128)
    steady = seeded("big", [1.00e5, 1.01e5, 0.99e5], 11.0, 256)
    assert compute_plan([ref, steady], "ref").resolved  # N* agrees closely; q's 10% gain holds in every run
    scattered = seeded("big", [1.00e5, 1.01e5, 0.99e5], [8.0, 11.0, 15.1], 256)  # geometric mean ~11
    assert not compute_plan([ref, scattered], "ref").resolved


def test_a_zero_spread_never_shrinks_a_variance():
    """Both seeds read N* on the same eval point at the same q: their own spread is 0, but the point's variance is
    the pooled one (and at least the eval grid's resolution)."""
    flat = seeded("flat", [2560.0, 2560.0], 100.0, 16)
    others = [seeded("a", [2400.0, 2900.0], 50.0, 4), seeded("b", [3000.0, 3400.0], 80.0, 8)]
    pool = pooled(flat, *others)
    assert estimate_point(flat.seed_times, pool).variance == pytest.approx(pool.variance)
    grid = tuple(replace(t, resolution_var=resolution_variance(512, 2560)) for t in flat.seed_times)
    only = pool_variance([grid, tuple(replace(t, resolution_var=resolution_variance(512, 2560))
                                      for t in seeded("g", [2560.0, 2560.0], 110.0, 32).seed_times)])
    assert only.variance == 0.0  # every seed on the same grid point: no spread at all ...
    assert estimate_point(grid, only).variance == pytest.approx((512 / 2560) ** 2 / 12)  # ... but not known better


def test_equal_grid_readings_do_not_resolve_a_small_difference():
    """N* read exactly on an eval point in every seed: the grid's resolution, not a zero spread, sets the interval."""
    points = [seeded(label, [2560.0, 2560.0], q, p) for label, q, p in (("ref", 100.0, 4), ("p8", 103.0, 8))]
    points = [replace(m, seed_times=tuple(replace(t, resolution_var=resolution_variance(512, 2560))
                                          for t in m.seed_times)) for m in points]
    plan = compute_plan(points, "ref")
    assert plan.best == "p8" and not plan.resolved  # a 3% gain within a 20% eval grid


def audit_sweep(p16_q: tuple[float, float]) -> list[ConfigMeasurement]:
    """The audit's demo (issue 38): both P16 seeds read N* = 2,560 on the eval grid; P16's two runs at p16_q."""
    return [seeded("P4", [2624.0, 2731.0], [118.0, 121.0], 4), seeded("P8", [3072.0, 3136.0], [170.0, 181.0], 8),
            seeded("P16", [2560.0, 2560.0], list(p16_q), 16), seeded("P32", [3300.0, 3900.0], [470.0, 520.0], 32)]


def test_more_dispersion_never_makes_an_answer_more_confident():
    """The audit's case: P16's runs at 290/290 samples/s, then 230/350 (the same mean, more scatter)."""
    order = {"unresolved": 0, "near_optimal": 1, "winner": 2}
    steady, scattered = compute_plan(audit_sweep((290.0, 290.0)), "P4"), compute_plan(audit_sweep((230.0, 350.0)), "P4")
    assert order[scattered.answer] <= order[steady.answer]
    assert not (scattered.answer == "winner" and steady.answer != "winner")
    for label in ("P4", "P8", "P32"):
        a = compare_log_time(steady.row("P16").measurement, steady.row(label).measurement, steady.pool)
        b = compare_log_time(scattered.row("P16").measurement, scattered.row(label).measurement, scattered.pool)
        assert b.high - b.low > a.high - a.low


def test_spreading_a_configurations_seeds_never_narrows_its_comparisons():
    """500 random sweeps of 3-5 points with 2-4 seeds: scaling one point's deviations about its mean by 1.5 (the same
    mean ln T) widens every interval that involves it."""
    rng = np.random.default_rng(0)
    for _ in range(500):
        sweep = []
        for i in range(rng.integers(3, 6)):
            y = rng.normal(rng.normal(0, 0.2), rng.uniform(0.02, 0.3), rng.integers(2, 5))
            sweep.append(tuple(SeedTime(v, 0.0) for v in y))
        pick = rng.integers(len(sweep))
        y = np.array([t.log_samples for t in sweep[pick]])
        spread = list(sweep)
        spread[pick] = tuple(SeedTime(v, 0.0) for v in y.mean() + 1.5 * (y - y.mean()))
        before, after = pool_variance(sweep), pool_variance(spread)
        for j in range(len(sweep)):
            if j == pick:
                continue
            a = compare(estimate_point(sweep[pick], before), estimate_point(sweep[j], before), before)
            b = compare(estimate_point(spread[pick], after), estimate_point(spread[j], after), after)
            assert b.difference == pytest.approx(a.difference) and b.high - b.low >= a.high - a.low - 1e-12


@pytest.mark.parametrize("seeds, spread, low, high", [(2, 1.0, 0.95, 0.995), (3, 1.0, 0.95, 0.995),
                                                      (2, 4.0, 0.94, 0.985), (3, 4.0, 0.94, 0.985)])
def test_the_interval_on_the_log_time_ratio_covers_at_its_level(seeds, spread, low, high):
    """Four configurations, every seed's ln N* with sd 0.1 (one of the compared pair's 4x: `spread`) and its run's ln q
    with sd 0.1 (run-level load): the 95% interval on ln T_a - ln T_b holds the true difference in 2,000 simulated
    sweeps (binomial sd 0.5%) at least as often as stated: 98-99% with a common spread (the floors are conservative),
    95-96.5% when one of the two scatters 4x (measured with 4,000: docs/LOG.md)."""
    rng = np.random.default_rng(seeds)
    mu, sd = np.array([0.0, -0.1, -0.2, 0.05]), np.array([0.1, 0.1 * spread, 0.1, 0.1])
    covered = 0
    for _ in range(2000):
        y = mu[:, None] + sd[:, None] * rng.standard_normal((4, seeds)) + 0.1 * rng.standard_normal((4, seeds))
        points = [tuple(SeedTime(v, 0.0) for v in row) for row in y]
        pool = pool_variance(points)
        compared = compare(estimate_point(points[1], pool), estimate_point(points[2], pool), pool)
        covered += compared.low <= mu[1] - mu[2] <= compared.high
    assert low <= covered / 2000 <= high


@pytest.mark.parametrize("seeds", [2, 3])
def test_equal_truth_is_rarely_called_resolved(seeds):
    """Two configurations with the same true T, runs scattering in N* (sd 0.15) and in q (sd 0.13, the demo's own
    run-to-run scatter): the old test, steps as draws of q, named a winner in 35-40% of such sweeps; 800 simulated
    sweeps stay within the 5% (binomial sd 0.8%)."""
    rng = np.random.default_rng(seeds)
    resolved = 0
    for _ in range(800):
        a, b = (1e5 * np.exp(0.15 * rng.standard_normal(seeds)) for _ in range(2))
        qa, qb = (10.0 * np.exp(0.13 * rng.standard_normal(seeds)) for _ in range(2))
        plan = compute_plan([seeded("a", a, qa, 128), seeded("b", b, qb, 256)], "a")
        resolved += plan.resolved
    assert resolved / 800 <= 0.065


def test_decision_resolved_is_derived_from_the_answer():
    assert Decision("r", [], "r", answer="winner").resolved
    assert not Decision("r", [], "r", answer="unresolved").resolved
    with pytest.raises(TypeError):
        Decision("r", [], "r", resolved=True, answer="unresolved")


def test_a_comparison_is_typed():
    a, b = seeded("a", [1e5, 1.1e5], 10.0, 128), ConfigMeasurement("b", 1e5, 10.0)
    missing = compare_log_time(a, b, pooled(a))
    assert isinstance(missing, NoComparison) and "uncertainty unknown" in missing.why
    assert compare_log_time(a, a, pooled(a)).ratio_text().startswith("T ratio 1.00, 95% interval [")


# --- the answer's kind: a single winner, a near-optimal set, or unresolved ---------------------------------------------

def tight(label: str, n_star: float, q: float, p: int, spread=(1.0, 1.02, 0.98)) -> ConfigMeasurement:
    """Three seeds whose ln N* spreads by ~2%: differences of 10% or more in T are resolved."""
    return seeded(label, [n_star * f for f in spread], q, p)


def test_two_tied_points_that_both_beat_the_reference_are_a_near_optimal_set_not_separated():
    wide = (1.0, 1.1, 0.9)  # the two contenders' seeds scatter by ~10%: 5% apart in T cannot be told apart
    ref = tight("ref", 1e5, 10.0, 128)
    p8 = seeded("p8", [1e5 * f for f in wide], 16.0, 256)
    p16 = seeded("p16", [1.05e5 * f for f in wide], 16.0, 512)
    slow = tight("slow", 1.5e5, 12.0, 1024)  # clearly worse than p8
    plan = compute_plan([ref, p8, p16, slow], "ref")
    assert plan.best == "p8" and plan.answer == "near_optimal" and plan.near_optimal == ("p8", "p16")
    assert not plan.resolved and plan.equivalent is False and plan.joint_confidence == pytest.approx(0.95)
    (ratio,) = plan.near_optimal_ratios
    assert ratio.label == "p16" and ratio.low < 0.9 and ratio.high > 1.11  # reaches outside the margin
    assert "no single winner" in plan.why_unresolved and "each of them beats the reference" in plan.why_unresolved
    text = explain_decision(plan)
    assert text.startswith("Any of p8, p16 (T/T_ref 0.62-0.65; each beats the reference; not separated: T_p16 / T_p8 "
                           f"1.05 [{ratio.low:.2f}, {ratio.high:.2f}]")
    assert "more seeds could change which is fastest" in text and "within the noise" not in text
    assert "p16 loses" not in text and "slow loses" in text


def test_a_tie_is_called_equivalent_only_inside_the_margin_at_joint_confidence():
    """Three members, each interval at 97.5% (Bonferroni over 2) inside [0.9, 1.11]: equivalent."""
    many = [1.0 + 0.002 * k for k in (-2, -1, 0, 1, 2)]  # five seeds, sd ~0.3%
    ref = seeded("ref", [1e5 * f for f in many], 10.0, 128)
    members = [seeded(f"p{p}", [1e5 * f for f in many], 16.0 * (1 + d), p)
               for p, d in ((256, 0.0), (512, -0.001), (1024, -0.002))]
    plan = compute_plan([ref, *members], "ref")
    assert plan.answer == "near_optimal" and plan.near_optimal == ("p256", "p512", "p1024")
    assert plan.joint_confidence == pytest.approx(0.975) and plan.equivalent is True
    assert all(0.9 <= r.low and r.high <= 1 / 0.9 for r in plan.near_optimal_ratios)
    assert "equivalent: T_p512 / T_p256 " in explain_decision(plan) and "at joint 98% (Bonferroni over 2)" in \
        explain_decision(plan)


def test_a_tie_whose_other_member_does_not_beat_the_reference_is_unresolved():
    ref = seeded("ref", [1e5, 1.02e5, 0.98e5], 10.0, 128)
    fast = seeded("fast", [0.5e5, 0.51e5, 0.49e5], 10.0, 256)  # T/T_ref 0.5, tight: beats the reference
    vague = seeded("vague", [0.45e5, 0.9e5, 0.6e5], 10.0, 512)  # too wide to be beaten by fast, or to beat ref
    plan = compute_plan([ref, fast, vague], "ref")
    assert plan.best == "fast" and plan.answer == "unresolved" and plan.near_optimal == ()
    assert "no near-optimal set: vague, which fast does not beat, does not beat the reference ref" in plan.why_unresolved


def test_no_eligible_row_is_the_answer_none():
    plan = compute_plan([seeded("ref", [1e5, 1.1e5], 10.0, 128),
                         replace(seeded("big", [1e5, 1.1e5], 40.0, 512), samples_to_target=None)], "ref")
    assert plan.best == "ref" and plan.answer != "none"  # the reference itself is eligible
    nothing = compute_plan([ConfigMeasurement("ref", 1e5, 10.0, seeds_reached=1, seeds_censored=1)], "ref")
    assert (nothing.best, nothing.answer) == (None, "none")


# --- censoring is bounded, not disqualifying ---------------------------------------------------------------------------

def test_a_censored_point_whose_bound_lies_above_the_winner_is_ruled_out():
    ref = tight("ref", 3000.0, 100.0, 4)
    p8 = tight("p8", 3100.0, 140.0, 8)
    slow = seeded("p64", [None, None], 210.0, 64, censored_at=9000.0)  # T > 43 s against p8's 22 s
    plan = compute_plan([ref, p8, slow], "ref")
    assert plan.answer == "winner" and plan.best == "p8" and plan.budget_cut == ()


def test_a_censored_point_the_budget_cut_is_no_loser_and_no_single_winner_is_named():
    """The audit's machine: P16 needs ~4,961 samples, above the 4,608-sample budget, but at 2.4x the reference's q it
    would be the fastest: the budget cut it, the test did not beat it."""
    ref = tight("P4", 2700.0, 100.0, 4)
    p8 = tight("P8", 3100.0, 140.0, 8)
    p16 = seeded("P16", [None, None], 240.0, 16, censored_at=4608.0)
    plan = compute_plan([ref, p8, p16], "P4")
    assert plan.best == "P8" and plan.answer == "unresolved" and plan.budget_cut == ("P16",)
    assert "the budget cut P16 rather than beat it" in plan.why_unresolved and "P16" in plan.contenders
    partly = seeded("P16", [4300.0, None], 240.0, 16, censored_at=4608.0)
    assert compute_plan([ref, p8, partly], "P4").budget_cut == ("P16",)


def test_a_point_that_never_ran_keeps_any_answer_from_excluding_it():
    ref, p8 = tight("ref", 1e5, 10.0, 128), tight("p8", 1e5, 20.0, 256)
    assert compute_plan([ref, p8], "ref").answer == "winner"
    plan = compute_plan([ref, p8], "ref", not_run=("p64",))
    assert plan.answer == "unresolved" and plan.not_run == ("p64",) and "p64 did not run" in plan.why_unresolved
    alone = compute_plan([ref], "ref", not_run=("p8", "p64"))  # a time budget that ended after the reference ran
    assert alone.answer == "unresolved" and alone.best == "ref"
    text = explain_decision(alone)
    assert "ref (the reference) is the best estimate, not yet resolved: it is the only configuration that reached the target" in text
    assert "covers its rN" not in text and "p8 did not run" in text


def test_plan_json_console_and_report_say_the_same_set(capsys):
    from batchscale.plan.cli import print_plan
    from batchscale.plan.explain import classify_regime, describe_verdict
    from batchscale.plan.make import Plan, plan_document
    from batchscale.plan.answer import classify_answer
    from batchscale.report.tables import verdict

    wide = (1.0, 1.1, 0.9)
    plan = compute_plan([tight("ref", 1e5, 10.0, 128), seeded("p8", [1e5 * f for f in wide], 16.0, 256),
                         seeded("p16", [1.05e5 * f for f in wide], 16.0, 512)], "ref")
    explanation, regime = explain_decision(plan), classify_regime(None, None)
    document = plan_document(Plan(plan, explanation, regime, {"source": "table", "throughput_method": "given"})).to_json()
    assert (document["answer"], document["near_optimal"], document["resolved"]) == ("near_optimal", ["p8", "p16"], False)
    assert document["equivalent"] is False and document["near_optimal_ratios"][0]["label"] == "p16"
    assert document["pooled_df"] == 6 and document["pooled_sd"] > 0
    sentence = describe_verdict(document)
    assert sentence.startswith("Resolved as a near-optimal set") and "any of p8, p16 (T/T_ref 0.62-0.65" in sentence
    assert "not separated" in sentence and verdict(document) == sentence
    assert classify_answer(document).heading == "Near-optimal set: any of p8, p16"
    print_plan(plan, explanation, regime, document)
    out = " ".join(capsys.readouterr().out.split())
    assert "Best: any of p8, p16 (fastest: p8)." in out and f"Verdict: {sentence}" in out and "~ p16" in out


# --- T/T_ref with its interval, per configuration (the report's figure of T/T_ref against B) -------------------------

def test_each_configuration_gets_its_time_ratio_to_the_reference_with_the_tests_interval():
    ref = tight("ref", 3000.0, 100.0, 4)
    fast = tight("fast", 3100.0, 140.0, 8)
    one = seeded("one", [2900.0], 120.0, 16)  # one seed: no interval of its own
    cut = seeded("cut", [None, None], 210.0, 64, censored_at=9000.0)
    plan = compute_plan([ref, fast, one, cut], "ref")
    ratios = {r.label: r for r in plan.reference_ratios}
    assert set(ratios) == {"fast", "cut"}  # not the reference itself, not a one-seed point
    compared = compare_log_time(fast, ref, plan.pool)
    got = ratios["fast"]
    assert got.ratio == pytest.approx(plan.row("fast").normalized_time_to_target)  # the table's T/T_ref, its centre
    assert (got.low, got.high) == pytest.approx((math.exp(compared.low), math.exp(compared.high)))
    assert got.low < got.ratio < got.high and not got.bounded
    bound = ratios["cut"]  # censored: a lower bound, nothing above it
    assert bound.bounded and bound.high is None and bound.low < bound.ratio
    assert bound.ratio == pytest.approx((9000.0 / 210.0) / (3000.0 / 100.0), rel=0.02)
    from batchscale.plan.explain import classify_regime
    from batchscale.plan.make import Plan, plan_document

    rows = {r["label"]: r for r in plan_document(Plan(plan, "", classify_regime(None, None),
                                                      {"source": "table", "throughput_method": "given"}))
            .to_json()["rows"]}
    assert (rows["fast"]["normalized_time_to_target_low"], rows["fast"]["normalized_time_to_target_high"]) == \
        pytest.approx((got.low, got.high))
    assert rows["fast"]["normalized_time_to_target_at_least"] is None
    assert rows["cut"]["normalized_time_to_target_at_least"] == pytest.approx(bound.ratio)
    assert rows["cut"]["normalized_time_to_target_high"] is None
    assert rows["ref"]["normalized_time_to_target_low"] is None and rows["one"]["normalized_time_to_target_low"] is None
