"""The frameworks users moved to (src/batchscale/ingest/newer_frameworks.py) and verl's newer keys, each log written
as its framework's logging code at the named version writes it (no public log of these shapes was found; the
versions are in docs/IMPORT.md):

- SkyRL `a956457`: skyrl/train/utils/tracking.py `_TensorboardAdapter.log` (`add_scalar(key, value, step)` per key of
  trainer.py's `log_payload`: `all_metrics | timing/<Timer name>`);
- prime-rl v0.5.0: orchestrator.py's `to_log` (progress/*, reward/all/*, decode_len/all/*, time/*,
  effective_batch_size/all, val/reward/all/* every eval) as a W&B history export (`_step`, `_runtime` columns);
- NeMo-RL v0.4.0: utils/logger.py `TensorboardLogger.log_metrics` (`f"{prefix}/{name}"`) with grpo.py's prefixes
  `train`, `timing/train`, `validation`, `performance`;
- xtuner `b934f46`: _writer/jsonl_writer.py `JsonlWriter.add_scalars` (`{**tag_scalar_dict, "step": global_step}`
  per line) of rl_trainer.py `_log_step`'s scalars;
- verl `b178a3c`: the file logger's JSONL with `perf/mfu/actor`, `variance_proxy/*` (metric_utils.py
  `compute_variance_proxy_metrics`), and the fully-async trainer's `fully_async/*` and `timing_s/param_sync`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_ingest_common import check_run_dir

from batchscale.errors import UserError
from batchscale.ingest.importer import import_log


def write_events(log_dir: Path, rows: dict[int, dict[str, float]]) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(log_dir))
    for step, metrics in sorted(rows.items()):
        for key, value in metrics.items():
            writer.add_scalar(key, value, step)
    writer.close()
    return log_dir


def test_skyrl_tensorboard_with_its_config(tmp_path):
    pytest.importorskip("tensorboard")
    rows = {step: {"reward/avg_raw_reward": 0.1 * step, "generate/avg_num_tokens": 300.0, "timing/generate": 20.0,
                   "timing/policy_train": 8.0, "timing/step": 31.0, "timing/sync_weights": 1.5,
                   "policy/grad_norm": 0.2, "policy/policy_lr": 1e-6, "policy/policy_loss": 0.01,
                   "trainer/global_step": step, "trainer/epoch": 0, "generate/batch_num_seq": 64}
            for step in range(1, 5)}
    rows[2].update({"eval/all/avg_score": 0.4, "eval/all/pass_at_1": 0.4, "eval/gsm8k/avg_score": 0.4})
    write_events(tmp_path / "tensorboard_log", rows)
    config = tmp_path / "skyrl.yaml"
    config.write_text("trainer:\n  train_batch_size: 16\n  policy_mini_batch_size: 8\n  update_epochs_per_batch: 1\n"
                      "  seed: 7\n  policy:\n    optimizer_config:\n      lr: 1.0e-6\n    model:\n      path: Qwen/Qwen3-0.6B\n"
                      "  algorithm:\n    advantage_estimator: grpo\ngenerator:\n  n_samples_per_prompt: 4\n"
                      "data:\n  train_data: ['~/data/gsm8k/train.parquet']\n")
    import_log("skyrl", tmp_path / "tensorboard_log", tmp_path / "run", config_path=config)
    records, run = check_run_dir(tmp_path / "run", 16, 4)
    steps = [r for r in records if r["kind"] == "step"]
    assert steps[0]["reward/mean"] == pytest.approx(0.1) and steps[0]["time/generate"] == 20.0
    assert steps[0]["time/weight_sync"] == 1.5 and steps[0]["lr/actor"] == pytest.approx(1e-6)
    assert [r["eval/accuracy"] for r in records if r["kind"] == "eval"] == [pytest.approx(0.4)]
    assert run["updates_per_step"] == 2 and run["seed"] == 7 and run["source"] == "skyrl"
    assert "policy/policy_loss" in run["import"]["unknown_keys"]  # not mapped, said so


def write_prime_rl_history(path: Path, steps: int = 6) -> Path:
    """A W&B history export of prime-rl v0.5.0's orchestrator run: 8 problems x 16 rollouts per step."""
    columns = ["_step", "_runtime", "step", "progress/samples", "progress/problems", "progress/total_samples",
               "progress/tokens", "reward/all/mean", "decode_len/all/mean", "time/step", "time/generate_completions",
               "effective_batch_size/all", "solve_all/all", "val/reward/all/mean"]
    with open(path, "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=columns)
        writer.writeheader()
        for step in range(1, steps + 1):
            writer.writerow({"_step": step - 1, "_runtime": 12.0 * step, "step": step, "progress/samples": 128,
                             "progress/problems": 8, "progress/total_samples": 128 * step, "progress/tokens": 90000,
                             "reward/all/mean": 0.05 * step, "decode_len/all/mean": 600.0, "time/step": 12.0,
                             "time/generate_completions": 9.0, "effective_batch_size/all": 0.6, "solve_all/all": 0.1,
                             "val/reward/all/mean": 0.3 + 0.02 * step if step % 3 == 0 else ""})
    return path


@pytest.mark.parametrize("fmt", ["prime-rl", "wandb-csv"])
def test_prime_rl_history_gives_p_and_g_from_its_own_counts(tmp_path, fmt):
    import_log(fmt, write_prime_rl_history(tmp_path / "history.csv"), tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", 8, 16)
    assert run["source"] == "prime-rl"
    assert run["import"]["batch_from"] == {"prompts_per_step": "log", "samples_per_prompt": "log"}
    assert any("prompts_per_step = 8: the median of the logged progress/problems" in n for n in run["import"]["notes"])
    steps = [r for r in records if r["kind"] == "step"]
    assert [r["wall_s"] for r in steps][:2] == [12.0, 24.0] and steps[0]["time/generate"] == 9.0
    assert [(r["step"], r["eval/score"]) for r in records if r["kind"] == "eval"] == [
        (3, pytest.approx(0.36)), (6, pytest.approx(0.42))]
    assert "effective_batch_size/all" not in run["import"]["unknown_keys"]  # known: a fraction, not a size


def test_nemo_rl_tensorboard_with_its_grpo_config(tmp_path):
    pytest.importorskip("tensorboard")
    rows = {}
    for step in range(1, 4):
        metrics = {"train/reward": 0.2 * step, "train/grad_norm": 0.5, "train/lr": 5e-7,
                   "train/mean_gen_tokens_per_sample": 420.0, "train/loss": 0.01,
                   "timing/train/total_step_time": 40.0, "timing/train/generation": 25.0,
                   "timing/train/policy_training": 12.0, "timing/train/weight_sync": 0.8,
                   "performance/samples_per_sec": 12.8, "performance/samples_per_sec_per_gpu": 1.6}
        if step == 2:
            metrics["validation/accuracy"] = 0.55
        rows[step] = metrics
    write_events(tmp_path / "tb", rows)
    config = tmp_path / "grpo.yaml"
    config.write_text("grpo:\n  num_prompts_per_step: 32\n  num_generations_per_prompt: 16\n  seed: 42\n"
                      "policy:\n  model_name: Qwen/Qwen2.5-1.5B\n  optimizer:\n    kwargs:\n      lr: 5.0e-7\n")
    import_log("nemo-rl", tmp_path / "tb", tmp_path / "run", config_path=config)
    records, run = check_run_dir(tmp_path / "run", 32, 16)
    steps = [r for r in records if r["kind"] == "step"]
    assert steps[0]["time/step"] == 40.0 and steps[0]["throughput/samples_per_s"] == pytest.approx(12.8)
    assert [r["eval/accuracy"] for r in records if r["kind"] == "eval"] == [pytest.approx(0.55)]
    # 512 samples / 40 s = 12.8 samples/s = 1.6 per GPU x 8 GPUs
    assert any("x 8.00 training GPUs = samples per step / time/step" in n for n in run["import"]["notes"])


def test_xtuner_tracker_jsonl_and_its_effective_throughput(tmp_path):
    log = tmp_path / "exp_tracking" / "tracker.jsonl"
    log.parent.mkdir()
    lines = []
    for step in range(1, 5):
        lines.append({"time/step": 50.0, "time/produce_batch": 35.0, "time/training": 12.0, "time/sync_weight": 2.0,
                      "response/batch_size": 256, "response/rewards/mean": 0.1 * step,
                      "response/response_len/mean": 800.0, "throughput/effective_sgs": 256 / 50.0 / 16,
                      "train_metrics/worker_0/step_avg_grad_norm": 0.3, "async/aborted_samples": 0, "step": step})
        if step == 4:
            lines.append({"eval/accuracy": 0.61, "step": step})
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(UserError, match=r"P or G unknown; known: P x G = 256 from the logged response/batch_size"):
        import_log("xtuner", log, tmp_path / "run")
    import_log("xtuner", log, tmp_path / "run", samples_per_prompt=8)
    records, run = check_run_dir(tmp_path / "run", 32, 8)
    assert any("x 16.00 training GPUs" in note and "varies by 0.0%" in note for note in run["import"]["notes"])
    assert [r["eval/accuracy"] for r in records if r["kind"] == "eval"] == [0.61]
    assert records[0]["grad_norm/actor"] == 0.3 and records[0]["time/weight_sync"] == 2.0


def verl_newer_line(step: int, grad_norm: bool = True) -> dict:
    data = {"critic/score/mean": 0.2, "response_length/mean": 300.0, "timing_s/gen": 30.0, "timing_s/step": 50.0,
            "timing_s/update_actor": 15.0, "timing_s/param_sync": 2.5, "perf/mfu/actor": 0.41, "actor/lr": 1e-6,
            "fully_async/partial/partial_ratio": 0.25, "fully_async/partial/max_partial_span": 2,
            "fully_async/total_wait_time": 3.0, "fully_async/count/total_generated_samples": 1024 * step,
            "variance_proxy/proxy1_signal_strength": 0.04 if grad_norm else 0.0,
            "variance_proxy/proxy2_total_power": 2.5, "variance_proxy/proxy3_pure_noise": 0.0024 if grad_norm else 0.0,
            "variance_proxy/expected_a_squared": 0.9, "variance_proxy/expected_w": 2.8}
    if grad_norm:
        data["actor/grad_norm"] = 0.2
    return {"step": step, "data": data}


def test_verl_newer_keys_fully_async_batch_and_the_variance_proxy(tmp_path):
    log = tmp_path / "verl.jsonl"
    log.write_text("".join(json.dumps(verl_newer_line(step, grad_norm=step != 2)) + "\n" for step in (1, 2, 3)))
    config = tmp_path / "config.yaml"
    config.write_text("data:\n  train_batch_size: 0\nactor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 32\n"
                      "  rollout:\n    n: 8\nasync_training:\n  trigger_parameter_sync_step: 4\n  require_batches: 2\n")
    import_log("verl", log, tmp_path / "run", config_path=config)
    records, run = check_run_dir(tmp_path / "run", 256, 8)  # 4 x 2 x 32 prompts per parameter version
    assert run["updates_per_step"] == 8
    first, second = records[0], records[1]
    assert first["mfu/actor"] == 0.41 and first["time/weight_sync"] == 2.5 and first["time/wait_for_samples"] == 3.0
    assert first["async/partial_frac"] == 0.25 and first["async/staleness_max"] == 2
    assert first["variance_proxy/proxy3_pure_noise"] == 0.0024
    # step 2 had no gradient norm: verl wrote 0.0 for proxy1 and proxy3, which are unknown, not zero
    assert "variance_proxy/proxy3_pure_noise" not in second and second["variance_proxy/proxy2_total_power"] == 2.5
    assert any("not batchscale's gradient noise scale B_noise" in n for n in run["import"]["notes"])
    assert any("trigger_parameter_sync_step 4 x require_batches 2 x ppo_mini_batch_size 32" in n
               for n in run["import"]["notes"])


def test_predict_on_a_verl_run_with_a_variance_proxy_says_what_it_is(tmp_path, capsys):
    from batchscale.cli import main

    log = tmp_path / "verl.jsonl"
    log.write_text("".join(json.dumps(verl_newer_line(step)) + "\n" for step in (1, 2, 3)))
    import_log("verl", log, tmp_path / "run", prompts_per_step=32, samples_per_prompt=8)
    assert main(["predict", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "logs no gns/b_noise" in err and "variance_proxy/* (medians: proxy1_signal_strength 0.04" in err
    assert "not the parameter-gradient noise B_noise measures" in err
