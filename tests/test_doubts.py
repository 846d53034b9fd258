"""plan.doubts (issue 45, Deliver 5): measurements to doubt are flagged with what to do, on synthetic inputs whose
truth is known (a scatter, a fit, a mismatch built in or not), and reach the console of plan, predict and profile."""

from __future__ import annotations

import json

import numpy as np
import pytest

from document_fixtures import generation_profile, write_training_profile
from test_plan_cli import make_sweep, run_plan

from batchscale.analysis.synthetic import write_synthetic_run
from batchscale.cli import main
from batchscale.plan.doubts import (R2_FLOOR, SCATTER_LIMIT, fit_doubts, mismatch_doubts, run_doubts,
                                    throughput_doubts)
from batchscale.plan.rows import ConfigMeasurement
from batchscale.rundir import TrainingProfile, read_document, write_document
from batchscale.systems.knee import fit_saturating_throughput, fit_training_cost


def measured(label, q, seeds=(), p=8, g=8, **extra) -> ConfigMeasurement:
    spread = {"throughput_seeds": len(seeds), "throughput_min_samples_per_s": min(seeds),
              "throughput_max_samples_per_s": max(seeds)} if seeds else {}
    return ConfigMeasurement(label, 1000.0, q, prompts_per_step=p, samples_per_prompt=g, samples_per_step=p * g,
                             extra={**spread, **extra})


def test_seeds_of_one_point_that_ran_at_different_speeds_are_doubted_and_agreeing_ones_are_not():
    doubts = throughput_doubts([measured("p8", 68.5, seeds=(52.0, 85.0)),
                                measured("p16", 100.0, seeds=(98, 102), p=16)])
    assert [d.subject for d in doubts] == ["p8"]
    assert doubts[0].kind == "throughput_scatter"
    assert "52.0 to 85.0 samples/s (1.63x apart)" in doubts[0].line() and "--workers 1" in doubts[0].action
    # just inside the limit: no doubt; just outside: one
    assert not throughput_doubts([measured("a", 1.0, seeds=(1.0, SCATTER_LIMIT * 0.999))])
    assert throughput_doubts([measured("a", 1.0, seeds=(1.0, SCATTER_LIMIT * 1.001))])


def test_two_labels_running_the_same_batch_the_same_way_must_agree():
    same = [measured("p8-lr1", 52.0), measured("p8-lr2", 85.0), measured("p16", 120.0, p=16)]
    doubts = throughput_doubts(same)
    assert len(doubts) == 1 and doubts[0].subject == "p8-lr1, p8-lr2"
    assert "P=8, G=8" in doubts[0].finding and "52.0 and 85.0 samples/s" in doubts[0].finding
    # the same batch run another way (async overlaps generation with training) is allowed to differ
    assert not throughput_doubts(same, {"p8-lr1": "sync", "p8-lr2": "async"})
    # other G at the same B_train is other work (other prompts, other lengths): not compared
    assert not throughput_doubts([measured("p8g8", 52.0), measured("p16g4", 85.0, p=16, g=4)])


def test_a_good_fit_is_not_doubted_and_a_poor_or_unphysical_one_is():
    levels = np.array([1, 2, 4, 8, 16, 32, 64])
    knee = fit_saturating_throughput(levels, 1000 * levels / (levels + 8))
    assert not fit_doubts("gen.json", generation_knee=knee)
    rng = np.random.default_rng(0)
    noisy = fit_saturating_throughput(levels, 500 + rng.normal(0, 150, len(levels)).clip(-400, 400))
    assert noisy.r2 < R2_FLOOR
    (doubt,) = fit_doubts("gen.json", generation_knee=noisy)
    assert doubt.kind == "poor_fit" and f"R^2 {noisy.r2:.2f}" in doubt.finding and "--repeats" in doubt.action

    tokens = np.array([320, 640, 1280, 2560])
    assert not fit_doubts("t.json", training_fit=fit_training_cost(tokens, 0.05 + 2e-4 * tokens))
    # the case: R^2 0.29 with a negative intercept (timings that do not grow with tokens, load in between)
    bad = fit_training_cost(tokens, [0.30, 0.10, 0.45, 0.40])
    assert bad.r2 < R2_FLOOR and bad.seconds_fixed > 0  # this one is poor but not negative
    negative = fit_training_cost(tokens, [0.01, 0.12, 0.20, 0.52])
    assert negative.seconds_fixed < 0 and negative.r2 > R2_FLOOR
    assert "R^2" in fit_doubts("t.json", training_fit=bad)[0].finding
    (doubt,) = fit_doubts("t.json", training_fit=negative)
    assert "negative fixed cost" in doubt.finding and "R^2" not in doubt.finding


