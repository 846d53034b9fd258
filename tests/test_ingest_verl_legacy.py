"""verl's oldest console format, written as verl's own code of that era writes it.

From verl v0.1 (`9fa2cfb`, 2024-12-12) and its January 2025 successors (`2856be4`, `2997e5d`, before `018b0d7`):
verl/utils/logger/aggregate_logger.py `concat_dict_to_str` (`f"{k}:{v:.3f}"`), verl/trainer/ppo/ray_trainer.py `fit`
(`global_steps = 0`, incremented after `logger.log`; `metrics['timing/<phase>'] = timer.last`; validation as
`val/test_score/<source>` when `(global_steps + 1) % test_freq == 0`; `pprint(f'Initial validation metrics: ...')`,
from 2856be4 also `logger.log(data=val_metrics, step=0)` with bare `test_score/<source>` keys), fsdp_workers.py
(`metrics['actor/lr(1e-4)'] = lr * 1e4`), main_ppo.py (`pprint(OmegaConf.to_container(config, resolve=True))` inside
the Ray task `main_task`, hence the `(main_task pid=N)` prefix). v0.1's ppo_trainer.yaml has no `rollout.n` (one
response per prompt); 2997e5d added `n: 1 # > 1 for grpo`.
"""

from __future__ import annotations

import io
import json
import pprint
from pathlib import Path

import numpy as np
import pytest
from test_ingest_common import check_run_dir

from batchscale.errors import UserError
from batchscale.ingest.importer import import_log

P, LR, CRITIC_LR = 16, 1e-6, 1e-5
PROMPT_TOKENS, RESPONSE_TOKENS = 110.0, 70.0
PREFIX = "(main_task pid=23814) "


