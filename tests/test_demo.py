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
