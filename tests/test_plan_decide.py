"""The decision rule against hand-computed tables: T = N*/q, T/T_ref = rN / (q/q_ref), argmax q/rN over eligible rows."""

from __future__ import annotations

import pytest

from batchscale.errors import UserError
from batchscale.plan.decide import compute_plan
from batchscale.plan.explain import classify_regime, explain_decision
from batchscale.plan.rows import ConfigMeasurement

REF_SAMPLES, REF_Q = 100_000.0, 10.0  # reference N* (samples) and q (samples/s): T_ref = 10,000 s


def measure(label, r_n, gain, p=None, g=8, **kw) -> ConfigMeasurement:
    """A configuration given by its paper-style ratios to the reference (N*_ref = 1e5 samples, q_ref = 10 samples/s)."""
    samples = None if r_n is None else r_n * REF_SAMPLES
    return ConfigMeasurement(
        label, samples, gain * REF_Q, prompts_per_step=p, samples_per_prompt=g if p else None,
        samples_per_step=p * g if p else None, **kw,
    )  # fmt: skip


def grpo_sweep() -> list[ConfigMeasurement]:
    """Shaped like the paper's GRPO sweep (sqrt-LR, P=128 reference): T/T_ref 0.71 at P=1024, 1.23 / 1.18 past it."""
    return [
        measure("P=128", 1.0, 1.0, p=128),
        measure("P=256", 1.0, 1.2, p=256),
        measure("P=512", 1.05, 1.3, p=512),
        measure("P=1024", 1.0, 1.0 / 0.71, p=1024),
        measure("P=2048", 1.60, 1.30, p=2048),
        measure("P=4096", 1.60, 1.60 / 1.18, p=4096),
    ]


def test_hand_computed_table():
    plan = compute_plan([measure("A", 1.0, 1.0), measure("B", 2.0, 4.0), measure("C", 1.5, 2.0)], "A")
    b, c = plan.row("B"), plan.row("C")
    assert b.r_n == pytest.approx(2.0) and b.throughput_gain == pytest.approx(4.0)
    assert b.time_to_target_s == pytest.approx(200_000 / 40)  # T = N*/q
    assert b.normalized_time_to_target == pytest.approx(0.5)
    assert c.time_to_target_s == pytest.approx(150_000 / 20)
    assert c.normalized_time_to_target == pytest.approx(0.75)
    assert b.score == pytest.approx(2.0)  # (q/q_ref) / rN
    assert plan.best == "B"


def test_normalized_time_equals_penalty_over_gain_for_every_row():
    plan = compute_plan(grpo_sweep(), "P=128")
    ref_time_s = plan.row("P=128").time_to_target_s
    assert ref_time_s == pytest.approx(REF_SAMPLES / REF_Q)
    for row in plan.rows:
        assert row.normalized_time_to_target == pytest.approx(row.time_to_target_s / ref_time_s)
        assert row.normalized_time_to_target == pytest.approx(row.r_n / row.throughput_gain)


def test_paper_fixed_lr_control_takes_longer_than_reference():
    plan = compute_plan([measure("P=128", 1.0, 1.0, p=128), measure("P=256 fixed-LR", 1.67, 1.17, p=256)], "P=128")
    control = plan.row("P=256 fixed-LR")
    assert control.normalized_time_to_target == pytest.approx(1.67 / 1.17)
    assert round(control.normalized_time_to_target, 2) == 1.43  # paper: 1.42x from unrounded inputs
    assert plan.best == "P=128"
    text = explain_decision(plan)
    assert "P=128 (the reference) is the best estimate, not yet resolved" in text
    assert "P=256 fixed-LR loses: rN 1.67 outweighs its 1.17x throughput, T/T_ref = 1.43" in text


def test_paper_grpo_sweep_picks_p1024():
    plan = compute_plan(grpo_sweep(), "P=128")
    assert plan.best == "P=1024"
    assert plan.row("P=1024").normalized_time_to_target == pytest.approx(0.71)
    assert plan.row("P=2048").normalized_time_to_target == pytest.approx(1.60 / 1.30)
    assert round(plan.row("P=2048").normalized_time_to_target, 2) == 1.23
    assert round(plan.row("P=4096").normalized_time_to_target, 2) == 1.18
    text = explain_decision(plan)
    assert text.startswith("P=1024 is the best estimate, not yet resolved: 1.41x throughput for a 1.00x sample penalty (rN), T/T_ref = 0.71")
    assert "P=2048 loses: rN 1.60 outweighs its 1.30x throughput, T/T_ref = 1.23" in text  # the next larger batch