def v01_config(n: int | None = None) -> dict:
    """v0.1's ppo_trainer.yaml, resolved (the keys the importer reads at their v0.1 paths); `n` as 2997e5d adds it."""
    rollout = {"name": "vllm", "temperature": 1.0, "top_k": -1, "top_p": 1, "prompt_length": 512,
               "response_length": 512, "dtype": "bfloat16", "gpu_memory_utilization": 0.5,
               "tensor_model_parallel_size": 2, "log_prob_micro_batch_size": 128, "do_sample": True}
    if n is not None:
        rollout["n"] = n
    return {
        "data": {"tokenizer": None, "train_files": "~/data/rlhf/gsm8k/train.parquet",
                 "val_files": "~/data/rlhf/gsm8k/test.parquet", "prompt_key": "prompt", "max_prompt_length": 512,
                 "max_response_length": 512, "train_batch_size": P, "val_batch_size": 1312,
                 "return_raw_input_ids": False, "return_raw_chat": False},
        "actor_rollout_ref": {
            "hybrid_engine": True,
            "model": {"path": "~/models/deepseek-llm-7b-chat", "external_lib": None, "override_config": {},
                      "enable_gradient_checkpointing": False},
            "actor": {"strategy": "fsdp", "ppo_mini_batch_size": P // 4, "ppo_micro_batch_size": 4, "grad_clip": 1.0,
                      "clip_ratio": 0.2, "entropy_coeff": 0.001, "ppo_epochs": 1, "shuffle": True,
                      "optim": {"lr": LR, "lr_warmup_steps_ratio": 0.0, "min_lr_ratio": None,
                                "warmup_style": "constant", "total_training_steps": 30}},
            "rollout": rollout},
        "critic": {"strategy": "fsdp", "optim": {"lr": CRITIC_LR}, "ppo_mini_batch_size": P // 4, "ppo_epochs": 1},
        "algorithm": {"gamma": 1.0, "lam": 1.0, "adv_estimator": "gae", "kl_penalty": "kl",
                      "kl_ctrl": {"type": "fixed", "kl_coef": 0.001}},
        "trainer": {"total_epochs": 30, "project_name": "verl_examples", "experiment_name": "gsm8k",
                    "logger": ["console"], "nnodes": 1, "n_gpus_per_node": 8, "save_freq": -1, "test_freq": 2,
                    "critic_warmup": 0, "default_hdfs_dir": None,
                    "default_local_dir": "checkpoints/verl_examples/gsm8k"},
    }


def concat_dict_to_str(data: dict, step: int) -> str:
    """verl v0.1 aggregate_logger.py."""
    return " - ".join([f"step:{step}"] + [f"{k}:{v:.3f}" for k, v in data.items()])


def step_metrics(global_steps: int, test_freq: int = 2) -> dict:
    """One step's metrics in the order v0.1's fit() fills them (timing, kl, critic, actor, val, data)."""
    metrics = {"timing/gen": 12.25, "timing/ref": 1.5, "timing/values": 1.25, "critic/kl": 0.001,
               "critic/kl_coeff": 0.001, "timing/adv": 0.5, "timing/update_critic": 3.0,
               "critic/vf_loss": np.float64(0.2), "critic/grad_norm": np.float64(2.0),
               "critic/lr(1e-4)": CRITIC_LR * 1e4, "timing/update_actor": 3.5,
               "actor/pg_loss": np.float64(-0.01), "actor/grad_norm": np.float64(1.0 / (global_steps + 1)),
               "actor/lr(1e-4)": LR * 1e4}
    if (global_steps + 1) % test_freq == 0:
        metrics["timing/testing"] = 2.0
        metrics["val/test_score/openai/gsm8k"] = np.float64(0.3 + 0.05 * global_steps)
    metrics.update({"critic/score/mean": 0.1 * (global_steps + 1), "response_length/mean": RESPONSE_TOKENS,
                    "prompt_length/mean": PROMPT_TOKENS})
    return metrics


def write_v01_console(path: Path, steps: int = 4, n: int | None = None, logged_initial: bool = False,
                      ansi: bool = False, prefix: str = PREFIX) -> Path:
    """A tee'd console of verl v0.1 (or, with `n` and `logged_initial`, of early January 2025)."""
    out = io.StringIO()
    out.write("2024-12-20 09:00:01,001\tINFO worker.py:1821 -- Started a local Ray instance.\n")
    for line in pprint.pformat(v01_config(n)).splitlines():
        out.write(prefix + line + "\n")
    out.write("(WorkerDict pid=24001) Total steps: 30\n")
    out.write(f"{prefix}Using LocalLogger is deprecated. The constructor API will change \n")
    initial = {"test_score/openai/gsm8k": np.float64(0.2350265352539803),
               "test_score/lighteval/MATH": np.float64(0.1)}
    out.write(f"{prefix}validation generation end\n")
    for line in pprint.pformat(f"Initial validation metrics: {dict((k, float(v)) for k, v in initial.items())}"
                               ).splitlines():
        out.write(prefix + line + "\n")
    if logged_initial:  # 2856be4: logger.log(data=val_metrics, step=global_steps) before training
        out.write(prefix + concat_dict_to_str(initial, 0) + "\n")
    for global_steps in range(steps):
        line = prefix + concat_dict_to_str(step_metrics(global_steps), global_steps)
        out.write((f"\x1b[36m{line}\x1b[0m" if ansi else line) + "\n")
    out.write(f"{prefix}validation generation end\n")
    out.write(prefix + pprint.pformat(f"Final validation metrics: {{'test_score/openai/gsm8k': 0.61}}") + "\n")
    if logged_initial:  # 2856be4 logs the final validation too, at global_steps (the updates made)
        out.write(prefix + concat_dict_to_str({"test_score/openai/gsm8k": 0.61}, steps) + "\n")
    path.write_text(out.getvalue())
    return path


def test_v0_1_console_imports_with_p_g_lrs_times_and_step_0_counted(tmp_path):
    log = write_v01_console(tmp_path / "verl_v0.1.log", ansi=True)
    assert "step:0 - timing/gen:12.250" in log.read_text() and "actor/lr(1e-4):0.010" in log.read_text()
    import_log("verl", log, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", P, 1)
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]  # logged 0..3: step 0 is a training step
    assert [r["samples"] for r in steps] == [P, 2 * P, 3 * P, 4 * P]
    assert steps[0]["time/generate"] == 12.25 and steps[0]["time/train"] == 3.5 and steps[0]["time/train_critic"] == 3.0
    assert steps[0]["time/step"] == pytest.approx(22.0) and steps[1]["time/step"] == pytest.approx(24.0)
    assert [r["wall_s"] for r in steps] == pytest.approx([22.0, 46.0, 68.0, 92.0])
    assert steps[0]["lr/actor"] == pytest.approx(LR) and steps[0]["lr/critic"] == pytest.approx(CRITIC_LR)
    assert steps[0]["grad_norm/actor"] == 1.0 and steps[3]["grad_norm/actor"] == 0.25
    # the initial print at step 0, the in-line validation after 2 and 4 updates (the final print after 4 is the same)
    assert [(r["step"], r["samples"]) for r in evals] == [(0, 0), (2, 2 * P), (4, 4 * P)]
    assert evals[2]["eval/accuracy"] == pytest.approx(0.45)
    assert evals[0]["eval/accuracy"] == pytest.approx((0.235 + 0.1) / 2, abs=1e-3)
    assert evals[1]["eval/accuracy"] == pytest.approx(0.35)
    assert run["lr"] == LR and run["algorithm"] == "ppo" and run["samples_per_prompt"] == 1
    assert (run["samples_per_update"], run["updates_per_step"]) == (P // 4, 4)
    block = run["import"]
    assert block["batch_from"] == {"prompts_per_step": "config", "samples_per_prompt": "config"}
    assert not any(n.startswith("time/") for n in block["not_provided"])
    notes = " ".join(block["notes"])
    assert "counts steps from 0" in notes and "sum of the logged timing phases" in notes
    assert "one response per prompt" in notes and "Initial validation metrics" in notes


@pytest.mark.parametrize("prefix", ["", "(main_task pid=23814, ip=10.0.3.7) "])
def test_bare_lines_and_ray_prefixes_with_an_ip_read_alike(tmp_path, prefix):
    log = write_v01_console(tmp_path / "verl.log", prefix=prefix)
    lines = log.read_text().splitlines()  # all but the Ray driver's and a worker's line come from main_task
    assert sum(line.startswith("(main_task pid=23814, ip=10.0.3.7) ") for line in lines) == (
        len(lines) - 2 if prefix else 0)
    import_log("verl", log, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", P, 1)
    assert [r["step"] for r in records if r["kind"] == "step"] == [1, 2, 3, 4] and run["lr"] == LR


def test_the_final_validation_print_is_the_eval_after_the_last_step(tmp_path):
    log = write_v01_console(tmp_path / "verl.log", steps=3)  # validates after steps 2 only; the final print after 3
    import_log("verl", log, tmp_path / "run")
    records, _ = check_run_dir(tmp_path / "run", P, 1)
    assert [(r["step"], r["eval/accuracy"]) for r in records if r["kind"] == "eval"][1:] == [
        (2, pytest.approx(0.35)), (3, pytest.approx(0.61))]


def test_january_2025_console_with_n_and_a_logged_step_0_validation(tmp_path):
    """2856be4 logs the initial validation as `step:0 - test_score/...`, then the first training line `step:0 - ...`."""
    log = write_v01_console(tmp_path / "verl.log", n=1, logged_initial=True)
    text = log.read_text()
    assert "step:0 - test_score/openai/gsm8k:0.235" in text and "'n': 1" in text
    import_log("verl", log, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", P, 1)
    assert [(r["kind"], r["step"]) for r in records][:3] == [("eval", 0), ("step", 1), ("step", 2)]
    assert records[0]["eval/accuracy"] == pytest.approx((0.235 + 0.1) / 2)
    assert run["import"]["problems"] == []  # no "logged more than once" from the shared step numbers
    assert [(r["step"], r["eval/accuracy"]) for r in records if r["kind"] == "eval"][-1] == (4, pytest.approx(0.45))
    assert any("repeats the one of step 4" in n for n in run["import"]["notes"])
    assert not any("one response per prompt" in n for n in run["import"]["notes"])


def test_v0_1_console_goes_through_analyze_and_plan(tmp_path, capsys):
    from batchscale.cli import main

    sweep = tmp_path / "sweep" / "runs"
    for seed in (0, 1):
        log = write_v01_console(tmp_path / f"s{seed}.log", steps=8)
        assert main(["import", "verl", str(log), "--out", str(sweep / f"v01__s{seed}"), "--label", "v01",
                     "--seed", str(seed)]) == 0
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "sweep"), "--json"]) == 0
    analysis = json.JSONDecoder().raw_decode(capsys.readouterr().out)[0]
    assert analysis["reference"] == "v01" and analysis["target"] > 0.235
    assert main(["plan", str(tmp_path / "sweep"), "--json"]) == 0
    plan = json.JSONDecoder().raw_decode(capsys.readouterr().out.strip())[0]
    assert plan["best"] == "v01"
    row = next(r for r in plan["rows"] if r["label"] == "v01")
    assert row["throughput_samples_per_s"] > 0 and row["samples_to_target"] > 0 and row["time_to_target"] > 0


def test_jsonl_of_the_zero_based_era_reads_like_its_console(tmp_path):
    log = tmp_path / "old.jsonl"
    log.write_text("".join(json.dumps({"step": s, **{k: float(v) for k, v in step_metrics(s).items()}}) + "\n"
                           for s in range(3)))
    import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=1)
    records, _ = check_run_dir(tmp_path / "run", P, 1)
    steps = [r for r in records if r["kind"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3] and steps[0]["lr/actor"] == pytest.approx(LR)


def test_a_modern_log_keeps_its_steps(tmp_path):
    """Guard: a 1-based log with a validation-only step-0 line is not shifted."""
    from test_ingest_verl_console import G as MODERN_G
    from test_ingest_verl_console import P as MODERN_P
    from test_ingest_verl_console import write_console_log

    log = write_console_log(tmp_path / "modern.log")
    import_log("verl", log, tmp_path / "run")
    records, _ = check_run_dir(tmp_path / "run", MODERN_P, MODERN_G)
    assert [r["step"] for r in records if r["kind"] == "step"] == [1, 2, 3, 4]


def test_a_flag_contradicting_the_old_printed_config_is_refused(tmp_path):
    log = write_v01_console(tmp_path / "verl.log")
    with pytest.raises(UserError, match=r"--samples-per-prompt: 4 contradicts 1"):
        import_log("verl", log, tmp_path / "run", samples_per_prompt=4)
    assert not (tmp_path / "run").exists()
