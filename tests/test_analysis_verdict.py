"""Synthetic run directories with a known truth for the verdict's edge cases: no learning signal, realized time-to-target
against a known step-time series with a slow warm-up step, PPO with 4 updates per step, the square-root family named by
its exponent, a partly censored reference, and crossings read from evals too far apart."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from batchscale.analysis.analyze import analyze, compute_analysis
from batchscale.analysis.synthetic import write_synthetic_run
from batchscale.cli import main
from batchscale.errors import DataWarning
from batchscale.plan.make import make_plan
from batchscale.rundir import RunDescriptor, summarize_run, write_run


def write_curve_run(run_dir, label, seed, scores, samples_per_step=64, step_s=None, lr_rule="sqrt", **descriptor):
    """One run evaluated after every step: scores[0] at 0 samples, scores[k] after step k; time/step from step_s."""
    steps = len(scores) - 1
    step_s = step_s if step_s is not None else [1.0] * steps
    records = [{"kind": "eval", "step": 0, "samples": 0, "wall_s": 0.0, "eval/accuracy": float(scores[0])}]
    wall = 0.0
    for step in range(1, steps + 1):
        wall += step_s[step - 1]
        samples = step * samples_per_step
        records.append({"kind": "step", "step": step, "samples": samples, "wall_s": wall, "prompts": 8,
                        "reward/mean": 0.0, "response/length_mean": 8.0, "tokens/generated": 8 * samples_per_step,
                        "time/generate": step_s[step - 1] / 2, "time/train": step_s[step - 1] / 2,
                        "time/step": step_s[step - 1], "grad_norm/actor": 1.0, "lr/actor": 1e-5})
        records.append({"kind": "eval", "step": step, "samples": samples, "wall_s": wall,
                        "eval/accuracy": float(scores[step])})
    d = RunDescriptor(label=label, seed=seed, algorithm="grpo", prompts_per_step=samples_per_step // 8,
                      samples_per_prompt=8, samples_per_step=samples_per_step, lr=1e-5, lr_rule=lr_rule,
                      model="synthetic", task="synthetic", source="synthetic", **descriptor)
    return write_run(run_dir, d, records, summarize_run(d, records, finished=True))


def falling_sweep(sweep):
    """Every curve falls from the warm start at 0.148 (one eval of the reference rises by 0.002, as on the CPU)."""
    rng = np.random.default_rng(0)
    for batch in (64, 128, 256):
        for seed in (0, 1):
            scores = 0.148 - 0.004 * np.arange(13) * batch / 64 + 0.006 * rng.standard_normal(13)
            scores[0] = 0.148
            if batch == 64 and seed == 0:
                scores[1] = 0.150
            write_curve_run(sweep / "runs" / f"b{batch}__s{seed}", f"b{batch}", seed, scores, samples_per_step=batch)
    return sweep


def test_no_learning_signal_names_no_winner_in_analyze_plan_and_report(tmp_path, capsys):
    sweep = falling_sweep(tmp_path / "sweep")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        result = analyze(sweep)
    assert result["learning_signal"] is False and result["target"] is None
    assert "no learning signal" in result["why_no_signal"]
    assert all(c["learns"] is False and c["samples_to_target"]["mean"] is None for c in result["configs"].values())
    assert main(["plan", str(sweep), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["best"] is None and doc["resolved"] is False and "no learning signal" in doc["why_unresolved"]
    assert "No configuration can be recommended: no learning signal" in doc["explanation"]
    assert main(["plan", str(sweep)]) == 0
    assert "no learning signal" in capsys.readouterr().out
    assert main(["report", str(sweep)]) == 0
    markdown = (sweep / "report.md").read_text()
    assert "No configuration can be recommended" in markdown and "No learning signal: no verdict" in markdown
    # a target the user gives is measured against, but still no winner is named
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        given = analyze(sweep, target=0.13)
    assert given["learning_signal"] is False and given["configs"]["b64"]["samples_to_target"]["reached"] == 2
    assert make_plan(sweep).decision.best is None


def test_realized_time_sums_step_times_up_to_the_crossing_with_a_slow_warm_up(tmp_path):
    """J = N / 640 after steps of 64 samples; target 0.55 is crossed at N* = 352, half-way through step 6. Step times:
    10 s warm-up, then 1 s: realized T = 10 + 4 + 0.5 = 14.5 s, while q = 64 samples/s (warm-up excluded) gives
    N*/q = 5.5 s."""
    scores = np.arange(13) * 64 / 640
    for seed in (0, 1):
        write_curve_run(tmp_path / "runs" / f"a__s{seed}", "a", seed, scores, step_s=[10.0] + [1.0] * 11)
    result, details = compute_analysis(tmp_path, 0.55, None)
    config = result["configs"]["a"]
    assert config["samples_to_target"]["mean"] == pytest.approx(352.0)
    assert details["labels"]["a"]["realized_per_seed"] == pytest.approx([14.5, 14.5])
    assert config["time_to_target_realized"] == pytest.approx(14.5)
    (tmp_path / "analysis.json").write_text(json.dumps(result))
    row = make_plan(tmp_path).decision.row("a")
    assert row.measurement.throughput_samples_per_s == pytest.approx(64.0) and row.time_to_target_s == pytest.approx(5.5)
    assert row.measurement.extra["time_to_target_realized"] == pytest.approx(14.5)
    assert row.measurement.extra["throughput_warmup_only"] is False


def test_a_run_with_no_step_after_warm_up_is_flagged_not_silently_given_a_warm_up_q(tmp_path):
    for seed in (0, 1):
        write_curve_run(tmp_path / "runs" / f"a__s{seed}", "a", seed, [0.1, 0.9], step_s=[10.0])
    result, _ = compute_analysis(tmp_path, 0.5, None)
    (tmp_path / "analysis.json").write_text(json.dumps(result))
    with pytest.warns(DataWarning, match="no run has a step after the warm-up step"):
        decision = make_plan(tmp_path).decision
    assert decision.row("a").measurement.extra["throughput_warmup_only"] is True


def test_ppo_with_four_updates_per_step_counts_updates_and_fits_grad_noise_on_the_update_batch(tmp_path):
    """2 epochs x 2 mini-batches: a 256-sample step makes 4 updates of 128 samples each."""
    scores = np.arange(13) * 256 / 2560
    for seed in (0, 1):
        write_curve_run(tmp_path / "runs" / f"ppo__s{seed}", "ppo", seed, scores, samples_per_step=256,
                        samples_per_update=128, updates_per_step=4)
        write_curve_run(tmp_path / "runs" / f"one__s{seed}", "one", seed, scores, samples_per_step=256)
    result, details = compute_analysis(tmp_path, 0.5, "one")
    ppo, one = result["configs"]["ppo"], result["configs"]["one"]
    assert ppo["samples_to_target"]["mean"] == one["samples_to_target"]["mean"] == pytest.approx(1280.0)
    assert one["updates_to_target"] == pytest.approx(5.0) and ppo["updates_to_target"] == pytest.approx(20.0)
    assert ppo["update_ratio"] == pytest.approx(4.0)
    assert details["labels"]["ppo"]["step_curve"]["grid"][-1] == pytest.approx(48.0)  # 12 steps x 4 updates
    assert details["grad_noise"]["actor"]["samples_per_update"] == [128.0, 256.0]


def test_lr_rule_a_half_is_the_square_root_family(tmp_path):
    scores = np.linspace(0.1, 0.8, 13)
    for label, rule, batch in (("sqrt64", "sqrt", 64), ("half128", "a=0.5", 128), ("fixed128", "none", 128)):
        write_curve_run(tmp_path / "runs" / f"{label}__s0", label, 0, scores, samples_per_step=batch, lr_rule=rule)
    _, details = compute_analysis(tmp_path, 0.5, None)
    assert details["reference"] == "sqrt64" and set(details["family"]) == {"sqrt64", "half128"}


def test_partly_censored_reference_warns_that_every_rn_is_a_bound(tmp_path):
    rising = np.linspace(0.1, 0.8, 13)
    write_curve_run(tmp_path / "runs" / "ref__s0", "ref", 0, rising)
    write_curve_run(tmp_path / "runs" / "ref__s1", "ref", 1, np.minimum(rising, 0.4))
    write_curve_run(tmp_path / "runs" / "big__s0", "big", 0, rising, samples_per_step=128)
    with pytest.warns(DataWarning, match="every rN is a bound"):
        compute_analysis(tmp_path, 0.6, "ref")


def test_a_crossing_between_evals_far_apart_is_warned_about(tmp_path):
    write_synthetic_run(tmp_path / "sparse" / "runs" / "a__s0", "a", 0, 8, eval_every_samples=4096, eval_sd=0.0)
    with pytest.warns(DataWarning, match="more than 25% of N"):
        compute_analysis(tmp_path / "sparse", 0.5, None)
    write_synthetic_run(tmp_path / "dense" / "runs" / "a__s0", "a", 0, 8, eval_every_samples=256, eval_sd=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        compute_analysis(tmp_path / "dense", 0.5, None)