def test_explanation_names_deciding_numbers_of_a_penalized_winner():
    plan = compute_plan(
        [measure("P=128", 1.0, 1.0, p=128), measure("P=1024", 2.2, 3.1, p=1024), measure("P=2048", 1.6, 1.3, p=2048)],
        "P=128",
    )
    text = explain_decision(plan)
    assert "P=1024 is the best estimate, not yet resolved: 3.10x throughput for a 2.20x sample penalty (rN), T/T_ref = 0.71" in text
    assert "P=2048 loses: rN 1.60 outweighs its 1.30x throughput" in text
    assert text.count(".") >= 1 and "\n" not in text


def test_explanation_names_runner_up_when_winner_is_largest_batch():
    plan = compute_plan([measure("P=128", 1.0, 1.0, p=128), measure("P=256", 1.1, 1.5, p=256),
                         measure("P=512", 1.2, 2.4, p=512)], "P=128")  # fmt: skip
    assert plan.best == "P=512"
    text = explain_decision(plan)
    assert "P=256 loses: its 1.50x throughput for rN 1.10 gives T/T_ref = 0.73, above P=512's 0.50" in text


def test_infeasible_rows_never_win_even_when_fastest():
    rows = grpo_sweep() + [measure("P=8192", 1.0, 50.0, p=8192, feasible=False)]
    plan = compute_plan(rows, "P=128")
    assert plan.row("P=8192").normalized_time_to_target == pytest.approx(0.02)
    assert plan.best == "P=1024"
    assert not plan.row("P=8192").eligible
    assert "P=8192 would be faster (T/T_ref = 0.02) but is infeasible" in explain_decision(plan)


def test_censored_rows_never_win_and_show_as_censored():
    rows = [measure("P=128", 1.0, 1.0), measure("P=4096", None, 100.0, seeds_reached=0, seeds_censored=3)]
    plan = compute_plan(rows, "P=128")
    censored = plan.row("P=4096")
    assert censored.measurement.censoring == "censored"
    assert censored.r_n is None and censored.time_to_target_s is None and censored.normalized_time_to_target is None
    assert censored.throughput_gain == pytest.approx(100.0)
    assert plan.best == "P=128"


def test_partly_censored_rows_never_win():
    rows = [measure("P=128", 1.0, 1.0), measure("P=512", 1.0, 3.0, seeds_reached=1, seeds_censored=1)]
    plan = compute_plan(rows, "P=128")
    assert plan.row("P=512").measurement.censoring == "partly censored"
    assert plan.best == "P=128"
    assert "partly censored" in explain_decision(plan)


def test_no_eligible_row_gives_no_winner():
    rows = [measure("A", 1.0, 1.0, seeds_reached=1, seeds_censored=1), measure("B", 1.0, 2.0, feasible=False)]
    plan = compute_plan(rows, "A")
    assert plan.best is None
    text = explain_decision(plan)
    assert text.startswith("No configuration can be recommended") and "B" in text and "A" in text


def test_ties_go_to_fewer_samples_then_smaller_batch():
    plan = compute_plan([measure("ref", 1.0, 1.0, p=64), measure("big", 2.0, 4.0, p=512),
                         measure("mid", 1.5, 3.0, p=256)], "ref")  # fmt: skip
    assert plan.best == "mid"  # both at T/T_ref 0.5; mid needs fewer samples
    plan = compute_plan([measure("ref", 1.0, 1.0, p=64), measure("x", 1.5, 3.0, p=512),
                         measure("y", 1.5, 3.0, p=256)], "ref")  # fmt: skip
    assert plan.best == "y"


def test_best_does_not_depend_on_reference():
    rows = grpo_sweep()
    assert {compute_plan(rows, r.label).best for r in rows} == {"P=1024"}