def test_a_profile_in_other_arithmetic_or_threads_than_the_runs_is_doubted():
    runs = [{"train_compute_dtype": "float32", "torch_threads": 1}, {"train_compute_dtype": "float32",
                                                                       "torch_threads": 1}]
    assert not mismatch_doubts("t.json", "float32", 1, runs)
    assert not mismatch_doubts("t.json", "bfloat16", 2, [{}])  # an import's summary says neither: nothing to compare
    dtype, threads = mismatch_doubts("t.json", "bfloat16", 2, runs)
    assert "measured bfloat16 training arithmetic, the runs trained in float32" in dtype.finding
    assert "--compute-dtype float32" in dtype.action and "--threads 1" in threads.action


def test_plan_prints_the_doubts_on_stderr_after_its_table(tmp_path, capsys):
    sweep = make_sweep(tmp_path)  # P4's two seeds ran at 16 and 8 samples/s
    levels = [1, 2, 4, 8, 16]
    write_document(sweep / "profiles" / "generation.json", generation_profile(levels, [50.0, 10.0, 60.0, 12.0, 55.0]))
    code, out, err = run_plan(capsys, sweep, "--json")
    assert code == 0 and out.lstrip().startswith("{")  # stdout stays the document
    assert "doubt: P4: its 2 seeds ran at 8.0 to 16.0 samples/s (2.00x apart)" in err
    assert "doubt: generation.json: the knee" in err
    assert "P16" not in err  # its seeds agree


@pytest.mark.parametrize("dtype, expected", [("float32", False), ("bfloat16", True)])
def test_predict_doubts_a_training_profile_in_another_arithmetic(tmp_path, capsys, dtype, expected):
    run_dir = write_synthetic_run(tmp_path / "run", "p16", 0, 16, noise_scale=512.0, gns_sd=0.2)
    path = write_training_profile(tmp_path / "t.json")
    profile = read_document(path, TrainingProfile)
    write_document(path, profile.model_copy(update={"compute_dtype": dtype}))
    summary = run_dir / "summary.json"
    data = json.loads(summary.read_text())
    data["machine"] = {**data["machine"], "train_compute_dtype": "float32", "torch_threads": 2}
    summary.write_text(json.dumps(data))
    assert any(d.kind == "profile_mismatch" for d in run_doubts(run_dir, path)) is expected
    assert main(["predict", str(run_dir), "--training-profile", str(path)]) == 0
    err = capsys.readouterr().err
    assert ("doubt: t.json measured bfloat16 training arithmetic" in err) is expected
    assert str(tmp_path) not in err  # the profile by its name


def test_profile_prints_a_poor_fit_as_a_doubt_beside_the_profile(capsys):
    from batchscale.profile.cli import show

    good = generation_profile([1, 2, 4, 8, 16], [100.0 * b / (b + 4) for b in (1, 2, 4, 8, 16)])
    show(good, True, print)
    assert "doubt:" not in capsys.readouterr().err
    poor = generation_profile([1, 2, 4, 8, 16], [50.0, 10.0, 60.0, 12.0, 55.0])
    show(poor, True, print)
    captured = capsys.readouterr()
    assert captured.out.lstrip().startswith("{")  # --json: stdout stays the document
    assert captured.err.startswith("doubt: this profile: the knee q(B) = q_max * B / (B + B_half) explains R^2 ")
