"""Shared checks for imported run directories, plus tests of the mapping helpers and the run-directory writer.

`check_run_dir` is imported by the other test_ingest_* modules: it validates a run directory against the run-log
contract of DESIGN.md (every record has kind/step/samples/wall_s, samples = step x P x G, run.json's flat fields).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from batchscale.errors import UserError
from batchscale.ingest.common import detect_style, normalize_trl_keys, parse_step, pick_eval_primary
from batchscale.rundir import RunDescriptor, read_run, summarize_run, write_run

def check_run_dir(run_dir: Path, prompts_per_step: int, samples_per_prompt: int) -> tuple[list[dict], dict]:
    """Assert `run_dir` is a valid imported run directory, read through the one reader; returns (records, run.json)."""
    run_dir = Path(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == [".batchscale", "metrics.jsonl", "run.json", "summary.json"]
    run = read_run(run_dir)
    d = run.descriptor
    assert (d.prompts_per_step, d.samples_per_prompt) == (prompts_per_step, samples_per_prompt)
    assert d.samples_per_step == prompts_per_step * samples_per_prompt and d.lr_rule == "unknown"
    assert d.samples_per_step % d.samples_per_update == 0 and d.updates_per_step >= 1
    assert "import" in d.to_json() and run.summary is not None and run.summary.finished is None
    records = sorted(run.steps + run.evals, key=lambda r: (r["step"], r["kind"] != "step"))
    assert records
    for record in records:
        assert record["samples"] == record["step"] * prompts_per_step * samples_per_prompt
        if record["kind"] == "step":
            assert record["prompts"] == prompts_per_step
    return records, d.to_json()


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
    first, second = (RunDescriptor(label=label, seed=0, samples_per_step=4) for label in ("a", "b"))
    out = tmp_path / "run"
    write_run(out, first, records, summarize_run(first, records, None))
    with pytest.raises(UserError, match="already holds a run"):
        write_run(out, second, records, summarize_run(second, records, None))
    write_run(out, second, records, summarize_run(second, records, None), overwrite=True)
    assert read_run(out).label == "b"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me")
    with pytest.raises(UserError, match="non-empty directory without a run"):
        write_run(other, first, records, summarize_run(first, records, None), overwrite=True)
    assert (other / "todo.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "run"]  # no temp or replaced dirs left


def test_run_descriptor_schema_of_imports():
    """run.json's import-side fields: first_step (resumed logs), the update split, and a nullable lr (never 0)."""
    base = {"label": "verl-p8-g4", "seed": 0, "samples_per_step": 32, "source": "verl"}
    d = RunDescriptor.model_validate({**base, "first_step": 101, "samples_per_update": 16, "updates_per_step": 2,
                                      "lr": None})
    assert (d.first_step, d.samples_per_update, d.updates_per_step, d.lr) == (101, 16, 2, None)
    assert RunDescriptor.model_validate(base).first_step == 1 and RunDescriptor.model_validate(base).lr is None
    for bad in ({"lr": 0.0}, {"first_step": -1}, {"samples_per_update": 12}):
        with pytest.raises(ValueError):
            RunDescriptor.model_validate({**base, **bad})
