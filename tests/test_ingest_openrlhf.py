"""`batchscale import openrlhf`: OpenRLHF's console log and TensorBoard directory, written as OpenRLHF v0.11.0 writes
them (openrlhf/trainer/ppo_trainer.py `fit`/`evaluate`, openrlhf/utils/logging_utils.py `_FORMAT`, `TensorboardLogger`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from test_ingest_common import check_run_dir

from batchscale.errors import UserError
from batchscale.ingest.importer import import_log

P, G = 4, 8
PREFIX = "(PPOTrainer pid=8812) "
FORMAT = logging.Formatter("%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s", "%m-%d %H:%M:%S")


def log_line(message: str, lineno: int) -> str:
    record = logging.LogRecord("openrlhf", logging.INFO, "/x/openrlhf/trainer/ppo_trainer.py", lineno, message, None,
                               None)
    return PREFIX + FORMAT.format(record)


def status(step: int, filtered: bool = False) -> dict:
    """PPOTrainer.fit's status for one step: ppo_train's means, the rollout stats, the timings it adds."""
    s = {"policy_loss": 0.01, "kl": 0.001, "actor_lr": 1e-6, "actor_grad_norm": 0.5 / step,
         "timing/make_experience": 3.0, "timing/ppo_train": 4.0, "timing/broadcast": 1.0,
         "rollout/reward_mean": 0.1 * step, "rollout/reward_std": 0.3, "rollout/response_length_mean": 120.5,
         "rollout/truncated_rate": 0.0, "rollout/num_samples": float(P * G * (2 if filtered else 1)),
         "timing/generation": 12.0}
    s["timing/step_total"] = sum(v for k, v in s.items() if k.startswith("timing/"))
    if filtered:
        s["dynamic_filtering_pass_rate"] = 0.5
    return s


def write_console(path: Path, steps: int = 4, filtered: bool = False) -> Path:
    lines = [log_line("Start training", 500)]
    for step in range(1, steps + 1):
        bar = "Train epoch [1/1]: 100%|##########| 4/4 [00:04<00:00, act_loss=0.01, reward=0, gen_len=0, kl=0.001]"
        lines.append(f"{PREFIX}\rGenerate samples:  50%|#####     | 2/4\r{bar}")
        lines.append(log_line(f"✨ Global step {step}: {status(step, filtered)}", 547))
        if step % 2 == 0:
            logs = {"eval_gsm8k_pass8": 0.6, "eval_gsm8k_pass1": 0.1 * step, "eval_response_length_mean": 100.0,
                    "eval_num_samples": 64.0}
            lines.append(log_line(f"✨ Evaluation completed in 0:00:42, global_step {step}, eval_metrics: {logs}", 597))
        lines.append(f"Episode [1/1]:  {step * 25}%|##  | {step * P}/{4 * P} [01:00<03:00]")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_console_log_imports_steps_and_evals(tmp_path):
    log = write_console(tmp_path / "train.log")
    import_log("openrlhf", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert steps[1]["reward/mean"] == pytest.approx(0.2) and steps[0]["time/generate"] == 12.0
    assert steps[0]["time/train"] == 4.0 and steps[0]["grad_norm/actor"] == 0.5 and steps[0]["lr/actor"] == 1e-6
    assert [r["wall_s"] for r in steps] == [20.0, 40.0, 60.0, 80.0]  # timing/step_total
    assert [(r["step"], r["eval/accuracy"]) for r in evals] == [(2, pytest.approx(0.2)), (4, pytest.approx(0.4))]
    assert run["source"] == "openrlhf" and run["import"]["shape"] == "console text"
    assert run["import"]["problems"] == [] and "train/policy_loss" in run["import"]["unknown_keys"]


def test_dynamic_filtering_is_warned(tmp_path):
    log = write_console(tmp_path / "train.log", filtered=True)
    result = import_log("openrlhf", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    problems = " ".join(result["run"]["import"]["problems"])
    assert "filtering / dynamic sampling detected (key train/dynamic_filtering_pass_rate at step 1)" in problems


def test_progress_bars_alone_are_refused(tmp_path):
    log = tmp_path / "old.log"
    log.write_text("Episode [1/1]:  10%|#  | 4/40 [00:30<04:30, act_loss=0.1, reward=0.5, kl=0.01]\n")
    with pytest.raises(UserError, match=r"old.log: no '✨ Global step N.*Fix: pass the console log of OpenRLHF "
                                        r">= 0.9.1.*TensorBoard directory"):
        import_log("openrlhf", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)


def test_openrlhf_format_reads_its_tensorboard_directory(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path / "tb" / "run-name"))  # TensorboardLogger: <tensorboard_dir>/<run>
    for step in range(1, 4):
        for key, value in status(step).items():
            writer.add_scalar(f"train/{key}", value, step)
    writer.add_scalar("eval/eval_gsm8k_pass1", 0.3, 2)
    writer.close()
    import_log("openrlhf", tmp_path / "tb", tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert run["import"]["shape"] == "TensorBoard events" and run["source"] == "openrlhf"
    assert [r["wall_s"] for r in records if r["kind"] == "step"] == [20.0, 40.0, 60.0]
    assert next(r for r in records if r["kind"] == "eval")["eval/accuracy"] == pytest.approx(0.3)
