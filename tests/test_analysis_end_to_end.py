"""`batchscale analyze` end to end on synthetic run directories written here, through `main()` as a user runs it."""

import contextlib
import io
import json
import warnings

import pytest

from batchscale.analysis.analyze import analyze
from batchscale.analysis.plots import PLOT_FILES
from batchscale.analysis.synthetic import write_synthetic_run, write_synthetic_sweep
from batchscale.cli import main

CONFIG_KEYS = {
    "prompts_per_step", "samples_per_prompt", "samples_per_step", "samples_per_update", "updates_per_step", "lr",
    "lr_rule", "seeds", "samples_to_target", "r_n",
    "updates_to_target", "update_ratio", "grad_norm_actor", "aligned", "time_to_target_realized", "learns", "r_n_predicted",
    "rollout_mode", "max_staleness", "staleness_mean", "stopped",
    "n_star_per_seed", "samples_trained_per_seed", "crossing_gap_per_seed",  # issue 38: the seed is the unit of the test
}
NOISE_SCALE = 1024.0  # the synthetic B_simple and the batch where the sample penalty (1 + B/noise_scale) bites


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """sqrt-LR family P = 8..256 at G = 8 (B = 64..2048), plus a fixed-LR control at P = 16 learning 1.6x slower."""
    sweep_dir = tmp_path_factory.mktemp("sweep")
    write_synthetic_sweep(sweep_dir, prompts_per_step=(8, 16, 32, 128, 256), seeds=(0, 1, 2), noise_scale=NOISE_SCALE,
                          seed_sd=0.1, total_samples=16384)
    (sweep_dir / "runs" / "README").mkdir()  # a stray directory: skipped with a warning
    return sweep_dir


@pytest.fixture(scope="module")
def analysed(sweep, tmp_path_factory):
    """The JSON printed by `batchscale analyze SWEEP --json --out OUT`, and OUT."""
    out_dir = tmp_path_factory.mktemp("out")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), warnings.catch_warnings(record=True):
        assert main(["analyze", str(sweep), "--json", "--out", str(out_dir)]) == 0
    return json.loads(stdout.getvalue()), out_dir  # only JSON on stdout, or this fails


def test_schema_is_exactly_the_issues(analysed):
    result, out_dir = analysed
    assert set(result) == {"schema_version", "reference", "target", "target_rule", "configs", "grad_norm_slope",
                           "b_simple", "smooth_window", "learning_signal", "why_no_signal",
                           "prediction", "score"}
    assert result["learning_signal"] is True and result["why_no_signal"] is None and result["smooth_window"] == 1
    for config in result["configs"].values():
        assert set(config) == CONFIG_KEYS
        assert set(config["samples_to_target"]) == {"mean", "ci_low", "ci_high", "reached", "censored", "log_mean",
                                                    "log_sd", "interval"}
    assert json.loads((out_dir / "analysis.json").read_text()) == result


def test_reference_target_and_penalties(analysed):
    result, _ = analysed
    configs = result["configs"]
    assert result["reference"] == "p8_g8_sqrt"  # smallest samples_per_step among the sqrt-LR labels
    assert 0.1 < result["target"] < 0.8  # between the synthetic initial and final scores
    reference = configs["p8_g8_sqrt"]
    assert reference["r_n"] == 1.0 and reference["update_ratio"] == 1.0
    for label, config in configs.items():
        n_star = config["samples_to_target"]
        assert n_star["reached"] == 3 and n_star["censored"] == 0, label
        assert n_star["ci_low"] <= n_star["mean"] <= n_star["ci_high"]
        assert config["r_n"] == pytest.approx(n_star["mean"] / reference["samples_to_target"]["mean"])
        assert config["updates_to_target"] == pytest.approx(n_star["mean"] / config["samples_per_step"])
        assert config["update_ratio"] == pytest.approx(config["r_n"] * 64 / config["samples_per_step"])
    # Truth: rN = (1 + B/1024) / (1 + 64/1024); B = 2048 -> 2.82, B = 1024 -> 1.88.
    assert configs["p256_g8_sqrt"]["r_n"] == pytest.approx(2.82, rel=0.2)
    assert configs["p128_g8_sqrt"]["r_n"] == pytest.approx(1.88, rel=0.2)
    assert configs["p16_g8_sqrt"]["update_ratio"] < 0.67  # doubled batch under sqrt-LR: close to the ideal 0.5
    assert configs["p16_g8_fixed"]["r_n"] > 1.3  # the fixed-LR control needs more samples than the reference


def test_alignment_family_and_break(analysed):
    configs = analysed[0]["configs"]
    assert configs["p8_g8_sqrt"]["aligned"] is True
    assert configs["p16_g8_sqrt"]["aligned"] is True
    assert configs["p128_g8_sqrt"]["aligned"] is False
    assert configs["p256_g8_sqrt"]["aligned"] is False
    assert configs["p16_g8_fixed"]["aligned"] is False


