"""What a racing sweep leaves behind reads through analyze, plan and report: the target it fixed (sweep.json race)
and where every target came from (analysis.json target_rule, into report.md), and the points it stopped because they
could no longer win ("stopped: cannot win (T > x s at N = y)" in analysis.json, plan rows, the tables, their shorter
curves drawn)."""

from __future__ import annotations

import json
import warnings
from html import escape

import pytest

from batchscale.analysis.analyze import USER_TARGET_RULE, analyze
from batchscale.analysis.synthetic import write_synthetic_sweep
from batchscale.errors import DataWarning
from batchscale.rundir import RaceFacts, StoppedRun, read_run, summarize_run, write_run, write_sweep_points

REFERENCE, STOPPED_LABEL = "p8_g8_sqrt", "p32_g8_sqrt"
RACE_TARGET, RACE_RULE = 0.62, "80% of the way from the reference's initial to best mean score, over its first seeds"
STOP_AT, STOP_MESSAGE = 2048, "cannot win (T > 41 s at N = 2,048)"


def small_sweep(sweep_dir):
    return write_synthetic_sweep(sweep_dir, prompts_per_step=(8, 16, 32), seeds=(0, 1), control_prompts_per_step=None,
                                 total_samples=8192)


def write_race(sweep_dir, stopped: dict | None = None) -> None:
    points = [{"name": run.name, "label": run.name.split("__s")[0], "seed": int(run.name.split("__s")[1])}
              for run in sorted((sweep_dir / "runs").iterdir())]
    write_sweep_points(sweep_dir, points, RaceFacts(reference=REFERENCE, target=RACE_TARGET, target_rule=RACE_RULE,
                                                    initial_seeds=2, max_seeds=3, time_budget_s=None,
                                                    stopped=stopped or {}))


def stop_run(run_dir, samples: int | None, stopped: StoppedRun) -> None:
    """Rewrite a run as a racing sweep leaves it: its records up to `samples` (None: all), its summary saying why."""
    run = read_run(run_dir)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    kept = [r for r in records if samples is None or r["samples"] <= samples]
    write_run(run_dir, run.descriptor, kept, summarize_run(run.descriptor, kept, finished=True, stopped=stopped),
              overwrite=True)


@pytest.fixture
def raced(tmp_path):
    """A racing sweep: target fixed at 0.62; p32's two seeds stopped at N = 2,048 (below the target there), cannot win;
    one p8 seed stopped on reaching the target (read as any other run)."""
    sweep = small_sweep(tmp_path / "raced")
    for seed in (0, 1):
        stop_run(sweep / "runs" / f"{STOPPED_LABEL}__s{seed}", STOP_AT, StoppedRun(reason="cannot_win", samples=STOP_AT,
                                                                                  message=STOP_MESSAGE))
    stop_run(sweep / "runs" / f"{REFERENCE}__s0", None, StoppedRun(reason="target", samples=8192,
                                                                   message="reached the target 0.62 at N = 3,584"))
    write_race(sweep, {STOPPED_LABEL: STOP_MESSAGE})
    return sweep


def quiet_analyze(*args, **kwargs) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return analyze(*args, **kwargs)


def test_a_racing_sweep_fixes_the_target_and_the_report_says_so(raced):
    from batchscale.report.build import build_report

    result = quiet_analyze(raced)
    assert result["target"] == RACE_TARGET
    assert result["target_rule"] == f"fixed by the racing sweep: {RACE_RULE}"
    assert f"({result['target_rule']})" in (raced / "report.md").read_text()  # the analysis's own report.md
    build_report(raced)
    report = (raced / "report.md").read_text()
    assert f"fixed by the racing sweep: {RACE_RULE}" in report and "given by the user" not in report


def test_a_given_target_is_the_users_and_one_unlike_the_races_is_warned_about(raced):
    with pytest.warns(DataWarning, match="differs from the target 0.62 the racing sweep fixed"):
        result = analyze(raced, target=0.6)
    assert (result["target"], result["target_rule"]) == (0.6, USER_TARGET_RULE)


def test_a_plain_analyze_states_the_default_rule_in_analysis_and_report(tmp_path):
    from batchscale.report.build import build_report

    sweep = small_sweep(tmp_path / "plain")
    result = quiet_analyze(sweep)
    assert result["target_rule"].startswith("default: 80% of the way")
    build_report(sweep)
    for name in ("report.md", "report.html"):
        text = (sweep / name).read_text()
        assert "default: 80% of the way" in text and "given by the user" not in text, name


