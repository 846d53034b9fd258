"""`batchscale import` through the CLI: exit codes, wrong formats, empty files, --out safety, --json, and the round trip
into analysis (imported runs read like native ones)."""

from __future__ import annotations

import json

import pytest
from test_ingest_trl import write_trainer_state
from test_ingest_verl import write_verl_log

from batchscale.cli import main

P, G = 4, 2
BATCH_FLAGS = ["--prompts-per-step", str(P), "--samples-per-prompt", str(G)]


def test_unknown_format_lists_valid_ones(tmp_path, capsys):
    log = write_verl_log(tmp_path / "log.jsonl")
    assert main(["import", "openrlhf-jsonl", str(log), "--out", str(tmp_path / "run"), *BATCH_FLAGS]) == 2
    err = capsys.readouterr().err
    assert "unknown format 'openrlhf-jsonl'" in err and "verl, openrlhf, tensorboard, trl, wandb-csv" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("fmt", ["verl", "openrlhf", "tensorboard", "trl", "wandb-csv"])
def test_empty_file_fails_and_writes_nothing(tmp_path, capsys, fmt):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert main(["import", fmt, str(empty), "--out", str(tmp_path / "run"), *BATCH_FLAGS]) == 2
    assert "empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.log"]


def test_wrong_format_for_the_file_is_a_clear_error(tmp_path, capsys):
    log = write_verl_log(tmp_path / "log.jsonl")
    for fmt in ("openrlhf", "trl", "tensorboard", "wandb-csv"):
        assert main(["import", fmt, str(log), "--out", str(tmp_path / "run"), *BATCH_FLAGS]) == 2
        assert "is FORMAT right?" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_out_holding_a_run_needs_overwrite(tmp_path, capsys):
    log = write_verl_log(tmp_path / "log.jsonl")
    args = ["import", "verl", str(log), "--out", str(tmp_path / "run"), *BATCH_FLAGS]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--label", "second"]) == 2
    assert "choose another --out or pass --overwrite" in capsys.readouterr().err
    assert main([*args, "--label", "second", "--overwrite", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["run"]["label"] == "second"
    assert json.loads((tmp_path / "run" / "run.json").read_text())["label"] == "second"


def test_imported_runs_load_in_analysis(tmp_path):
    runs = pytest.importorskip("batchscale.analysis.runs")
    sweep = tmp_path / "sweep" / "runs"
    for seed in (0, 1):
        log = write_verl_log(tmp_path / f"verl{seed}.jsonl")
        assert main(["import", "verl", str(log), "--out", str(sweep / f"verl-a__s{seed}"), "--label", "verl-a",
                     "--seed", str(seed), *BATCH_FLAGS]) == 0
    state = write_trainer_state(tmp_path / "trainer_state.json")
    assert main(["import", "trl", str(state), "--out", str(sweep / "trl-b__s0"), "--label", "trl-b", *BATCH_FLAGS]) == 0
    by_label = runs.load_runs(tmp_path / "sweep")
    assert sorted(by_label) == ["trl-b", "verl-a"] and len(by_label["verl-a"]) == 2
    run = by_label["verl-a"][0]
    assert run.samples_per_step == P * G and run.evals[0]["samples"] == 0 and len(run.steps) == 6