@pytest.mark.parametrize(
    "rows, reference, field",
    [
        ([measure("A", 1.0, 1.0)], "Z", "reference"),
        ([measure("A", 1.0, 1.0, feasible=False), measure("B", 1.0, 2.0)], "A", "reference 'A'"),
        ([measure("A", None, 1.0, seeds_reached=0), measure("B", 1.0, 2.0)], "A", "reference 'A'"),
        ([measure("A", 1.0, 1.0), measure("A", 1.0, 2.0)], "A", "label 'A'"),
        ([measure("A", 1.0, 1.0), measure("B", 1.0, 0.0)], "A", "label 'B' throughput"),
        ([measure("A", 1.0, 1.0), measure("B", -1.0, 1.0)], "A", "label 'B' samples_to_target"),
        ([], "A", "table"),
    ],
)
def test_bad_inputs_raise_user_error(rows, reference, field):
    with pytest.raises(UserError) as err:
        compute_plan(rows, reference)
    assert err.value.field == field
    assert err.value.fix


def test_regime_generation_knee_first():
    regime = classify_regime(critical_generation_batch=256, critical_training_batch=4096)
    assert regime.name == "generation-knee-first"
    assert "256" in regime.sentence and "4096" in regime.sentence and "near-optimal" in regime.sentence
    assert "tentative" not in regime.sentence


def test_regime_training_critical_first():
    regime = classify_regime(critical_generation_batch=4096, critical_training_batch=512)
    assert regime.name == "training-critical-first"
    assert "beyond" in regime.sentence and "512" in regime.sentence


def test_regime_tentative_when_close_and_unknown_when_missing():
    assert "tentative" in classify_regime(1000, 1200).sentence
    for gen, train in ((None, 512), (512, None), (None, None), (512, -3.0), (float("nan"), 4)):
        regime = classify_regime(gen, train)
        assert regime.name == "unknown" and "missing" in regime.sentence


def test_a_tied_loser_is_called_level_not_above():
    ref = measure("ref", 1.0, 1.0, p=128)
    winner = measure("w", 1.0, 2.0, p=256)
    tied = measure("t", 1.5, 3.0 * 0.9999, p=512)  # T/T_ref 0.50005 vs 0.5: the same to the digits shown
    text = explain_decision(compute_plan([ref, winner, tied], "ref"))
    assert "w is the best estimate, not yet resolved" in text and "t loses" in text and "level with w's 0.50" in text and "above" not in text
    slower = measure("t", 1.5, 2.5, p=512)
    assert "above w's 0.50" in explain_decision(compute_plan([ref, winner, slower], "ref"))


def test_a_slower_loser_is_said_to_lose_by_its_throughput_not_by_its_rn():
    """A loser below the reference's throughput: fewer samples (rN < 1) do not make up for it, and more samples add to
    it; neither reads as "rN outweighs"."""
    ref, winner = measure("ref", 1.0, 1.0, p=64), measure("w", 1.0, 1.5, p=128)
    fewer = measure("f", 0.99, 0.92, p=256)
    text = explain_decision(compute_plan([ref, winner, fewer], "ref"))
    assert "f loses: its 0.92x throughput costs more than rN 0.99 (fewer samples than the reference) saves" in text
    more = measure("m", 1.2, 0.9, p=256)
    text = explain_decision(compute_plan([ref, winner, more], "ref"))
    assert "m loses: it needs rN 1.20 the samples at 0.90x the throughput, T/T_ref = 1.33" in text
    assert "outweighs" not in text


def test_n_star_zero_is_handled_not_a_crash():
    instant = measure("instant", 0.0, 1.0, p=256)  # the target met at this label's first eval
    plan = compute_plan([measure("ref", 1.0, 1.0, p=128), instant], "ref")
    assert plan.best == "instant" and plan.row("instant").time_to_target_s == 0 and plan.row("instant").score is None
    assert not plan.resolved and "N* = 0" in plan.why_unresolved
    at_start = compute_plan([measure("ref", 0.0, 1.0, p=128), measure("big", 1.0, 2.0, p=256)], "ref")
    assert at_start.best is None and "first eval" in at_start.why_unresolved
    assert all(r.r_n is None for r in at_start.rows) and "first eval" in explain_decision(at_start)