def test_a_stopped_point_reads_stopped_in_analysis_plan_and_report_and_cannot_win(raced, capsys):
    from batchscale.cli import main
    from batchscale.plan.make import plan_sweep
    from batchscale.report.build import build_report

    result = quiet_analyze(raced)
    assert result["configs"][STOPPED_LABEL]["stopped"] == STOP_MESSAGE
    assert result["configs"][REFERENCE]["stopped"] is None  # stopped on reaching the target: read normally
    assert result["configs"][REFERENCE]["samples_to_target"]["reached"] == 2
    plan = plan_sweep(raced).to_json()
    rows = {row["label"]: row for row in plan["rows"]}
    assert rows[STOPPED_LABEL]["stopped"] == STOP_MESSAGE and not rows[STOPPED_LABEL]["eligible"]
    assert rows["p16_g8_sqrt"]["stopped"] is None and STOPPED_LABEL not in plan["near_optimal"]
    assert plan["best"] != STOPPED_LABEL
    assert main(["plan", str(raced)]) == 0
    assert f"Stopped: {STOPPED_LABEL}: {STOP_MESSAGE}." in " ".join(capsys.readouterr().out.split())
    build_report(raced)
    assert f"stopped: {STOP_MESSAGE}" in (raced / "report.md").read_text()
    assert escape(f"stopped: {STOP_MESSAGE}") in (raced / "report.html").read_text()


def test_a_stopped_points_shorter_curve_is_drawn(raced, monkeypatch):
    import batchscale.analysis.plots as plots
    from batchscale.analysis.analyze import compute_analysis

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        result, details = compute_analysis(raced, None, None)
    curve = details["labels"][STOPPED_LABEL]["curve"]
    assert curve["grid"].size > 1 and curve["grid"].max() == STOP_AT  # shorter than the others' 8,192
    drawn = {}

    def keep_lines(fig, temporary):
        drawn.update({line.get_label(): line.get_xdata() for ax in fig.axes for line in ax.get_lines()})
        plots.plt.close(fig)
        return temporary

    monkeypatch.setattr(plots, "save_figure", keep_lines)
    plots.plot_curves(result, details, "curve", "cumulative samples N", raced / "unused.png")
    assert max(drawn[STOPPED_LABEL]) == STOP_AT and max(drawn[REFERENCE]) == 8192


def test_a_point_stopped_between_seeds_reads_stopped_in_analysis_and_plan_too(tmp_path):
    """The race also stops a point after a finished seed (sweep.race `_stop_losers`), when no run's summary says so:
    sweep.json's race.stopped carries it to analysis.json and plan.json, as demo.json and the console always had it
    (issue 38: P8's `stopped: null`)."""
    from batchscale.plan.make import plan_sweep

    sweep = small_sweep(tmp_path / "between")
    message = "cannot win (T > 39 s at N = 3,584; the leader p16_g8_sqrt reaches the target within 38 s)"
    write_race(sweep, {"p8_g8_sqrt": message})
    result = quiet_analyze(sweep)
    assert result["configs"]["p8_g8_sqrt"]["stopped"] == message
    rows = {row["label"]: row for row in plan_sweep(sweep).to_json()["rows"]}
    assert rows["p8_g8_sqrt"]["stopped"] == message
    assert rows["p8_g8_sqrt"]["eligible"]  # every seed of it reached the target before the stop: it is measured


def test_analysis_json_carries_each_seeds_n_star_samples_and_crossing_gap(raced):
    """The plan's test needs every seed (the seed is the unit): N* (null: censored), the samples it trained (the
    bound a censored seed gives), and the eval interval its crossing was read from."""
    configs = quiet_analyze(raced)["configs"]
    stopped = configs[STOPPED_LABEL]
    assert stopped["n_star_per_seed"] == [None, None] and stopped["samples_trained_per_seed"] == [STOP_AT, STOP_AT]
    reference = configs[REFERENCE]
    assert all(n is not None for n in reference["n_star_per_seed"]) and all(g > 0 for g in
                                                                           reference["crossing_gap_per_seed"])
    assert len(reference["n_star_per_seed"]) == len(reference["seeds"]) == len(reference["crossing_gap_per_seed"])
