"""`batchscale import trl`: trainer_state.json log_history with logging windows, eval entries and the final summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ingest_common import check_run_dir

from batchscale.errors import UserError
from batchscale.ingest.importer import import_log

P, G = 2, 8
LOGGING_STEPS = 5


def write_trainer_state(path: Path, with_step_time: bool = True) -> Path:
    """A TRL GRPO trainer_state.json: a log every 5 steps, an eval every 10, the Trainer's closing summary."""
    history = []
    for step in range(LOGGING_STEPS, 21, LOGGING_STEPS):
        entry = {"step": step, "epoch": step / 40, "reward": 0.05 * step, "reward_std": 0.2, "grad_norm": 1.0 / step,
                 "learning_rate": 1e-6, "completions/mean_length": 60.0, "kl": 0.01, "num_tokens": 1000 * step}
        if with_step_time:
            entry["step_time"] = 2.0
        history.append(entry)
        if step % 10 == 0:
            history.append({"step": step, "epoch": step / 40, "eval_reward": 0.9, "eval_loss": 0.1,
                            "eval_rewards/accuracy_reward/mean": 0.02 * step, "eval_runtime": 3.2})
    history.append({"step": 20, "epoch": 0.5, "train_runtime": 45.0, "train_loss": 0.01, "total_flos": 0.0})
    state = {"global_step": 20, "logging_steps": LOGGING_STEPS, "max_steps": 20, "train_batch_size": 4,
             "log_history": history}
    path.write_text(json.dumps(state, indent=2))
    return path


def test_trainer_state_imports_with_logging_windows(tmp_path):
    checkpoint = tmp_path / "checkpoint-20"
    checkpoint.mkdir()
    write_trainer_state(checkpoint / "trainer_state.json")
    import_log("trl", checkpoint, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G, seed=1)
    records, run = check_run_dir(tmp_path / "run", P, G)
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in steps] == [5, 10, 15, 20]
    assert [r["samples"] for r in steps] == [5 * P * G, 10 * P * G, 15 * P * G, 20 * P * G]
    # each record stands for a 5-step window of 2 s steps
    assert [r["wall_s"] for r in steps] == [10.0, 20.0, 30.0, 40.0]
    assert steps[0]["reward/mean"] == pytest.approx(0.25) and steps[0]["response/length_mean"] == 60.0
    assert steps[0]["grad_norm/actor"] == pytest.approx(0.2) and steps[0]["lr/actor"] == 1e-6
    assert [(r["step"], r["eval/accuracy"]) for r in evals] == [(10, pytest.approx(0.2)), (20, pytest.approx(0.4))]
    assert evals[0]["eval/reward"] == 0.9 and evals[0]["wall_s"] == 20.0
    assert run["source"] == "trl" and run["algorithm"] == "grpo" and run["seed"] == 1
    notes = " ".join(run["import"]["notes"])
    assert "logging_steps=5" in notes and "train_runtime = 45.0" in notes
    assert "time/generate: not provided by trl" in run["import"]["not_provided"]
    assert set(run["import"]["unknown_keys"]) == {"kl", "num_tokens", "reward_std"}


def test_trainer_state_without_step_time_has_null_wall_s(tmp_path, capsys):
    from batchscale.cli import main

    state = write_trainer_state(tmp_path / "trainer_state.json", with_step_time=False)
    code = main(["import", "trl", str(state), "--out", str(tmp_path / "run"), "--prompts-per-step", str(P),
                 "--samples-per-prompt", str(G)])
    assert code == 0
    assert "wall_s unavailable" in capsys.readouterr().err
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert all(r["wall_s"] is None for r in records)
    assert run["import"]["wall_s_from"].startswith("unavailable")


def test_trainer_state_errors(tmp_path):
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": [{"step": 1, "reward": 0.1}, {"reward": 0.2}]}))
    with pytest.raises(UserError, match=r"log_history\[1\].*missing step key"):
        import_log("trl", state, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    state.write_text(json.dumps({"log_history": [{"step": 1, "reward": "n/a"}]}))
    with pytest.raises(UserError, match=r"log_history\[0\], key 'reward'.*numeric"):
        import_log("trl", state, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    state.write_text(json.dumps({"log_history": []}))
    with pytest.raises(UserError, match="no usable records"):
        import_log("trl", state, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    state.write_text(json.dumps({"log_history": [{"step": 1, "reward": 0.2}]}))
    with pytest.raises(UserError, match="--prompts-per-step P --samples-per-prompt G"):
        import_log("trl", state, tmp_path / "run", samples_per_prompt=G)
    assert not (tmp_path / "run").exists()
