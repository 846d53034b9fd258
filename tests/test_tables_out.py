"""`analyze --csv/--parquet` and `plan --csv/--parquet`: one row per label, units in the column names, values equal
to the JSON documents' through pandas; Parquet refused where pyarrow is absent; bad paths refused before any
compute; written atomically."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import warnings

import pytest

from batchscale.analysis.synthetic import write_synthetic_sweep
from batchscale.cli import main

pd = pytest.importorskip("pandas", reason="the round-trip test reads the tables with pandas (the test extra has it)")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("sweep")
    write_synthetic_sweep(sweep_dir, prompts_per_step=(8, 16, 32), seeds=(0, 1), noise_scale=1024.0, seed_sd=0.1,
                          total_samples=8192)
    run_json("analyze", sweep_dir)  # plan reads its analysis.json
    return sweep_dir


def run_json(*args) -> dict:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), warnings.catch_warnings(record=True):
        assert main([*map(str, args), "--json"]) == 0
    return json.loads(stdout.getvalue())


def records(path) -> dict[str, dict]:
    frame = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
    rows = frame.to_dict("records")
    return {row["label"]: {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
            for row in rows}


def same(cell, value) -> bool:
    if isinstance(value, list):
        return cell == ";".join(map(str, value))
    return cell == value if value is not None else cell is None


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_analysis_table_round_trips_to_the_json(sweep, tmp_path, suffix):
    path = tmp_path / f"analysis{suffix}"
    document = run_json("analyze", sweep, "--out", tmp_path / "out", f"--{suffix[1:]}", path)
    table = records(path)
    assert set(table) == set(document["configs"])
    for label, config in document["configs"].items():
        row = table[label]
        assert row["is_reference"] == (label == document["reference"]) and row["target_score"] == document["target"]
        n_star = config["samples_to_target"]
        assert (row["n_star_samples"], row["n_star_ci_low_samples"], row["n_star_ci_high_samples"]) == \
            (n_star["mean"], n_star["ci_low"], n_star["ci_high"])
        assert (row["seeds_reached"], row["seeds_censored"]) == (n_star["reached"], n_star["censored"])
        assert row["t_target_realized_s"] == config["time_to_target_realized"]
        assert row["seed_count"] == len(config["seeds"])
        for key, value in config.items():
            if key not in ("samples_to_target", "time_to_target_realized"):
                assert same(row[key], value), (label, key, row[key], value)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_plan_table_round_trips_to_the_json(sweep, tmp_path, suffix):
    path = tmp_path / f"plan{suffix}"
    document = run_json("plan", sweep, f"--{suffix[1:]}", path)
    table = records(path)
    assert list(table) == [r["label"] for r in document["rows"]]  # the plan's order
    renamed = {"samples_to_target": "n_star_samples", "time_to_target": "t_target_s",
               "time_to_target_realized": "t_target_realized_s", "normalized_time_to_target": "t_target_normalized",
               "normalized_time_to_target_low": "t_target_normalized_ci_low",
               "normalized_time_to_target_high": "t_target_normalized_ci_high",
               "normalized_time_to_target_at_least": "t_target_normalized_at_least",
               "score": "speedup_over_reference"}
    for entry in document["rows"]:
        row = table[entry["label"]]
        assert row["is_best"] == (entry["label"] == document["best"])
        assert row["is_reference"] == (entry["label"] == document["reference"])
        for key, value in entry.items():
            assert same(row[renamed.get(key, key)], value), (entry["label"], key)
    assert sum(row["is_best"] for row in table.values()) == 1


def test_parquet_without_pyarrow_is_refused_before_any_compute(sweep, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    out = tmp_path / "out"
    assert main(["analyze", str(sweep), "--out", str(out), "--parquet", str(tmp_path / "a.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --parquet") and "pip install pyarrow" in err and "--csv" in err
    assert not out.exists() and not (tmp_path / "a.parquet").exists()
    assert main(["plan", str(sweep), "--parquet", str(tmp_path / "p.parquet")]) == 2


@pytest.mark.parametrize("command", ["analyze", "plan"])
def test_a_table_path_in_a_missing_directory_is_refused_before_any_compute(sweep, tmp_path, capsys, command):
    out = tmp_path / "out"
    extra = ["--out", str(out)] if command == "analyze" else []
    assert main([command, str(sweep), *extra, "--csv", str(tmp_path / "nowhere" / "t.csv")]) == 2
    assert capsys.readouterr().err.startswith("error: --csv") and not out.exists()
    assert main([command, str(sweep), *extra, "--csv", str(tmp_path)]) == 2  # a directory
    assert "is a directory" in capsys.readouterr().err


def test_a_failed_write_leaves_the_previous_table_and_no_temporary(sweep, tmp_path, monkeypatch, capsys):
    path = tmp_path / "plan.csv"
    path.write_text("the previous table\n")

    def full_disk(src, dst):
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr("os.replace", full_disk)
    assert main(["plan", str(sweep), "--csv", str(path)]) == 2
    assert "no space left" in capsys.readouterr().err
    assert path.read_text() == "the previous table\n" and [p.name for p in tmp_path.iterdir()] == ["plan.csv"]


def test_prediction_takes_no_table_flags(tmp_path, capsys):
    """`batchscale predict` prints its own document: it has no --csv (and `plan --predict` is gone, issue 38)."""
    assert main(["predict", str(tmp_path), "--csv", str(tmp_path / "t.csv")]) == 2
    assert "--csv" in capsys.readouterr().err


def test_a_failed_table_write_removes_what_analyze_wrote(sweep, tmp_path, monkeypatch, capsys):
    real_replace = __import__("os").replace

    def full_disk_for_tables(src, dst):
        if str(dst).endswith(".csv"):
            raise OSError(28, "No space left on device", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr("os.replace", full_disk_for_tables)
    out = tmp_path / "out"
    assert main(["analyze", str(sweep), "--out", str(out), "--csv", str(tmp_path / "a.csv")]) == 2
    assert "no space left" in capsys.readouterr().err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []
