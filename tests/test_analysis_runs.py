"""Grouping runs by label for the analysis, and the curves built from them (the reader's own policy: test_rundir.py)."""

import json

import numpy as np
import pytest

from batchscale.analysis.curves import build_common_grid, extract_eval_curve, smooth_scores, summarize_seed_curves
from batchscale.analysis.runs import load_runs
from batchscale.analysis.synthetic import write_synthetic_run
from batchscale.errors import DataWarning, UserError
from batchscale.rundir import find_run_dirs, read_run


def write_run(run_dir, label="a", seed=0, records=None, samples_per_step=64):
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"label": label, "seed": seed, "samples_per_step": samples_per_step}))
    records = records if records is not None else [
        {"kind": "eval", "step": 0, "samples": 0, "wall_s": 0, "eval/accuracy": 0.1},
        {"kind": "step", "step": 1, "samples": 64, "wall_s": 1, "grad_norm/actor": 1.0},
        {"kind": "eval", "step": 1, "samples": 64, "wall_s": 1, "eval/accuracy": 0.3},
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


def test_layouts_single_run_dir_of_runs_and_sweep(tmp_path):
    single = write_run(tmp_path / "single")
    assert find_run_dirs(single) == [single]
    write_run(tmp_path / "flat" / "a__s0")
    write_run(tmp_path / "flat" / "a__s1", seed=1)
    assert len(find_run_dirs(tmp_path / "flat")) == 2
    write_run(tmp_path / "sweep" / "runs" / "a__s0")
    (tmp_path / "sweep" / "runs" / "notes").mkdir()
    with pytest.warns(DataWarning, match="no run.json"):
        assert [p.name for p in find_run_dirs(tmp_path / "sweep")] == ["a__s0"]


def test_no_runs_is_user_error(tmp_path):
    with pytest.raises(UserError) as error:
        find_run_dirs(tmp_path)
    assert error.value.field == "path" and "no run directories" in error.value.rule


def test_resumed_duplicate_records_last_one_wins(tmp_path):
    records = [
        {"kind": "eval", "step": 0, "samples": 0, "wall_s": 0, "eval/accuracy": 0.1},
        {"kind": "step", "step": 1, "samples": 64, "wall_s": 1, "grad_norm/actor": 9.0},
        {"kind": "step", "step": 1, "samples": 64, "wall_s": 2, "grad_norm/actor": 1.0},
        {"kind": "eval", "step": 1, "samples": 64, "wall_s": 2, "eval/score": 0.4},
    ]
    run = read_run(write_run(tmp_path / "r", records=records))
    assert [r["grad_norm/actor"] for r in run.steps] == [1.0]
    samples, scores = extract_eval_curve(run)
    assert samples.tolist() == [0.0, 64.0] and scores.tolist() == [0.1, 0.4]  # eval/score when no eval/accuracy


def test_missing_run_json_keys_and_inconsistent_labels(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.json").write_text(json.dumps({"label": "a"}))
    (bad / "metrics.jsonl").write_text("")
    with pytest.raises(UserError, match="run.json seed: field required"):
        read_run(bad)
    write_run(tmp_path / "mixed" / "a__s0", samples_per_step=64)
    write_run(tmp_path / "mixed" / "a__s1", seed=1, samples_per_step=128)
    with pytest.raises(UserError, match="samples_per_step"):
        load_runs(tmp_path / "mixed")


def test_runs_grouped_by_label_seeds_sorted(tmp_path):
    for label, seed in [("b", 1), ("a", 0), ("b", 0)]:
        write_synthetic_run(tmp_path / f"{label}__s{seed}", label, seed, prompts_per_step=8, total_samples=1024)
    by_label = load_runs(tmp_path)
    assert list(by_label) == ["a", "b"]
    assert [r.seed for r in by_label["b"]] == [0, 1]


def test_common_grid_and_seed_mean_stay_within_observed_ranges():
    short = (np.array([0.0, 100.0, 200.0]), np.array([0.0, 1.0, 2.0]))
    long = (np.array([0.0, 150.0, 300.0]), np.array([0.0, 3.0, 6.0]))
    grid = build_common_grid([short, long])
    assert grid.tolist() == [0.0, 100.0, 150.0, 200.0]
    summary = summarize_seed_curves([short, long])
    assert summary["mean"].tolist() == pytest.approx([0.0, 1.5, 2.25, 3.0])


def test_centred_smoothing_has_no_lag_and_refuses_even_windows():
    line = np.arange(10.0)
    for window in (3, 5):
        assert smooth_scores(line, window).tolist() == pytest.approx(line.tolist())  # zero lag on a straight stretch
    step = np.array([0.0, 0.0, 1.0, 1.0])
    assert smooth_scores(step, 3).tolist() == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])  # symmetric about the jump
    assert smooth_scores(step, 1) is step
    with pytest.raises(ValueError):
        smooth_scores(step, 2)


@pytest.mark.parametrize("window", [1, 3, 5])
def test_smoothed_n_star_matches_the_known_truth_at_every_batch(tmp_path, window):
    """Noise-free synthetic curves evaluated every 512 samples at every batch: N* from the (smoothed) evals lies within
    1% of the analytic crossing. A trailing average would read it late by (window-1)/2 spacings (7% at window 3)."""
    from batchscale.analysis.analyze import compute_analysis
    from batchscale.analysis.synthetic import compute_synthetic_score

    target, samples_scale, noise_scale = 0.5, 8000.0, 2048.0
    for prompts in (8, 32, 64):  # B = 64, 256, 512
        write_synthetic_run(tmp_path / "runs" / f"p{prompts}__s0", f"p{prompts}", 0, prompts, total_samples=32768,
                            eval_every_samples=512, samples_scale=samples_scale, noise_scale=noise_scale, seed_sd=0.0,
                            eval_sd=0.0)
    result, _ = compute_analysis(tmp_path, target, "p8", smooth_window=window)
    for label, config in result["configs"].items():
        batch = config["samples_per_step"]
        grid = np.linspace(0, 32768, 200001)
        truth = grid[np.argmax(compute_synthetic_score(grid, batch, noise_scale, samples_scale) >= target)]
        assert config["samples_to_target"]["mean"] == pytest.approx(truth, rel=0.01), (label, window)


def test_even_smoothing_window_is_refused_before_any_compute(tmp_path):
    from batchscale.analysis.analyze import compute_analysis

    write_synthetic_run(tmp_path / "runs" / "a__s0", "a", 0, 8)
    with pytest.raises(UserError, match="--smooth-window"):
        compute_analysis(tmp_path, None, None, smooth_window=2)
