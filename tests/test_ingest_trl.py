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


def test_gradient_noise_keys_from_the_callback_pass_through(tmp_path):
    """The keys batchscale's GradientNoiseCallback adds (integrations.trl) keep their names; a null gns/b_noise (not
    resolved) stays null instead of being dropped; the Trainer's closing summary at the last step is no duplicate."""
    state = json.loads(write_trainer_state(tmp_path / "plain.json").read_text())
    for entry, b_noise in zip([e for e in state["log_history"] if "reward" in e], [None, 40.0, 52.5, 61.0]):
        entry.update({"gns/grad_sq": 0.5, "gns/trace_sigma": 20.0, "gns/b_noise": b_noise, "time/generate": 1.5,
                      "time/train": 0.5})
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    import_log("trl", tmp_path / "trainer_state.json", tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    steps = [r for r in records if r["kind"] == "step"]
    assert [r["gns/b_noise"] for r in steps] == [None, 40.0, 52.5, 61.0]
    assert all(r["gns/grad_sq"] == 0.5 and r["gns/trace_sigma"] == 20.0 for r in steps)
    assert all(r["time/generate"] == 1.5 and r["time/train"] == 0.5 for r in steps)
    block = run["import"]
    assert block["problems"] == []  # nothing dropped, no step "logged more than once"
    assert not any(key.startswith(("gns/", "time/")) for key in block["unknown_keys"])
    assert not any(line.startswith(("time/generate", "time/train")) for line in block["not_provided"])
    assert any("GradientNoiseCallback" in note for note in block["notes"])


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
    with pytest.raises(UserError, match=r"P unknown; known: G = 8 from --samples-per-prompt\. Fix: pass "
                                        r"--prompts-per-step P \(trl: P = per_device_train_batch_size"):
        import_log("trl", state, tmp_path / "run", samples_per_prompt=G)
    assert not (tmp_path / "run").exists()


def write_old_grpo_state(path: Path, steps: int = 12, reward_key: str = "reward") -> Path:
    """TRL GRPO before April 2025 (and many forks): `completion_length`, no `step_time`, no eval entries; entries as
    Trainer.log appends them ({**logs, "step": global_step}), logging every step."""
    history = [{"loss": 0.0, "grad_norm": 0.5, "learning_rate": 1e-6, "completion_length": 80.0 + step,
                reward_key: 0.05 * step, "rewards/accuracy_reward": 0.05 * step, "reward_std": 0.3, "kl": 0.001,
                "epoch": step / 100, "step": step} for step in range(1, steps + 1)]
    path.write_text(json.dumps({"global_step": steps, "logging_steps": 1, "train_batch_size": 16,
                                "num_generations": G, "log_history": history}))
    return path


def test_old_trl_keys_and_batch_hints_from_the_state(tmp_path):
    """The state's num_generations hints G; its train_batch_size / num_generations is not P (per device, one
    micro-step) and is never used."""
    write_old_grpo_state(tmp_path / "trainer_state.json")
    with pytest.raises(UserError, match=r"^prompts_per_step: "):
        import_log("trl", tmp_path / "trainer_state.json", tmp_path / "run")
    import_log("trl", tmp_path / "trainer_state.json", tmp_path / "run", prompts_per_step=8)
    records, run = check_run_dir(tmp_path / "run", 8, G)
    steps = [r for r in records if r["kind"] == "step"]
    assert steps[0]["response/length_mean"] == 81.0 and steps[0]["reward/mean"] == pytest.approx(0.05)
    assert run["import"]["batch_from"] == {"prompts_per_step": "flag", "samples_per_prompt": "log"}
    assert run["first_step"] == 1 and steps[0]["wall_s"] is None


def test_per_function_rewards_alone_give_their_sum(tmp_path):
    state = tmp_path / "trainer_state.json"
    history = [{"step": s, "rewards/format_reward/mean": 0.5, "rewards/accuracy_reward/mean": 0.1 * s,
                "completions/mean_length": 40.0} for s in (1, 2)]
    state.write_text(json.dumps({"logging_steps": 1, "log_history": history}))
    import_log("trl", state, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert [r["reward/mean"] for r in records] == [pytest.approx(0.6), pytest.approx(0.7)]
    assert run["import"]["unknown_keys"] == []


def test_sft_trainer_state_is_not_an_rl_run(tmp_path):
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"logging_steps": 10, "log_history": [
        {"loss": 1.9, "grad_norm": 3.0, "learning_rate": 2e-5, "epoch": 0.1, "step": 10},
        {"eval_loss": 1.7, "eval_runtime": 5.0, "epoch": 0.1, "step": 10}]}))
    with pytest.raises(UserError, match=r"trainer_state.json: log_history: not an RL run: no 'reward'.*Fix: import "
                                        r"the trainer_state.json of an RL run"):
        import_log("trl", state, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    assert not (tmp_path / "run").exists()


def test_analyze_train_reward_scores_runs_without_evals_and_says_so(tmp_path, capsys):
    from batchscale.cli import main

    sweep = tmp_path / "sweep"
    for prompts in (2, 4):
        state = write_old_grpo_state(tmp_path / f"state{prompts}.json")
        import_log("trl", state, sweep / "runs" / f"p{prompts}__s0", prompts_per_step=prompts, label=f"p{prompts}")
    assert main(["analyze", str(sweep), "--json"]) == 2
    assert "--score train-reward" in capsys.readouterr().err
    assert main(["analyze", str(sweep), "--score", "train-reward", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert "training reward reward/mean" in result["target_rule"] and "not a held-out eval" in captured.err
    assert result["configs"]["p2"]["samples_to_target"]["mean"] < result["configs"]["p4"]["samples_to_target"]["mean"]
    assert "training reward reward/mean" in (sweep / "report.md").read_text()
    assert result["score"] == "train-reward"


def test_a_plan_on_training_reward_curves_says_so(tmp_path, capsys):
    from batchscale.analysis.synthetic import write_synthetic_sweep
    from batchscale.cli import main

    sweep = write_synthetic_sweep(tmp_path / "sweep", prompts_per_step=(4, 8), seeds=(0, 1), control_prompts_per_step=None)
    for score, said in (("eval", False), ("train-reward", True)):
        assert main(["analyze", str(sweep), "--score", score, "--json"]) == 0
        capsys.readouterr()
        assert main(["plan", str(sweep), "--json"]) == 0
        assert ("from the training reward" in json.loads(capsys.readouterr().out)["explanation"]) is said


def test_analyze_refuses_an_unknown_score(tmp_path, capsys):
    from batchscale.cli import main

    import_log("trl", write_old_grpo_state(tmp_path / "state.json"), tmp_path / "sweep" / "runs" / "a__s0",
               prompts_per_step=2, label="a")
    assert main(["analyze", str(tmp_path / "sweep"), "--score", "eval-reward"]) == 2
    err = capsys.readouterr().err
    assert "--score" in err and "unknown score 'eval-reward'" in err and "eval, train-reward" in err


def grpo_config_class(monkeypatch):
    """TRL's GRPOConfig as trl/trainer/grpo_config.py defines it (v0.23: a TrainingArguments dataclass whose
    __post_init__ sets steps_per_generation and generation_batch_size from the process count), registered under its
    real module path so torch.save pickles it by that name."""
    from dataclasses import dataclass

    from transformers import TrainingArguments

    @dataclass
    class GRPOConfig(TrainingArguments):
        num_generations: int = 8
        num_iterations: int = 1
        steps_per_generation: int | None = None
        generation_batch_size: int | None = None

        def __post_init__(self):
            super().__post_init__()
            num_processes = self.world_size
            if self.generation_batch_size is None and self.steps_per_generation is None:
                self.steps_per_generation = self.gradient_accumulation_steps
            if self.generation_batch_size is None:
                per_generation = self.per_device_train_batch_size * self.steps_per_generation
                self.generation_batch_size = per_generation * num_processes

    return register_as_trl(GRPOConfig, monkeypatch)


def register_as_trl(cls, monkeypatch):
    """Make `cls` importable as trl.trainer.grpo_config.GRPOConfig for this test (pickle saves classes by name)."""
    import sys
    import types

    module = types.ModuleType("trl.trainer.grpo_config")
    cls.__module__, cls.__qualname__ = module.__name__, "GRPOConfig"
    module.GRPOConfig = cls
    for name in ("trl", "trl.trainer"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return cls


@pytest.mark.slow  # builds transformers' TrainingArguments (imports transformers and accelerate: ~10 s on 2 cores)
def test_training_args_bin_gives_p_and_g_where_the_state_hint_was_wrong(tmp_path, monkeypatch):
    """P = 8 x 2 x 1 process / 8 = 2 with steps_per_generation 4; the state's train_batch_size / num_generations
    (8 / 8 = 1) was the wrong hint. Written by torch.save, as Trainer._save writes training_args.bin."""
    import torch

    checkpoint = tmp_path / "checkpoint-20"
    checkpoint.mkdir()
    write_trainer_state(checkpoint / "trainer_state.json")
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    state.update({"train_batch_size": 8, "num_generations": 8})
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    config = grpo_config_class(monkeypatch)(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8,
                                            gradient_accumulation_steps=2, steps_per_generation=4, num_generations=8,
                                            learning_rate=3e-6, seed=5, report_to=[])
    torch.save(config, checkpoint / "training_args.bin")
    import_log("trl", checkpoint, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", 2, 8)
    assert run["import"]["batch_from"] == {"prompts_per_step": "config", "samples_per_prompt": "config"}
    assert run["lr"] == 3e-6 and run["seed"] == 5
    assert "GRPOConfig, read by pickle opcodes" in run["import"]["config_path"]
    assert any("one generation batch serves 2 optimizer steps" in n for n in run["import"]["notes"])
    with pytest.raises(UserError, match=r"--prompts-per-step: 4 contradicts 2 in .*training_args.bin"):
        import_log("trl", checkpoint, tmp_path / "run2", prompts_per_step=4)


def test_plain_pickle_args_give_the_process_count_from_the_generation_batch(tmp_path, monkeypatch):
    """A plain (non-zip) pickle without accelerate's state: processes = generation_batch_size / (per-device x
    steps_per_generation) = 64 / (4 x 4) = 4, so P = 4 x 4 x 4 / num_iterations 2 / G 4 = 8."""
    import pickle
    from dataclasses import dataclass

    @dataclass
    class GRPOConfig:
        per_device_train_batch_size: int = 4
        gradient_accumulation_steps: int = 4
        num_generations: int = 4
        num_iterations: int = 2
        steps_per_generation: int = 4
        generation_batch_size: int = 64
        learning_rate: float = 1e-6

    register_as_trl(GRPOConfig, monkeypatch)
    write_trainer_state(tmp_path / "trainer_state.json")
    (tmp_path / "training_args.bin").write_bytes(pickle.dumps(GRPOConfig(), protocol=2))
    import_log("trl", tmp_path / "trainer_state.json", tmp_path / "run")
    check_run_dir(tmp_path / "run", 8, 4)


@pytest.mark.parametrize("zipped", [False, True])
def test_a_training_args_bin_with_a_reduce_payload_is_refused_and_nothing_runs(tmp_path, zipped):
    import os
    import pickle

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    write_trainer_state(tmp_path / "trainer_state.json")
    if zipped:
        import torch

        torch.save(Payload(), tmp_path / "training_args.bin")
    else:
        (tmp_path / "training_args.bin").write_bytes(pickle.dumps(Payload(), protocol=2))
    with pytest.raises(UserError, match=r"training_args.bin: it calls (posix|os)\.system, which is not a known "
                                        r"configuration class; refused, nothing in it was run"):
        import_log("trl", tmp_path, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    assert not marker.exists() and not (tmp_path / "run").exists()
