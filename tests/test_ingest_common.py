"""Shared checks for imported run directories, plus tests of the mapping helpers and the run-directory writer.

`check_run_dir` is imported by the other test_ingest_* modules: it validates a run directory against the run-log
contract of DESIGN.md (every record has kind/step/samples/wall_s, samples = step x P x G, run.json's flat fields).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchscale.errors import UserError
from batchscale.ingest.common import detect_style, normalize_trl_keys, parse_step, pick_eval_primary
from batchscale.ingest.rundir import write_run_dir

RUN_JSON_KEYS = ("label", "seed", "algorithm", "prompts_per_step", "samples_per_prompt", "samples_per_step", "lr",
                 "lr_rule", "model", "task", "source", "import")


def check_run_dir(run_dir: Path, prompts_per_step: int, samples_per_prompt: int) -> tuple[list[dict], dict]:
    """Assert `run_dir` is a valid run directory; returns (records, run.json)."""
    run_dir = Path(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == ["metrics.jsonl", "run.json", "summary.json"]
    run = json.loads((run_dir / "run.json").read_text())
    for key in RUN_JSON_KEYS:
        assert key in run, key
    assert run["samples_per_step"] == prompts_per_step * samples_per_prompt
    assert run["lr_rule"] == "unknown"
    assert isinstance(run["seed"], int)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records
    for record in records:
        assert record["kind"] in ("step", "eval")
        assert {"step", "samples", "wall_s"} <= set(record)
        assert record["samples"] == record["step"] * prompts_per_step * samples_per_prompt
        if record["kind"] == "step":
            assert record["prompts"] == prompts_per_step
    steps = [r["step"] for r in records]
    assert steps == sorted(steps)
    json.loads((run_dir / "summary.json").read_text())
    return records, run


def test_pick_eval_primary_prefers_accuracy_then_score():
    assert pick_eval_primary("verl", {"a/acc/mean@4": 0.5, "a/reward/mean@4": 0.9}) == ("eval/accuracy", 0.5)
    assert pick_eval_primary("verl", {"a/reward/mean@1": 0.2, "b/reward/mean@1": 0.4})[1] == pytest.approx(0.3)
    assert pick_eval_primary("verl", {"aux/a/reward/mean@1": 0.2}) is None
    assert pick_eval_primary("openrlhf", {"eval_math_pass1": 0.7, "eval_math_pass8": 0.9}) == ("eval/accuracy", 0.7)
    assert pick_eval_primary("trl", {"rewards/accuracy_reward/mean": 0.6, "reward": 1.4}) == ("eval/accuracy", 0.6)
    assert pick_eval_primary("trl", {"reward": 1.4, "loss": 0.1}) == ("eval/score", 1.4)


def test_detect_style_tells_the_frameworks_apart():
    assert detect_style({"timing_s/gen", "actor/grad_norm", "critic/score/mean"}) == ("verl", False)
    assert detect_style({"train/actor_grad_norm", "train/timing/generation", "train/reward"}) == ("openrlhf", False)
    trl_keys = {"train/reward", "train/learning_rate", "train/grad_norm", "train/completions/mean_length"}
    assert detect_style(trl_keys) == ("trl", True)
    assert detect_style({"loss", "accuracy_top5"}) == ("", False)
    assert normalize_trl_keys({"train/reward": 1.0, "eval/reward": 2.0}) == {"reward": 1.0, "eval_reward": 2.0}


def test_parse_step_rejects_non_integers():
    assert parse_step("3", "here", "fix") == 3
    assert parse_step(4.0, "here", "fix") == 4
    for bad in ("x", 2.5, -1, None, True):
        with pytest.raises(UserError):
            parse_step(bad, "here", "fix")


def test_writer_replaces_only_runs_and_leaves_no_temp(tmp_path):
    records = [{"kind": "step", "step": 1, "samples": 4, "wall_s": 1.0}]
    out = tmp_path / "run"
    write_run_dir(out, records, {"label": "a"}, {}, overwrite=False)
    with pytest.raises(UserError, match="already holds a run"):
        write_run_dir(out, records, {"label": "b"}, {}, overwrite=False)
    write_run_dir(out, records, {"label": "b"}, {}, overwrite=True)
    assert json.loads((out / "run.json").read_text())["label"] == "b"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me")
    with pytest.raises(UserError, match="non-empty directory without a run"):
        write_run_dir(other, records, {}, {}, overwrite=True)
    assert (other / "todo.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "run"]  # no temp or replaced dirs left
