"""Alignment statistic: accepts a copy that differs only by seed noise, flags a shifted curve."""

import numpy as np

from batchscale.analysis.alignment import find_alignment_break, measure_alignment

SAMPLES = np.linspace(0, 10_000, 21)


def draw_seed_curves(rng, seeds: int, samples_scale: float = 2000.0, seed_sd: float = 0.1, eval_sd: float = 0.02):
    """Seeds of J(N) = 0.8 - 0.7 exp(-N / scale): per-seed speed factor (time-correlated) plus per-eval noise."""
    curves = []
    for _ in range(seeds):
        scale = samples_scale * np.exp(seed_sd * rng.standard_normal())
        scores = 0.8 - 0.7 * np.exp(-SAMPLES / scale) + eval_sd * rng.standard_normal(SAMPLES.size)
        curves.append((SAMPLES.copy(), scores))
    return curves


def test_seed_noise_copy_is_accepted():
    rng = np.random.default_rng(0)
    accepted = 0
    for _ in range(50):
        reference, copy = draw_seed_curves(rng, 3), draw_seed_curves(rng, 3)
        accepted += measure_alignment(copy, reference)["aligned"]
    # Same process, different seeds: accepted nearly always (a band, not a 5%-level test).
    assert accepted >= 45, accepted


def test_shifted_curve_is_flagged_and_direction_reported():
    rng = np.random.default_rng(1)
    flagged = 0
    for _ in range(50):
        reference = draw_seed_curves(rng, 3)
        slower = draw_seed_curves(rng, 3, samples_scale=2000.0 * 1.6)  # needs 1.6x the samples, like rN = 1.6
        result = measure_alignment(slower, reference)
        flagged += result["aligned"] is False
        assert result["signed"] < 0
    assert flagged >= 45, flagged


def test_constant_offset_is_flagged():
    rng = np.random.default_rng(2)
    reference = draw_seed_curves(rng, 3)
    shifted = [(n, j - 0.1) for n, j in draw_seed_curves(rng, 3)]
    result = measure_alignment(shifted, reference)
    assert result["aligned"] is False and result["statistic"] > 2


def test_reference_against_itself_and_undetermined_cases():
    rng = np.random.default_rng(3)
    reference = draw_seed_curves(rng, 3)
    assert measure_alignment(reference, reference)["statistic"] == 0.0
    single = draw_seed_curves(rng, 1)
    undetermined = measure_alignment(single, single)
    assert undetermined["aligned"] is None and "fewer than 3 seeds" in undetermined["reason"]
    disjoint = [(n + 20_000, j) for n, j in reference]
    assert measure_alignment(disjoint, reference)["aligned"] is None


def test_only_the_common_sample_range_is_compared():
    # The label ran twice as long as the reference; what happens after the reference ends must not matter.
    rng = np.random.default_rng(4)
    reference = draw_seed_curves(rng, 3)
    longer = [(np.concatenate([n, n[1:] + 10_000]), np.concatenate([j, np.zeros(20)])) for n, j in reference]
    result = measure_alignment(longer, reference)
    assert result["sample_range"] == [0.0, 10_000.0]
    assert result["statistic"] == 0.0


def test_alignment_break_needs_two_consecutive_failing_batches():
    family = [(64, True), (128, True), (256, None), (512, False), (1024, False)]
    found = find_alignment_break(family, 64)
    assert (found["samples_per_step"], found["status"]) == (512, "breaks") and "256" in found["note"]
    assert find_alignment_break([(64, True), (128, True)], 64)["status"] == "holds"
    one_failure = find_alignment_break([(64, True), (128, False), (256, True), (512, True)], 64)
    assert one_failure["status"] == "holds"  # a single failing label between aligned ones is noise, not a break
    assert find_alignment_break([(64, True), (128, True), (256, False)], 64)["status"] == "undetermined"
    assert find_alignment_break([(64, True), (128, None), (256, True)], 64)["status"] == "undetermined"
    matched = [(64, True), (128, True), (128, False), (256, False)]  # matched P x G pairs share a batch
    assert find_alignment_break(matched, 64)["samples_per_step"] == 128
