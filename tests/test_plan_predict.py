"""`batchscale predict RUN_DIR`: on synthetic runs with a known B_noise the rN table is the formula's exactly;
phase times follow the profiles; B_noise is the ratio of the per-step terms' means over the second half; bad input is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from document_fixtures import write_generation_profile, write_training_profile

from batchscale.analysis.synthetic import write_synthetic_run
from batchscale.cli import main
from batchscale.rundir import GenerationProfile, TrainingProfile, read_document, read_run

B_NOISE = 512.0


def run_plan(capsys, *args) -> tuple[int, str, str]:
    code = main(["plan", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_predict(capsys, *args) -> tuple[int, str, str]:
    code = main(["predict", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture()
def run_dir(tmp_path):
    """P = 16 x G = 8: B_ref = 128 samples per step; each phase 0.5 s; gns/b_noise = 512 at every step."""
    return write_synthetic_run(tmp_path / "run", "p16", 0, 16, noise_scale=B_NOISE, gns_sd=0.0)


def test_predict_reproduces_the_formula_rn_table_exactly(run_dir, capsys):
    code, out, _ = run_predict(capsys, run_dir, "--batches", "32,256,1024,4096", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["b_noise"] == {"value": B_NOISE, "low": B_NOISE, "high": B_NOISE, "resolved": True,
                              "method": "ratio of means"}
    assert doc["why_unresolved"] is None
    assert doc["reference"]["samples_per_step"] == 128 and doc["reference"]["label"] == "p16"
    rows = {r["samples_per_step"]: r for r in doc["rows"]}
    assert sorted(rows) == [32, 128, 256, 1024, 4096]  # the reference is always a row
    for batch, row in rows.items():
        assert set(row) >= {"samples_per_step", "r_n_predicted", "throughput_gain", "time_to_target_normalized"}
        assert row["r_n_predicted"] == (1 + batch / B_NOISE) / (1 + 128 / B_NOISE)
        assert row["throughput_gain"] == pytest.approx(1.0)  # no profile: constant samples/s
        assert row["time_to_target_normalized"] == pytest.approx(row["r_n_predicted"])
    assert doc["best"] == {"samples_per_step": 32, "low": 32, "high": 32}  # no speed-up: the smallest batch wins
    assert doc["lr_rule"] == "sqrt"  # every candidate is a point of the run's lr family (issue 38)
    code, out, _ = run_predict(capsys, run_dir)
    assert "LR family: each batch at the run's lr rule (sqrt)" in " ".join(out.split())
    assert "a batch at a fixed LR (or another rule) is not a point this prediction speaks for" in " ".join(out.split())


def test_predict_with_profiles_follows_each_phase_model(run_dir, tmp_path, capsys):
    gen_path = write_generation_profile(tmp_path / "gen.json")
    train_path = write_training_profile(tmp_path / "train.json")
    code, out, _ = run_predict(capsys, run_dir, "--generation-profile", gen_path,
                            "--training-profile", train_path, "--batches", "64,256,512,2048", "--json")
    assert code == 0
    doc = json.loads(out)
    b_half = read_document(gen_path, GenerationProfile).knee.b_half
    fit = read_document(train_path, TrainingProfile).fit

    def step_s(batch):  # the run's 0.5 s of generation and 0.5 s of training carried by each profile's ratio
        generation = 0.5 * (batch + b_half) / (128 + b_half)
        training = 0.5 * (fit.seconds_fixed + fit.seconds_per_token * 40 * batch) / (
            fit.seconds_fixed + fit.seconds_per_token * 40 * 128)
        return generation + training

    for row in doc["rows"]:
        batch = row["samples_per_step"]
        gain = (batch / step_s(batch)) / (128 / step_s(128))
        assert row["throughput_gain"] == pytest.approx(gain, rel=1e-9)
        assert row["time_to_target_normalized"] == pytest.approx(row["r_n_predicted"] / gain, rel=1e-9)
    times = {r["samples_per_step"]: r["time_to_target_normalized"] for r in doc["rows"]}
    assert doc["best"]["samples_per_step"] == min(times, key=times.get)
    assert "knee fit" in doc["throughput_method"] and "profile fit" in doc["throughput_method"]


def test_b_noise_is_the_ratio_of_means_over_the_second_half_with_its_interval(tmp_path, capsys):
    run_dir = write_synthetic_run(tmp_path / "noisy", "p16", 0, 16, noise_scale=B_NOISE, gns_sd=0.3)
    code, out, _ = run_predict(capsys, run_dir, "--json")
    assert code == 0
    doc = json.loads(out)
    steps = read_run(run_dir).steps
    window = steps[len(steps) // 2:]
    ratio = np.mean([r["gns/trace_sigma"] for r in window]) / np.mean([r["gns/grad_sq"] for r in window])
    assert doc["b_noise"]["value"] == pytest.approx(ratio)
    assert doc["b_noise"]["low"] < doc["b_noise"]["value"] < doc["b_noise"]["high"]
    assert doc["b_noise"]["resolved"] is True and doc["why_unresolved"] is None
    assert doc["b_noise_steps"] == len(window)
    assert doc["best"]["low"] <= doc["best"]["samples_per_step"] <= doc["best"]["high"]
    # the text table says the same
    code, out, _ = run_predict(capsys, run_dir)
    assert code == 0 and "Predicted best" in out and "B_noise" in out and "80% interval" in out


def test_roofline_marks_candidates_whose_kv_cache_does_not_fit(run_dir, capsys):
    code, out, _ = run_predict(capsys, run_dir, "--model", "Qwen2.5-7B", "--hardware", "H100-SXM",
                            "--context", "8192", "--batches", "64,4096", "--json")
    assert code == 0
    doc = json.loads(out)
    feasible = {r["samples_per_step"]: r["feasible"] for r in doc["rows"]}
    assert feasible[64] and not feasible[4096]
    assert doc["best"]["samples_per_step"] != 4096
    gains = {r["samples_per_step"]: r["throughput_gain"] for r in doc["rows"]}
    assert gains[64] < 1 < gains[4096]  # decode amortizes its weights over more sequences


def rewrite_grad_sq(run_dir, value) -> None:
    """Replace every step's gns/grad_sq by value(step)."""
    metrics = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    for r in records:
        if r["kind"] == "step":
            r["gns/grad_sq"] = value(r["step"])
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_an_unresolved_noise_scale_names_no_best_batch(run_dir, capsys):
    """|G|^2 estimates that average to zero: the gradient is noise at this batch. B_noise is null, no best batch
    is named, and the reason says a longer run or a larger batch is needed."""
    rewrite_grad_sq(run_dir, lambda step: 1e-3 if step % 2 else -1e-3)
    code, out, _ = run_predict(capsys, run_dir, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["b_noise"]["value"] is None and doc["b_noise"]["high"] is None and doc["b_noise"]["resolved"] is False
    assert doc["best"] == {"samples_per_step": None, "low": None, "high": None}
    assert "not above zero" in doc["why_unresolved"] and "several times longer" in doc["why_unresolved"]
    assert all(r["r_n_predicted"] == 1.0 for r in doc["rows"])
    code, out, _ = run_predict(capsys, run_dir)
    assert code == 0 and "not named" in out and "Predicted best" not in out


def test_a_barely_resolved_noise_scale_says_how_many_more_samples(run_dir, capsys):
    """A positive mean |G|^2 under a scatter that reaches below zero: the reason names the samples that would
    resolve it, at this scatter (the window's standard error shrinking as 1/sqrt(steps))."""
    rewrite_grad_sq(run_dir, lambda step: 0.002 + (0.02 if step % 2 else -0.02) * (1 + step % 3))
    code, out, _ = run_predict(capsys, run_dir, "--json")
    doc = json.loads(out)
    assert doc["b_noise"]["value"] is not None and doc["b_noise"]["high"] is None
    assert doc["best"]["samples_per_step"] is None
    more = int(doc["why_unresolved"].split("about ")[1].split(" more samples")[0].replace(",", ""))
    assert more > 0 and more % 128 == 0  # whole steps of B_ref = 128


def test_a_short_run_with_every_estimate_positive_says_it_is_too_short(run_dir, capsys):
    """Issue 45: six steps, every gns/grad_sq positive, were reported as "the mean |G|^2 estimate is not above zero":
    the second half's three steps are too few for an interval, and the reason says so."""
    metrics = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records if r["step"] <= 6))
    rewrite_grad_sq(run_dir, lambda step: 0.01 * (1 + step % 2))
    code, out, _ = run_predict(capsys, run_dir, "--json")
    assert code == 0
    reason = json.loads(out)["why_unresolved"]
    assert "not above zero" not in reason
    assert "holds 3 step(s)" in reason and "too few for an interval (at least 8)" in reason
    assert "at least 16 steps" in reason


