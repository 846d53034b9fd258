"""The first-to-last eval gain (analysis.eval_gain): its interval covers a known truth at its stated rate, and it is
read from samples.jsonl only where every eval answer is there."""

from __future__ import annotations

import numpy as np
import pytest

from batchscale.analysis.eval_gain import paired_gain, run_gain, wilson_interval
from batchscale.errors import UserError
from batchscale.rundir.samples import SamplesLog, sample_rows


def test_wilson_interval_matches_the_textbook_values():
    low, high = wilson_interval(56, 256)  # the smollm2-learns start: 0.219
    assert (round(low, 3), round(high, 3)) == (0.172, 0.273)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)


@pytest.mark.parametrize("seeds, start_p, end_p", [(2, 0.22, 0.45), (2, 0.3, 0.3), (3, 0.6, 0.55), (1, 0.1, 0.2)])
def test_the_gain_interval_covers_the_true_gain_at_its_rate(seeds, start_p, end_p):
    """A population of prompts, each with its own chance of being answered right at the start (greedy: fixed by the
    prompt) and by a trained seed (drawn per seed); eval sets of 256 prompts drawn from it, 2,000 times. The truth is
    the population's mean end chance minus its mean start."""
    rng = np.random.default_rng(0)
    population = 20_000
    start_chance = rng.beta(2 * start_p / (1 - start_p), 2, population)  # mean start_p, spread between prompts
    lift = rng.beta(2, 2, population)  # how much of the way to 1 training takes each prompt, mean 0.5
    end_chance = np.clip(start_chance + (end_p - start_p) * 2 * lift, 0, 1)
    start_right = rng.random(population) < start_chance  # greedy at the start: one outcome per prompt
    truth = end_chance.mean() - start_right.mean()
    covered, sims = 0, 2000
    for _ in range(sims):
        picked = rng.choice(population, 256, replace=False)
        ends = rng.random((seeds, 256)) < end_chance[picked]
        low, high = paired_gain(list(start_right[picked]), [list(e) for e in ends]).gain_interval
        covered += low <= truth <= high
    assert 0.93 <= covered / sims <= 0.97, covered / sims


def write_run(path, evals):
    """A run directory's samples.jsonl: evals = [(step, [(prompt, correct), ...]), ...]."""
    path.mkdir(parents=True)
    log = SamplesLog(path)
    for step, rows in evals:
        log.write(sample_rows(step, step * 64, [(p, "resp", "ans", float(c), c) for p, c in rows]))
    log.close()
    return path


def test_the_gain_of_two_seeds_is_read_from_their_samples(tmp_path):
    prompts = [f"q{i}" for i in range(8)]
    start = [(p, i < 2) for i, p in enumerate(prompts)]  # 2 of 8 right
    a = write_run(tmp_path / "s0", [(0, start), (4, [(p, i < 5) for i, p in enumerate(prompts)])])
    b = write_run(tmp_path / "s1", [(0, start), (2, start), (4, [(p, i in (0, 1, 2, 7)) for i, p in enumerate(prompts)])])
    gain = run_gain([a, b], eval_size=8)
    assert gain.start == 0.25 and gain.end == pytest.approx((5 + 4) / 16)
    assert gain.gain == pytest.approx(gain.end - gain.start) and gain.seeds == 2 and gain.prompts == 8
    assert gain.gain_interval[0] < gain.gain < gain.gain_interval[1]
    assert gain.to_json()["learned"] == gain.learned


def test_a_gain_needs_every_answer_and_a_shared_start(tmp_path):
    few = write_run(tmp_path / "few", [(0, [("q0", True), ("q1", False)]), (4, [("q0", True), ("q1", True)])])
    with pytest.raises(UserError, match="run.log_samples = 4"):
        run_gain([few], eval_size=4)
    other = write_run(tmp_path / "other", [(0, [("q0", False), ("q1", False)]), (4, [("q0", True), ("q1", True)])])
    with pytest.raises(UserError, match="do not share a start"):
        run_gain([few, other], eval_size=2)