def test_smooth_window_option_is_recorded(sweep, tmp_path, capsys):
    assert main(["analyze", str(sweep), "--smooth-window", "3", "--json", "--out", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["smooth_window"] == 3
    assert "centred 3-eval moving average (zero lag)" in (tmp_path / "report.md").read_text()


def test_gradient_noise_scale_recovered(analysed):
    result, _ = analysed
    assert result["b_simple"] == pytest.approx(NOISE_SCALE, rel=0.3)
    assert -0.55 < result["grad_norm_slope"] < -0.3  # near -1/2 over the aligned range
    norms = [result["configs"][f"p{p}_g8_sqrt"]["grad_norm_actor"] for p in (8, 16, 32, 128, 256)]
    assert norms == sorted(norms, reverse=True)


def test_plots_and_report_written_nothing_half_written(analysed):
    _, out_dir = analysed
    for name in PLOT_FILES.values():
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out_dir / "report.md").read_text()
    assert "p8_g8_sqrt" in report and "Alignment breaks at samples_per_step" in report and "no run.json" in report
    assert not list(out_dir.glob(".*.tmp"))


def test_single_run_dir_and_all_censored_target(tmp_path, capsys):
    run_dir = write_synthetic_run(tmp_path / "solo", "solo", 0, prompts_per_step=8, total_samples=4096)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = analyze(run_dir, target=0.99)
    messages = " | ".join(str(w.message) for w in caught)
    assert "above every observed score" in messages and "every seed is censored" in messages
    config = result["configs"]["solo"]
    assert config["samples_to_target"] == {"mean": None, "ci_low": None, "ci_high": None, "reached": 0, "censored": 1,
                                           "log_mean": None, "log_sd": None,
                                           "interval": "no seed reached the target: no interval"}
    assert config["r_n"] is None and config["aligned"] is None  # one seed: no seed-to-seed band
    assert (run_dir / "analysis.json").is_file()
    # Through the CLI the same thing is said on stderr, exit code 0.
    assert main(["analyze", str(run_dir), "--target", "0.99"]) == 0
    assert "every seed is censored" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv_tail, message",
    [
        (["--reference", "nope"], "unknown label 'nope'"),
        (["--target", "nan"], "finite number"),
        (["--smooth-window", "2"], "--smooth-window: must be an odd number"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(sweep, tmp_path, capsys, argv_tail, message):
    out_dir = tmp_path / "out"
    assert main(["analyze", str(sweep), "--out", str(out_dir), *argv_tail]) == 2
    assert message in capsys.readouterr().err
    assert not out_dir.exists() or not any(out_dir.iterdir())


def test_no_runs_found_exits_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["analyze", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "no run directories" in err and "Traceback" not in err
    assert not (tmp_path / "empty" / "analysis.json").exists()


@pytest.mark.filterwarnings("ignore::batchscale.errors.DataWarning")
def test_failure_while_rendering_leaves_no_output(sweep, tmp_path, monkeypatch):
    import batchscale.analysis.plots as plots

    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(plots, "plot_r_n", fail)
    out_dir = tmp_path / "out"
    with pytest.raises(RuntimeError, match="disk full"):
        analyze(sweep, out=out_dir)
    assert list(out_dir.iterdir()) == []  # no analysis.json, no PNG, no temporary file


def test_rn_predicted_from_the_reference_runs_noise_scale(analysed):
    """Issue 16: the reference's logged B_noise (synthetic: noise_scale times 5% lognormal noise) predicts every
    label's rN by the formula; the synthetic truth follows the same law, so the sqrt-LR family's measured rN agrees."""
    result, out_dir = analysed
    prediction, configs = result["prediction"], result["configs"]
    assert prediction["label"] == result["reference"]
    b_noise = prediction["b_noise"]["value"]
    assert b_noise == pytest.approx(NOISE_SCALE, rel=0.02)
    assert prediction["b_noise"]["low"] < b_noise < prediction["b_noise"]["high"]
    def formula(config):
        return (1 + config["samples_per_update"] / b_noise) / (1 + 64 / b_noise)

    for label, config in configs.items():
        if config["lr_rule"] == "sqrt":
            assert config["r_n_predicted"] == formula(config), label
            assert config["r_n"] == pytest.approx(config["r_n_predicted"], rel=0.2), label
        else:  # the reference's lr family only (issue 38): the formula does not speak for the fixed-LR control
            assert config["r_n_predicted"] is None, label
    assert prediction["lr_rule"] == "sqrt" and prediction["other_rule_labels"] == ["p16_g8_fixed"]
    assert configs["p16_g8_fixed"]["r_n"] > 1.3 * formula(configs["p16_g8_fixed"])  # what B_noise cannot foresee
    # one run of the reference out of 6 labels x 3 seeds, each step timed 1 s in the synthetic runs
    steps = {label: 16384 // config["samples_per_step"] for label, config in configs.items()}
    assert prediction["prediction_compute_s"] == steps["p8_g8_sqrt"]
    assert prediction["compute_fraction"] == pytest.approx(steps["p8_g8_sqrt"] / (3 * sum(steps.values())))
    report = (out_dir / "report.md").read_text()
    assert "## Predicted from one run" in report and "Not predicted, not ranked: p16_g8_fixed" in report


def test_no_noise_scale_logged_means_no_prediction(tmp_path):
    for prompts in (8, 16):
        run_dir = write_synthetic_run(tmp_path / "runs" / f"p{prompts}__s0", f"p{prompts}", 0, prompts)
        metrics = run_dir / "metrics.jsonl"
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        metrics.write_text("".join(json.dumps({k: v for k, v in r.items() if not k.startswith("gns/")}) + "\n"
                                   for r in records))
    with warnings.catch_warnings(record=True):
        result = analyze(tmp_path)
    assert result["prediction"] is None
    assert all(config["r_n_predicted"] is None for config in result["configs"].values())
    assert "log no `gns/b_noise`" in (tmp_path / "report.md").read_text()