def strip_noise_scale(run_dir):
    metrics = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps({k: v for k, v in r.items() if not k.startswith("gns/")}) + "\n"
                               for r in records))


@pytest.mark.parametrize("args, needle", [
    (["--batches", "64,zero"], "--batches"),
    (["--batches", "0"], "--batches"),
    (["--training-profile", "t.json", "--model", "Qwen2.5-7B", "--hardware", "H100-SXM"], "not both"),
    (["--model", "Qwen2.5-7B"], "--model/--hardware"),
])
def test_bad_input_is_one_clear_line(run_dir, capsys, args, needle):
    code, _, err = run_predict(capsys, run_dir, *args)
    assert code == 2 and needle in err and "Fix:" in err and "Traceback" not in err


def test_a_run_without_the_noise_scale_says_so(run_dir, capsys):
    strip_noise_scale(run_dir)
    code, _, err = run_predict(capsys, run_dir)
    assert code == 2 and "gns/b_noise" in err and "Traceback" not in err


def test_plan_has_no_prediction_flags(run_dir, tmp_path, capsys):
    """The prediction is `batchscale predict` only (its `plan --predict` alias was dropped, issue 38)."""
    for args in ((tmp_path, "--predict", run_dir), (tmp_path, "--batches", "64")):
        code, _, err = run_plan(capsys, *args)
        assert code == 2 and err.startswith("error: No such option") and len(err.strip().splitlines()) == 1


def test_phase_models_without_fits_interpolate_the_profile_rows():
    """No knee: responses/s interpolated log-log between concurrencies, proportional to c below the smallest, flat
    past the largest, and waves of max_concurrency; no cost fit: seconds per sample interpolated the same way."""
    from document_fixtures import generation_profile

    from batchscale.plan import phase_times

    profile = generation_profile([2, 8], [80.0, 160.0]).model_copy(update={"knee": None})  # 10 and 20 responses/s
    generation = phase_times.generation_from_profile(profile, max_concurrency=None)
    assert generation.seconds(4) == pytest.approx(4 / (10 * 2 ** 0.5))  # halfway in log c: sqrt(10 * 20)
    assert generation.seconds(1) == pytest.approx(1 / 5.0) and generation.seconds(32) == pytest.approx(32 / 20.0)
    capped = phase_times.generation_from_profile(profile, max_concurrency=8)
    assert capped.seconds(64) == pytest.approx(64 / 20.0)  # decodes in waves of 8 at 20 responses/s
    assert "rows interpolated" in generation.method
