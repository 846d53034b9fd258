"""One run per import (src/batchscale/ingest/runs.py): a PATH that holds several runs is refused, naming each run and
how to import it; a resumed run (the same config, steps that continue) still merges. Also the questions that say what
the log does give, and a verl console that holds no metrics.

TensorBoard files are written with torch's SummaryWriter as verl's `_TensorboardAdapter` uses it (verl/utils/
tracking.py at b178a3c: `add_scalar(key, value, step)` per key, one writer per run in `tensorboard_log/<project>/
<experiment>`), and, for TRL, `add_text("args", args.to_json_string())` as transformers' TensorBoardCallback writes it.
"""

from __future__ import annotations

import json
import pprint
import re
from pathlib import Path

import pytest
from test_ingest_common import check_run_dir
from test_ingest_verl_console import CONFIG, PREFIX, write_console_log

from batchscale.errors import UserError
from batchscale.ingest.importer import import_log

P, G = 4, 2


def write_verl_events(log_dir: Path, steps, source: str, reward, eval_at=(0,), tag_suffix: str = "") -> Path:
    """One verl run's TensorBoard file: `add_scalar` per key per step, validation under val-core/<source>/."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(log_dir), filename_suffix=tag_suffix)
    for step in eval_at:
        writer.add_scalar(f"val-core/{source}/reward/mean@1", 0.3 + 0.01 * step, step)
    for step in steps:
        for key, value in {"critic/score/mean": reward(step), "response_length/mean": 80.0, "timing_s/gen": 3.0,
                           "timing_s/update_actor": 2.0, "timing_s/step": 6.0, "actor/grad_norm": 0.5,
                           "actor/lr": 1e-6}.items():
            writer.add_scalar(key, value, step)
    writer.close()
    return log_dir


def event_files(log_dir: Path) -> list[Path]:
    """The files in the order they were written (their suffixes .a, .b; the writer's counter in the name may not sort)."""
    return sorted(log_dir.glob("events.out.tfevents.*"), key=lambda p: p.suffix)


def test_a_tensorboard_directory_of_two_runs_is_refused_naming_each(tmp_path):
    """The issue's case: two runs in one directory, validated on different datasets, the second starting from
    scratch (reward -0.58 in one, 0.55 in the other); before, they were merged into one run."""
    pytest.importorskip("tensorboard")
    log_dir = tmp_path / "tensorboard_log"
    write_verl_events(log_dir, range(1, 3), "openai/gsm8k", lambda s: -0.58, tag_suffix=".a")
    write_verl_events(log_dir, range(1, 7), "lighteval/MATH", lambda s: 0.55, tag_suffix=".b")
    first, second = event_files(log_dir)
    with pytest.raises(UserError) as refused:
        import_log("tensorboard", log_dir, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    message = str(refused.value)
    assert "holds 2 runs, not one" in message and f"run 1: {first.name} (steps 0-2" in message
    assert f"run 2: {second.name} (steps 0-6" in message
    assert (f"{second.name} evaluates on other data (lighteval/MATH/reward/mean@1 instead of openai/gsm8k/reward/"
            "mean@1) and starts again at step 0") in message
    assert "pass its event file" in message
    assert not (tmp_path / "run").exists()
    for number, file in enumerate((first, second)):  # each imports on its own
        import_log("tensorboard", file, tmp_path / f"run{number}", prompts_per_step=P, samples_per_prompt=G)
        check_run_dir(tmp_path / f"run{number}", P, G)


def test_other_eval_data_or_a_gap_is_another_run_even_without_a_restart(tmp_path):
    pytest.importorskip("tensorboard")
    for name, (later_steps, source, said) in {
        "data": (range(4, 7), "lighteval/MATH", "evaluates on other data"),
        "gap": (range(9, 12), "openai/gsm8k", "after a gap (the run before it ends at step 3)"),
    }.items():
        log_dir = tmp_path / name
        write_verl_events(log_dir, range(1, 4), "openai/gsm8k", lambda s: 0.1, eval_at=(2,), tag_suffix=".a")
        write_verl_events(log_dir, later_steps, source, lambda s: 0.2, eval_at=(later_steps[0],), tag_suffix=".b")
        with pytest.raises(UserError, match=re.escape(said)):
            import_log("tensorboard", log_dir, tmp_path / f"run-{name}", prompts_per_step=P, samples_per_prompt=G)


def test_a_resumed_run_in_one_tensorboard_directory_merges(tmp_path):
    """Resumed from the checkpoint at step 3 after a crash at step 5: steps 4-5 are logged twice, the later wins."""
    pytest.importorskip("tensorboard")
    log_dir = tmp_path / "tensorboard_log"
    write_verl_events(log_dir, range(1, 6), "openai/gsm8k", lambda s: 0.1 * s, eval_at=(0,), tag_suffix=".a")
    write_verl_events(log_dir, range(4, 9), "openai/gsm8k", lambda s: 0.2 * s, eval_at=(4,), tag_suffix=".b")
    import_log("tensorboard", log_dir, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    steps = {r["step"]: r["reward/mean"] for r in records if r["kind"] == "step"}
    assert sorted(steps) == list(range(1, 9))
    assert steps[3] == pytest.approx(0.3) and steps[5] == pytest.approx(1.0)  # steps 4-5: the resumed run's values
    assert any("merged 2 event files of one run" in note for note in run["import"]["notes"])
    assert any("logged more than once (resumed run?)" in p for p in run["import"]["problems"])


def write_trl_events(log_dir: Path, steps, num_generations: int, suffix: str) -> Path:
    """A TRL run through transformers' TensorBoardCallback: the arguments as JSON text, scalars under train/."""
    from torch.utils.tensorboard import SummaryWriter

    args = {"output_dir": "out", "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2,
            "learning_rate": 1e-6, "seed": 42, "num_generations": num_generations, "num_iterations": 1,
            "steps_per_generation": 2, "generation_batch_size": 16, "logging_steps": 1, "log_completions": False}
    writer = SummaryWriter(log_dir=str(log_dir), filename_suffix=suffix)
    writer.add_text("args", json.dumps(args, indent=2, sort_keys=True))
    for step in steps:
        for key, value in {"train/reward": 0.1 * step, "train/completions/mean_length": 50.0,
                           "train/grad_norm": 0.4, "train/learning_rate": 1e-6, "train/step_time": 2.0}.items():
            writer.add_scalar(key, value, step)
    writer.close()
    return log_dir


def test_trl_files_with_another_config_are_another_run_and_the_args_text_is_the_config(tmp_path):
    pytest.importorskip("tensorboard")
    log_dir = tmp_path / "runs"
    write_trl_events(log_dir, range(1, 4), num_generations=8, suffix=".a")
    write_trl_events(log_dir, range(3, 6), num_generations=4, suffix=".b")
    with pytest.raises(UserError, match=r"has another config \(prompts_per_step 2 -> 4, samples_per_prompt 8 -> 4\)"):
        import_log("tensorboard", log_dir, tmp_path / "run")
    first = event_files(log_dir)[0]
    import_log("tensorboard", first, tmp_path / "run")  # no flags: P and G from args/text_summary
    records, run = check_run_dir(tmp_path / "run", 2, 8)  # 8 x 2 x 1 process / 8 completions per prompt
    assert run["import"]["config_path"].endswith(f"{first.name} (args/text_summary)")
    assert run["import"]["batch_from"] == {"prompts_per_step": "config", "samples_per_prompt": "config"}
    assert run["lr"] == 1e-6 and run["seed"] == 42


def write_flat_jsonl(path: Path, *stretches) -> Path:
    lines = [{"step": step, "critic/score/mean": 0.1 * step, "response_length/mean": 50.0, "timing_s/step": 2.0}
             for steps in stretches for step in steps]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_two_runs_appended_to_one_jsonl_are_refused_and_a_resume_merges(tmp_path):
    log = write_flat_jsonl(tmp_path / "appended.jsonl", range(1, 6), range(1, 4))
    with pytest.raises(UserError, match=r"holds 2 runs, not one \(run 1: line 1-5 \(steps 1-5\); run 2: line 6-8 "
                                        r"\(steps 1-3\)\): line 6-8 starts again at step 1.*split the file where the "
                                        r"second run begins \(line 6"):
        import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    resumed = write_flat_jsonl(tmp_path / "resumed.jsonl", range(1, 6), range(4, 9))
    import_log("verl", resumed, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert [r["step"] for r in records] == list(range(1, 9))


def test_a_console_that_printed_two_different_configs_is_two_runs(tmp_path):
    first = write_console_log(tmp_path / "a.log", steps=range(1, 4))
    other = {**CONFIG, "data": {**CONFIG["data"], "train_batch_size": 16}}
    second = write_console_log(tmp_path / "b.log", steps=range(1, 3), config=other)
    both = tmp_path / "both.log"
    both.write_text(first.read_text() + second.read_text())
    with pytest.raises(UserError, match=r"has another config \(prompts_per_step 8 -> 16\)"):
        import_log("verl", both, tmp_path / "run")
    resumed = write_console_log(tmp_path / "c.log", steps=range(3, 6))  # the same config, resumed at step 3
    both.write_text(first.read_text() + resumed.read_text())
    import_log("verl", both, tmp_path / "run")
    check_run_dir(tmp_path / "run", 8, 4)


def test_a_directory_of_several_verl_logs_names_them(tmp_path):
    write_flat_jsonl(tmp_path / "a.jsonl", range(1, 3))
    write_flat_jsonl(tmp_path / "b.jsonl", range(1, 3))
    with pytest.raises(UserError, match=r"holds 2 logs \(a.jsonl, b.jsonl\), one run per import.*batchscale import "
                                        r"verl .*a.jsonl"):
        import_log("verl", tmp_path, tmp_path / "run")


def test_the_question_says_what_the_token_counts_give(tmp_path):
    log = tmp_path / "verl.jsonl"
    log.write_text("".join(json.dumps({"step": s, "data": {
        "critic/score/mean": 0.1, "response_length/mean": 60.0, "prompt_length/mean": 40.0,
        "perf/total_num_tokens": 128 * 100}}) + "\n" for s in (1, 2)))
    with pytest.raises(UserError, match=r"P or G unknown; known: P x G = 128 from the token counts \(perf/total_num_"
                                        r"tokens.*pass --prompts-per-step P or --samples-per-prompt G \(one is "
                                        r"enough\)"):
        import_log("verl", log, tmp_path / "run")
    import_log("verl", log, tmp_path / "run", samples_per_prompt=8)  # one is enough
    check_run_dir(tmp_path / "run", 16, 8)


@pytest.mark.parametrize("loggers, said", [
    (["wandb"], r"trainer.logger \['wandb'\] sent them to W&B \(export the run's history as CSV"),
    (["console", "tensorboard"], r"sent them to TensorBoard \(\$TENSORBOARD_DIR"),
    (["console"], r"stopped before its first step"),
])
def test_a_verl_console_without_metrics_says_where_they_went(tmp_path, loggers, said):
    config = {**CONFIG, "trainer": {**CONFIG["trainer"], "logger": loggers}}
    lines = [PREFIX + line for line in pprint.pformat(config).splitlines()]
    lines += [f"{PREFIX}Training Progress:  {25 * i}%|##        | {i}/4 [00:10<00:30, 9.0s/it]" for i in range(4)]
    log = tmp_path / "verl_demo.log"
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=r"holds no metrics: a verl console \(the config printed at line 1\) without "
                                        r"a single `step:N - key:value` line.*" + said):
        import_log("verl", log, tmp_path / "run")


def test_a_flag_contradicting_the_args_text_names_both(tmp_path):
    pytest.importorskip("tensorboard")
    write_trl_events(tmp_path / "runs", range(1, 4), num_generations=8, suffix=".a")
    with pytest.raises(UserError, match=r"--prompts-per-step: 4 contradicts 2 in .*\(args/text_summary\)"):
        import_log("tensorboard", tmp_path / "runs", tmp_path / "run", prompts_per_step=4)


@pytest.mark.slow  # builds transformers' TrainingArguments and its TensorBoardCallback (imports transformers: ~10 s)
def test_the_args_text_the_hugging_face_callback_writes_gives_p_and_g(tmp_path, monkeypatch):
    """transformers' own TensorBoardCallback (on_train_begin: add_text("args", args.to_json_string()); on_log:
    train/-prefixed scalars) with TRL's GRPOConfig as test_ingest_trl rebuilds it (v0.23 fields)."""
    pytest.importorskip("tensorboard")
    from test_ingest_trl import grpo_config_class
    from transformers import TrainerControl, TrainerState
    from transformers.integrations import TensorBoardCallback

    config = grpo_config_class(monkeypatch)(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8,
                                            gradient_accumulation_steps=2, num_generations=4, learning_rate=2e-6,
                                            seed=3, report_to=[])
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    callback, state = TensorBoardCallback(), TrainerState()
    callback.on_train_begin(config, state, TrainerControl())
    for step in (1, 2, 3):
        state.global_step = step
        callback.on_log(config, state, TrainerControl(), logs={"reward": 0.1 * step, "grad_norm": 0.3,
                                                                 "learning_rate": 2e-6, "step_time": 1.5,
                                                                 "completions/mean_length": 40.0})
    callback.tb_writer.close()
    import_log("tensorboard", tmp_path / "tb", tmp_path / "run")
    _, run = check_run_dir(tmp_path / "run", 4, 4)  # 8 x 2 x 1 process / 4 completions per prompt
    assert run["lr"] == 2e-6 and run["seed"] == 3 and run["import"]["config_path"].endswith("(args/text_summary)")
