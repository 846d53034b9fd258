"""`batchscale import verl`: verl file-logger JSONL into a run directory, config discovery, malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ingest_common import check_run_dir

from batchscale.cli import main
from batchscale.errors import UserError
from batchscale.ingest.importer import import_log

P, G = 4, 2
STEP_TIME_S = 3.0


def write_verl_log(path: Path, steps: int = 6, ppo: bool = False, truncated_tail: bool = False) -> Path:
    """A verl file-logger JSONL: a step-0 validation line, then one line per step, validation every 2 steps."""
    lines = [{"step": 0, "data": {"val-core/openai/gsm8k/reward/mean@1": 0.1}}]
    for step in range(1, steps + 1):
        data = {
            "training/global_step": step, "training/epoch": 0,
            "timing_s/gen": 1.5, "timing_s/gen_max": 1.8, "timing_s/update_actor": 1.0, "timing_s/step": STEP_TIME_S,
            "actor/grad_norm": 1.0 / step, "actor/lr": 1e-6, "actor/entropy": 0.9,
            "critic/score/mean": 0.1 * step, "response_length/mean": 50.0,
        }
        if ppo:
            data.update({"critic/grad_norm": 2.0, "critic/lr": 1e-5, "timing_s/update_critic": 0.5})
        if step % 2 == 0:
            data.update({"val-core/openai/gsm8k/reward/mean@1": 0.1 + 0.05 * step,
                         "val-aux/openai/gsm8k/reward/std@1": 0.3})
        lines.append({"step": step, "data": data})
    text = "".join(json.dumps(line) + "\n" for line in lines)
    if truncated_tail:
        text += '{"step": 7, "data": {"timing_s/g'
    path.write_text(text)
    return path


def test_verl_jsonl_imports_into_a_valid_run(tmp_path):
    log = write_verl_log(tmp_path / "log.jsonl")
    result = import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G, seed=3, label="x")
    records, run = check_run_dir(tmp_path / "run", P, G)
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
    assert steps[-1]["samples"] == 6 * P * G
    assert [r["wall_s"] for r in steps] == [STEP_TIME_S * s for s in range(1, 7)]
    assert steps[0]["time/generate"] == 1.5 and steps[0]["time/train"] == 1.0 and steps[0]["time/step"] == STEP_TIME_S
    assert steps[0]["reward/mean"] == pytest.approx(0.1) and steps[1]["grad_norm/actor"] == 0.5
    assert steps[0]["lr/actor"] == 1e-6 and steps[0]["tokens/generated"] == 50 * P * G
    assert [r["step"] for r in evals] == [0, 2, 4, 6]
    assert evals[0]["samples"] == 0 and evals[0]["wall_s"] == 0.0
    assert evals[1]["eval/accuracy"] == pytest.approx(0.2) and evals[1]["wall_s"] == 2 * STEP_TIME_S
    assert evals[1]["eval/aux/openai/gsm8k/reward/std@1"] == 0.3
    assert run["label"] == "x" and run["seed"] == 3 and run["source"] == "verl"
    block = run["import"]
    assert block["format"] == "verl" and block["unknown_keys"] == ["actor/entropy"]
    assert block["not_provided"] == [] and block["problems"] == []
    assert result["summary"]["eval_end"] == pytest.approx(0.4)


def test_verl_ppo_keys_and_hydra_config_beside_the_log(tmp_path):
    run_out = tmp_path / "outputs"
    (run_out / ".hydra").mkdir(parents=True)
    (run_out / ".hydra" / "config.yaml").write_text(
        "data:\n  train_batch_size: 8\n  train_files: ~/data/gsm8k/train.parquet\n"
        "actor_rollout_ref:\n  model:\n    path: Qwen/Qwen2.5-0.5B\n  actor:\n    optim:\n      lr: 2.0e-6\n"
        "  rollout:\n    n: 1\nalgorithm:\n  adv_estimator: gae\n"
    )
    log = write_verl_log(run_out / "log.jsonl", ppo=True)
    import_log("verl", log, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", 8, 1)
    assert run["algorithm"] == "ppo" and run["lr"] == 2e-6 and run["model"] == "Qwen/Qwen2.5-0.5B"
    assert run["task"].endswith("train.parquet")
    assert run["import"]["batch_from"] == {"prompts_per_step": "config", "samples_per_prompt": "config"}
    step = next(r for r in records if r["kind"] == "step")
    assert step["grad_norm/critic"] == 2.0 and step["lr/critic"] == 1e-5 and step["time/train_critic"] == 0.5


def test_verl_truncated_last_line_is_tolerated_and_reported(tmp_path, capsys):
    log = write_verl_log(tmp_path / "log.jsonl", truncated_tail=True)
    code = main(["import", "verl", str(log), "--out", str(tmp_path / "run"), "--prompts-per-step", str(P),
                 "--samples-per-prompt", str(G), "--json"])
    assert code == 0
    captured = capsys.readouterr()
    assert "truncated" in captured.err
    result = json.loads(captured.out)
    assert any("truncated" in p for p in result["run"]["import"]["problems"])
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert max(r["step"] for r in records) == 6


def test_verl_without_batch_shape_names_the_flags(tmp_path):
    log = write_verl_log(tmp_path / "log.jsonl")
    with pytest.raises(UserError, match="--prompts-per-step P --samples-per-prompt G") as e:
        import_log("verl", log, tmp_path / "run")
    assert "data.train_batch_size" in str(e.value)
    assert not (tmp_path / "run").exists()


def test_verl_bad_lines_name_the_line(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "data": {"actor/grad_norm": 1.0}}\n{"data": {"actor/grad_norm": 1.0}}\n')
    with pytest.raises(UserError, match="line 2.*missing step key"):
        import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    log.write_text('{"step": 1, "data": {"actor/grad_norm": 1.0}}\n{"step": 2, "data": {"actor/grad_norm": "big"}}\n')
    with pytest.raises(UserError, match="line 2, key 'actor/grad_norm'.*numeric"):
        import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    log.write_text('{"step": 1, "data": {"actor/grad_norm": 1.0}}\nnot json\n{"step": 2, "data": {}}\n')
    with pytest.raises(UserError, match="line 2.*not valid JSON"):
        import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    log.write_text('{"step": 1, "data": {"actor/entropy": 1.0}}\n')
    with pytest.raises(UserError, match="no usable records"):
        import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    assert not (tmp_path / "run").exists()
