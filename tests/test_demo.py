"""`batchscale demo --quick`: the two-stage procedure end to end, producing a report with the decision."""

from __future__ import annotations

import json

import pytest

from batchscale.cli import main


@pytest.mark.slow
def test_quick_demo_produces_a_report_with_the_decision(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    labels = {row["label"] for row in result["rows"]}
    assert labels == {"grpo-P8-G8-sqrt", "grpo-P16-G8-sqrt", "grpo-P32-G8-sqrt", "grpo-P32-G8-none"}
    assert result["best"] in labels and result["reference"] == "grpo-P8-G8-sqrt"
    assert result["answer"] in ("winner", "near_optimal", "unresolved", "none")
    assert result["resolved"] == (result["answer"] == "winner")
    assert result["resolved"] or result["answer"] == "near_optimal" or result["why_unresolved"]
    assert set(result["seconds"]) == {"setup", "sweep", "profiles", "analysis", "report"}
    # the quick demo races with the default rule: the target is fixed on the reference's two seeds and recorded
    race = result["race"]
    assert race["target"] == result["target"] and "reference's initial to best" in result["target_rule"]
    # every point's budget is sized from the reference's N* (never below the sweep file's 1,536 samples), so the race
    # may train more than the sweep file's grid: the share it reports can pass 100%
    assert race["budgets"] and all(budget >= 1536 for budget in race["budgets"].values())
    assert set(race["budgets"]) | set(race["not_run"]) == labels and race["samples_trained"] > 0
    for name in ("sweep.toml", "analysis.json", "plan.json", "report.html", "report.md", "demo.json",
                 "profiles/generation.json", "profiles/training.json"):
        assert (out / name).is_file(), name
    html = (out / "report.html").read_text()
    assert result["best"] in html and "T/T_ref" in html
    # every sweep run is an ordinary, finished run directory; every point got its two first seeds
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert all((out / "runs" / r / "summary.json").is_file() for r in runs)
    assert {r.rsplit("__s", 1)[0] for r in runs} == labels and len(runs) == sum(race["seeds"].values())
    # a rerun resumes: the sweep skips the finished runs
    assert main(["demo", "--quick", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seconds"]["sweep"] < result["seconds"]["sweep"]


def test_the_demo_says_its_own_eval_spacing_is_a_choice_and_hands_on_other_warnings(tmp_path, capsys):
    """Issue 45: the demo warned about its own eval spacing. A crossing read from evals more than 25% of N* apart is
    the demo's design (FULL: 512 samples, the spacing the racing rule was simulated at), said in one note; every other
    DataWarning still reaches the caller. Synthetic runs that evaluate every 1,024 samples trip the check."""
    import warnings

    from batchscale.analysis.synthetic import write_synthetic_sweep
    from batchscale.demo import FULL, analyze_demo, sweep_toml
    from batchscale.errors import DataWarning, SparseEvalWarning

    sweep = write_synthetic_sweep(tmp_path / "sweep", prompts_per_step=(8, 64), seeds=(0, 1), seed_sd=0.0)
    (tmp_path / "sweep" / "runs" / "p8_g8_sqrt__s0" / "metrics.jsonl").open("a").write('{"kind": "st')  # torn line
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        analysis = analyze_demo(sweep, FULL)
    assert analysis["reference"] and not [w for w in caught if issubclass(w.category, SparseEvalWarning)]
    assert [w for w in caught if issubclass(w.category, DataWarning)]  # the torn line is still warned about
    note = " ".join(capsys.readouterr().err.split())  # the console is stderr's
    assert "more than 25% of N* apart" in note and "every 512 samples by design" in note and "simulated" in note
    # and the demo's sweep keeps every eval example, so the report counts fixed and broken answers over the eval set
    assert f'"run.log_samples" = {FULL.eval_size}' in sweep_toml(FULL)
