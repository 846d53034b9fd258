"""The project's first regression data from a real model: the SmolLM2-135M-Instruct racing sweep
(benchmarks/smollm2-sweep.toml, run once on a 2-core AMD EPYC, Zen 2, AVX2 only; BENCHMARKS.md "SmolLM2-135M sweep").
Its run directories (metrics.jsonl, run.json, summary.json, config.json; no weights) lie in
tests/fixtures/smollm2_sweep/, and `expected.json` beside them holds what `analyze --target 0.4` and `plan` answered
when the sweep ran. Any change to the estimators, the verdict or the plan that moves this answer fails here: a change
that should move it rewrites expected.json in the same commit, with the reason in docs/LOG.md
(`python tests/test_smollm2_sweep_fixture.py --record` writes it anew)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from batchscale.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "smollm2_sweep"
TARGET = "0.4"
ROW_KEYS = ("label", "r_n", "throughput_gain", "normalized_time_to_target", "normalized_time_to_target_low",
            "normalized_time_to_target_high", "censoring", "eligible")
N_STAR_KEYS = ("mean", "ci_low", "ci_high", "reached", "censored")
PREDICTION_KEYS = ("label", "b_noise", "b_noise_fitted", "b_noise_fitted_low", "b_noise_fitted_high")


def answer(sweep: Path, capture) -> dict:
    """analyze then plan on a copy of the sweep: the parts of their documents the answer consists of."""
    assert main(["analyze", str(sweep), "--target", TARGET, "--json"]) == 0
    analysis = json.loads(capture())
    assert main(["plan", str(sweep), "--json"]) == 0
    plan = json.loads(capture())
    return {
        "reference": analysis["reference"],
        "labels": {label: {"seeds": entry["seeds"], "r_n": entry["r_n"],
                           "samples_to_target": {key: entry["samples_to_target"][key] for key in N_STAR_KEYS}}
                   for label, entry in sorted(analysis["configs"].items())},
        "prediction": {key: (analysis["prediction"] or {}).get(key) for key in PREDICTION_KEYS},
        "best": plan["best"],
        "answer": plan["answer"],
        "resolved": plan["resolved"],
        "rows": [{key: row.get(key) for key in ROW_KEYS} for row in plan["rows"]],
        "explanation": plan["explanation"],
    }


def close(found, expected, where: str = "") -> None:
    """Equal, floats to 1e-9 relative: the same numbers on any CPU (numpy reductions may reorder)."""
    if isinstance(expected, float) and isinstance(found, (int, float)):
        assert found == pytest.approx(expected, rel=1e-9), where
    elif isinstance(expected, dict):
        assert isinstance(found, dict) and found.keys() == expected.keys(), where
        for key in expected:
            close(found[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(found, list) and len(found) == len(expected), where
        for i, (a, b) in enumerate(zip(found, expected)):
            close(a, b, f"{where}[{i}]")
    else:
        assert found == expected, where


@pytest.fixture
def sweep(tmp_path) -> Path:
    copy = tmp_path / "smollm2_sweep"
    shutil.copytree(FIXTURE, copy, ignore=shutil.ignore_patterns("expected.json"))
    return copy


def test_the_fixture_holds_logs_and_no_weights():
    files = [p for p in FIXTURE.rglob("*") if p.is_file()]
    assert {p.name for p in files} <= {"metrics.jsonl", "run.json", "summary.json", "config.json", "sweep.json",
                                      "expected.json"}
    assert sum(p.stat().st_size for p in files) < 512 * 1024
    assert len({p.parent.name for p in files if p.name == "summary.json"}) >= 6  # >= 3 batch sizes x 2 seeds


def test_analyze_and_plan_give_the_recorded_answer(sweep, capsys):
    expected = json.loads((FIXTURE / "expected.json").read_text())
    found = answer(sweep, lambda: capsys.readouterr().out)
    close(found, expected)
    # and it is an answer about these runs: the winner is one of them, the explanation names it
    assert found["best"] in found["labels"] and found["best"] in found["explanation"]


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    import contextlib
    import io
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "smollm2_sweep"
        shutil.copytree(FIXTURE, copy, ignore=shutil.ignore_patterns("expected.json"))
        buffer = io.StringIO()

        def capture() -> str:
            text = buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
            return text

        with contextlib.redirect_stdout(buffer):
            recorded = answer(copy, capture)
    (FIXTURE / "expected.json").write_text(json.dumps(recorded, indent=2) + "\n")
    print(json.dumps(recorded, indent=2))
