"""verl's console log and flat JSONL, written as verl's own code writes them.

`concat_dict_to_str` below is verl/utils/logger/aggregate_logger.py, both versions: `f"{k}:{v:.3f}"` up to v0.4.1
and `f"{k}:{pprint.pformat(v)}"` from v0.5.0 (numpy scalars under numpy 2 then print as `np.float64(...)`). The
start-up config is what verl/trainer/main_ppo.py prints (`pprint(OmegaConf.to_container(config, resolve=True))`), and
Ray prefixes every line a worker prints with `(TaskRunner pid=N)`.
"""

from __future__ import annotations

import io
import json
import numbers
import pprint
from pathlib import Path

import numpy as np
import pytest
from test_ingest_common import check_run_dir

from batchscale.errors import UserError
from batchscale.ingest.importer import import_log

P, G, LR = 8, 4, 1e-6
PROMPT_TOKENS, RESPONSE_TOKENS = 100.0, 60.0
PREFIX = "(TaskRunner pid=51234) "
CONFIG = {
    "data": {"train_batch_size": P, "train_files": "~/data/gsm8k/train.parquet", "seed": 7},
    "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"},
                          "actor": {"optim": {"lr": LR, "betas": [0.9, 0.999], "weight_decay": 0.01},
                                    "ppo_mini_batch_size": P // 2, "ppo_epochs": 1, "clip_ratio": 0.2},
                          "rollout": {"n": G, "name": "vllm", "temperature": 1.0}},
    "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
    "trainer": {"project_name": "verl_demo", "experiment_name": "gsm8k", "logger": ["console", "file"],
                "total_training_steps": None, "test_freq": 2},
}


def concat_dict_to_str(data: dict, step: int, rounded: bool) -> str:
    """verl's console line (aggregate_logger.py): v0.4.1 and earlier when `rounded`, v0.5.0 and later otherwise."""
    output = [f"step:{step}"]
    for k, v in data.items():
        if isinstance(v, numbers.Number):
            output.append(f"{k}:{v:.3f}" if rounded else f"{k}:{pprint.pformat(v)}")
    return " - ".join(output)


def step_metrics(step: int, samples: int = P * G) -> dict:
    """The metrics verl's ray_trainer logs for one step (numpy scalars where verl's metric_utils makes them)."""
    return {
        "training/global_step": step, "training/epoch": 0,
        "actor/pg_loss": np.float64(-0.012), "actor/lr": LR, "actor/grad_norm": np.float64(1.0 / step),
        "critic/score/mean": np.float64(0.1 * step), "response_length/mean": np.float64(RESPONSE_TOKENS),
        "prompt_length/mean": np.float64(PROMPT_TOKENS),
        "perf/total_num_tokens": int(samples * (PROMPT_TOKENS + RESPONSE_TOKENS)),
        "timing_s/gen": np.float64(5.123), "timing_s/update_actor": np.float64(2.5), "timing_s/step": np.float64(9.0),
    }


def write_console_log(path: Path, steps=range(1, 5), rounded: bool = False, config: dict | None = CONFIG,
                      ansi: bool = False, extra: dict | None = None) -> Path:
    """A `tee`d verl console: Ray noise, the pprinted config, a validation-only step line, step lines with
    validation every 2 steps."""
    out = io.StringIO()
    out.write("2026-11-30 10:00:01,123\tINFO worker.py:1888 -- Started a local Ray instance.\n")
    out.write(f"{PREFIX}TaskRunner hostname: node-1, PID: 51234\n")
    if config is not None:
        for line in pprint.pformat(config).splitlines():
            out.write(PREFIX + line + "\n")
    out.write(f"{PREFIX}Training Progress:   0%|          | 0/4 [00:00<?, ?it/s]\n")
    first = min(steps)
    val = {"val-core/openai/gsm8k/reward/mean@1": np.float64(0.1)}
    out.write(PREFIX + concat_dict_to_str(val, first - 1, rounded) + "\n")
    for step in steps:
        data = step_metrics(step)
        if step % 2 == 0:
            data["val-core/openai/gsm8k/reward/mean@1"] = np.float64(0.1 + 0.05 * step)
        data.update(extra or {})
        line = PREFIX + concat_dict_to_str(data, step, rounded)
        out.write((f"\x1b[36m{line}\x1b[0m" if ansi else line) + "\n")
        out.write(f"{PREFIX}Training Progress:  {step * 25}%|##        | {step}/4 [00:10<00:30, 9.0s/it]\n")
    path.write_text(out.getvalue())
    return path


def test_console_log_of_verl_0_5_imports_with_its_config(tmp_path):
    log = write_console_log(tmp_path / "verl_demo.log", ansi=True)
    assert "actor/grad_norm:np.float64(1.0)" in log.read_text() and "\x1b[36m(TaskRunner" in log.read_text()
    result = import_log("verl", log, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", P, G)
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert steps[0]["grad_norm/actor"] == 1.0 and steps[1]["reward/mean"] == pytest.approx(0.2)
    assert steps[0]["time/generate"] == 5.123 and [r["wall_s"] for r in steps] == [9.0, 18.0, 27.0, 36.0]
    assert [(r["step"], r["eval/accuracy"]) for r in evals] == [(0, 0.1), (2, pytest.approx(0.2)),
                                                                 (4, pytest.approx(0.3))]
    block = run["import"]
    assert block["shape"] == "console text" and "config printed at start-up" in block["config_path"]
    assert block["batch_from"] == {"prompts_per_step": "config", "samples_per_prompt": "config"}
    assert run["lr"] == LR and run["seed"] == 7 and run["algorithm"] == "grpo"
    assert (run["samples_per_update"], run["updates_per_step"]) == (P // 2 * G, 2)
    assert any("agrees with the logged 32.0 sequences" in n for n in block["notes"])
    assert block["problems"] == [] and result["summary"]["steps"] == 4


def test_rounded_console_needs_the_batch_but_never_writes_lr_0(tmp_path):
    log = write_console_log(tmp_path / "verl_demo.log", rounded=True, config=None)
    assert "actor/lr:0.000" in log.read_text() and "training/global_step:1.000" in log.read_text()
    with pytest.raises(UserError, match="prompts_per_step, samples_per_prompt"):
        import_log("verl", log, tmp_path / "run")
    import_log("verl", log, tmp_path / "run", prompts_per_step=P)  # G from the logged tokens
    records, run = check_run_dir(tmp_path / "run", P, G)
    steps = [r for r in records if r["kind"] == "step"]
    assert all("lr/actor" not in r for r in steps)  # printed as 0.000: unknown, not zero
    assert steps[0]["time/generate"] == 5.123 and steps[0]["reward/mean"] == 0.1
    assert run["lr"] is None and run["import"]["batch_from"]["samples_per_prompt"] == "log"
    problems = " ".join(run["import"]["problems"])
    assert "printed as 0.000 treated as unknown" in problems and "lr unknown" in problems


def test_a_flag_contradicting_the_log_names_both_numbers(tmp_path):
    log = write_console_log(tmp_path / "verl_demo.log")
    with pytest.raises(UserError, match=r"--samples-per-prompt.*16 contradicts 4 in .*verl_demo.log"):
        import_log("verl", log, tmp_path / "run", samples_per_prompt=16)
    log = write_console_log(tmp_path / "no_config.log", config=None)
    with pytest.raises(UserError, match=r"--prompts-per-step and --samples-per-prompt.*P x G = 64 but the log "
                                        r"holds 32.0 sequences"):
        import_log("verl", log, tmp_path / "run", prompts_per_step=16, samples_per_prompt=4)
    assert not (tmp_path / "run").exists()


def test_resumed_console_log_starts_its_clock_at_the_first_logged_step(tmp_path):
    log = write_console_log(tmp_path / "resumed.log", steps=range(101, 105))
    import_log("verl", log, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", P, G)
    steps = [r for r in records if r["kind"] == "step"]
    assert steps[0]["samples"] == 101 * P * G and [r["wall_s"] for r in steps] == [9.0, 18.0, 27.0, 36.0]
    first_eval = next(r for r in records if r["kind"] == "eval")
    assert (first_eval["step"], first_eval["wall_s"]) == (100, 0.0)
    assert run["first_step"] == 101
    assert any("starts at step 101" in n and "first logged eval" in n for n in run["import"]["notes"])


def test_generation_time_is_the_largest_phase_and_odd_keys_are_warned(tmp_path):
    log = write_console_log(tmp_path / "agent.log", extra={"timing_s/generate_async": np.float64(40.0),
                                                           "train/num_gen_batches": 3})
    import_log("verl", log, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert next(r for r in records if r["kind"] == "step")["time/generate"] == 40.0
    problems = " ".join(run["import"]["problems"])
    assert "timing_s/gen is missing or smaller than another generation phase" in problems
    assert "filtering / dynamic sampling detected (key train/num_gen_batches at step 1)" in problems


def test_flat_jsonl_and_file_logger_jsonl_read_alike(tmp_path):
    wrapped, flat = tmp_path / "wrapped" / "gsm8k.jsonl", tmp_path / "flat" / "gsm8k.jsonl"
    wrapped.parent.mkdir(), flat.parent.mkdir()
    with wrapped.open("w") as w, flat.open("w") as f:
        for step in range(1, 4):
            data = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in step_metrics(step).items()}
            w.write(json.dumps({"step": step, "data": data}) + "\n")  # FileLogger: {"step", "data"}
            f.write(json.dumps({"step": step, **data}) + "\n")
    import_log("verl", wrapped, tmp_path / "a", prompts_per_step=P, samples_per_prompt=G)
    import_log("verl", flat, tmp_path / "b", prompts_per_step=P, samples_per_prompt=G)
    a, run_a = check_run_dir(tmp_path / "a", P, G)
    b, run_b = check_run_dir(tmp_path / "b", P, G)
    assert a == b and run_a["lr"] == LR
    assert (run_a["import"]["shape"], run_b["import"]["shape"]) == ("file logger JSONL", "flat JSONL")


def test_hydra_config_above_the_file_loggers_default_path(tmp_path):
    """FileLogger writes <cwd>/<project>/<experiment>.jsonl; Hydra writes <cwd>/outputs/<date>/<time>/.hydra/."""
    for time_dir, experiment, prompts in (("10-00-00", "other", 2), ("11-00-00", "gsm8k", P)):
        hydra = tmp_path / "outputs" / "2026-11-30" / time_dir / ".hydra"
        hydra.mkdir(parents=True)
        config = json.loads(json.dumps(CONFIG))
        config["trainer"]["experiment_name"], config["data"]["train_batch_size"] = experiment, prompts
        import yaml

        (hydra / "config.yaml").write_text(yaml.safe_dump(config))
    log = tmp_path / "verl_demo" / "gsm8k.jsonl"
    log.parent.mkdir()
    log.write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": 0.1, "timing_s/step": 1.0}}) + "\n"
                           for s in (1, 2)))
    import_log("verl", log, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert run["import"]["config_path"].endswith("11-00-00/.hydra/config.yaml")


def test_text_that_is_no_verl_log_is_refused_naming_the_line(tmp_path):
    log = tmp_path / "notes.txt"
    log.write_text("hello\nstep 1 loss 0.3\n")
    with pytest.raises(UserError, match=r"notes.txt: line 1.*neither JSON nor a verl console line.*console log"):
        import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)


def test_refusals_name_the_place_and_the_fix(tmp_path):
    log = tmp_path / "mixed.jsonl"
    log.write_text('{"step": 1, "data": {"timing_s/step": 1.0}}\n{"step": 2, "timing_s/step": 1.0}\n')
    with pytest.raises(UserError, match=r"mixed.jsonl: mixes file-logger lines .* and flat lines.*Fix: import one"):
        import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    log = write_console_log(tmp_path / "verl_demo.log")
    with pytest.raises(UserError, match=r"^--prompts-per-step: 16 contradicts 8 in .*verl_demo.log \(config printed "
                                        r"at start-up, line 3\).*Fix: drop --prompts-per-step"):
        import_log("verl", log, tmp_path / "run", prompts_per_step=16)
    assert not (tmp_path / "run").exists()


def test_unreadable_values_and_a_config_without_the_batch_are_reported(tmp_path):
    log = write_console_log(tmp_path / "verl_demo.log", config={"trainer": {"project_name": "x"}, "data": {}},
                            extra={"timing_s/custom": np.float64(1.0)})
    log.write_text(log.read_text().replace("timing_s/custom:np.float64(1.0)", "timing_s/custom:tensor(1.)"))
    import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert any("value(s) that are not numbers skipped, e.g. line" in p for p in run["import"]["problems"])
    assert run["import"]["batch_from"] == {"prompts_per_step": "flag", "samples_per_prompt": "flag"}


def test_a_larger_custom_generation_phase_and_a_step_without_one_are_warned(tmp_path):
    log = write_console_log(tmp_path / "custom.log", extra={"timing_s/rollout_with_tools": np.float64(30.0)})
    text = log.read_text().replace(" - timing_s/gen:np.float64(5.123)", "", 1)  # step 1 logs no generation time
    log.write_text(text)
    import_log("verl", log, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", P, G)
    steps = [r for r in records if r["kind"] == "step"]
    assert "time/generate" not in steps[0] and steps[1]["time/generate"] == 5.123  # an unmapped key is never used
    problems = " ".join(run["import"]["problems"])
    assert "(e.g. timing_s/rollout_with_tools at step 2)" in problems
    assert "1 step(s) log no generation time (e.g. step 1)" in problems
