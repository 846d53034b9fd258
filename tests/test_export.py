"""`batchscale export`: the scripts run (with stand-ins for python3 and batchscale) and carry the sweep's numbers.

Each script is executed by bash with a fake `python3` that records its argv (and creates the log the engine would
write) and a fake `batchscale` that records the import command, so the test checks the words the engine and the importer
would really receive, after bash's quoting and expansion.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchscale.cli import main

ROOT = Path(__file__).resolve().parents[1]
G, LR_REF, B_REF, BUDGET, EVAL_EVERY = 8, 1e-4, 128, 2048, 256
PROMPTS = (4, 16)
SEEDS = (0, 3)
ENV_INPUTS = {"MODEL_PATH": "/models/my model", "TRAIN_FILES": "/data/train.parquet", "VAL_FILES": "/data/val.parquet",
              "REWARD_FUNC": "/data/reward.py"}

FAKE_PYTHON = """#!{python}
import json, os, sys
args = sys.argv[1:]
if args[:1] in (["-"], ["-c"]):  # the script's own checks (the prompt count) run on the real interpreter
    os.execv(sys.executable, [sys.executable, *args])
capture = os.environ["CAPTURE_DIR"]
with open(os.path.join(capture, "engine-%d.json" % len(os.listdir(capture))), "w") as f:
    json.dump(args, f)
def value(*flags):
    return next(args[args.index(flag) + 1] for flag in flags if flag in args)
if "verl.trainer.main_ppo" in args:  # a three-step file-logger JSONL, evaluated before and after
    with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as f:
        for step in range(4):
            data = {{"timing_s/step": 2.0, "critic/score/mean": 0.1 * step}} if step else {{}}
            if step in (0, 3):
                data["val-core/gsm8k/acc/mean@1"] = 0.1 * step
            f.write(json.dumps({{"step": step, "data": data}}) + "\\n")
else:  # OpenRLHF: <tensorboard dir>/<run name>
    tb = value("--logger.tensorboard_dir", "--use_tensorboard")
    os.makedirs(os.path.join(tb, value("--logger.wandb.run_name", "--wandb_run_name")), exist_ok=True)
"""
FAKE_BATCHSCALE = """#!{python}
import json, os, sys
capture = os.environ["CAPTURE_DIR"]
with open(os.path.join(capture, "import-%d.json" % len(os.listdir(capture))), "w") as f:
    json.dump(sys.argv[1:], f)
"""


def write_sweep(tmp_path: Path, algorithm: str = "grpo") -> Path:
    path = tmp_path / f"sweep-{algorithm}.toml"
    path.write_text(f"""base = "{ROOT / 'examples' / 'grpo-tiny.toml'}"
seeds = {list(SEEDS)}
[set]
"algorithm.name" = "{algorithm}"
"optim.lr" = {LR_REF}
"critic.lr" = 2e-4
"batch.reference_samples_per_step" = {B_REF}
"batch.samples_per_prompt" = {G}
"run.budget_samples" = {BUDGET}
"run.eval_every_samples" = {EVAL_EVERY}
[grid]
"batch.prompts_per_step" = {list(PROMPTS)}
""")
    return path


def expected_lr(lr_ref: float, prompts: int) -> float:
    return lr_ref * math.sqrt(prompts * G / B_REF)  # the square-root rule, computed here independently


def export(tmp_path: Path, fmt: str, algorithm: str = "grpo") -> Path:
    out = tmp_path / f"export-{fmt}-{algorithm}"
    assert main(["export", fmt, str(write_sweep(tmp_path, algorithm)), "--out", str(out)]) == 0
    return out


def run_script(script: Path, tmp_path: Path, env_extra: dict | None = None, real_batchscale: bool = False,
               returncode: int = 0) -> tuple[list[str], list[str] | None, str]:
    """Run one exported script with the stand-ins; returns (engine argv, import argv, stderr)."""
    fake_bin = tmp_path / ("fakebin-python" if real_batchscale else "fakebin")
    fake_bin.mkdir(exist_ok=True)
    fakes = (("python3", FAKE_PYTHON),) + (() if real_batchscale else (("batchscale", FAKE_BATCHSCALE),))
    for name, text in fakes:
        (fake_bin / name).write_text(text.format(python=sys.executable))
        (fake_bin / name).chmod(0o755)
    runs = len(list(tmp_path.glob(f"capture-{script.parent.name}-{script.stem}-*")))
    capture = tmp_path / f"capture-{script.parent.name}-{script.stem}-{runs}"  # one per run of the script
    capture.mkdir()
    path = f"{fake_bin}:{Path(sys.executable).parent}:{os.environ['PATH']}"  # the venv's batchscale, if not faked
    env = {**os.environ, **ENV_INPUTS, "CAPTURE_DIR": str(capture), "PATH": path, "OPENRLHF_VERSION": "0.10.1",
           **(env_extra or {})}
    proc = subprocess.run(["bash", str(script), "extra.option=1"], env=env, capture_output=True, text=True)
    assert proc.returncode == returncode, proc.stderr
    if returncode:
        return [], None, proc.stderr
    engine = json.loads((capture / "engine-0.json").read_text())
    imported = None if real_batchscale else json.loads((capture / "import-1.json").read_text())
    return engine, imported, proc.stderr


def hydra_overrides(argv: list[str]) -> dict[str, str]:
    assert argv[:2] == ["-m", "verl.trainer.main_ppo"]
    return dict(word.split("=", 1) for word in argv[2:])


def flag_values(argv: list[str], module: str) -> dict[str, list[str]]:
    """--flag v1 v2 ... -> {flag: [v1, v2]}; a switch maps to []."""
    assert argv[:2] == ["-m", module]
    flags: dict[str, list[str]] = {}
    for word in argv[2:]:
        if word.startswith("--"):
            current = flags.setdefault(word, [])
        else:
            current.append(word)
    return flags


def check_import(imported: list[str], fmt: str, log: str, out_dir: Path, name: str, prompts: int, seed: int) -> None:
    label = name.rsplit("__s", 1)[0]
    assert imported == ["import", fmt, log, "--out", str(out_dir / "runs" / name), "--label", label,
                        "--prompts-per-step", str(prompts), "--samples-per-prompt", str(G), "--seed", str(seed),
                        "--lr-rule", "sqrt", "--overwrite"]


def points_of(out: Path) -> list[dict]:
    return json.loads((out / "sweep.json").read_text())["points"]


def test_verl_scripts_carry_the_sweep(tmp_path):
    out = export(tmp_path, "verl")
    points = points_of(out)
    assert sorted((p["prompts_per_step"], p["seed"]) for p in points) == sorted(
        (p, s) for p in PROMPTS for s in SEEDS)
    for point in points:
        prompts, seed = point["prompts_per_step"], point["seed"]
        engine, imported, _ = run_script(out / point["script"], tmp_path)
        o = hydra_overrides(engine[:-1])
        assert engine[-1] == "extra.option=1"  # the script's own arguments reach the engine
        assert o["algorithm.adv_estimator"] == "grpo"
        assert int(o["data.train_batch_size"]) == prompts
        assert int(o["actor_rollout_ref.rollout.n"]) == G
        assert int(o["actor_rollout_ref.actor.ppo_mini_batch_size"]) == prompts  # single pass: one update per batch
        assert int(o["actor_rollout_ref.actor.ppo_epochs"]) == 1
        assert float(o["actor_rollout_ref.actor.optim.lr"]) == pytest.approx(expected_lr(LR_REF, prompts), rel=1e-12)
        assert int(o["trainer.total_training_steps"]) == math.ceil(BUDGET / (prompts * G))
        assert int(o["trainer.test_freq"]) == max(1, EVAL_EVERY // (prompts * G))
        assert int(o["data.seed"]) == seed
        assert o["trainer.experiment_name"] == f"'{point['name']}'"  # quoted for Hydra: a label may hold '='
        assert o["actor_rollout_ref.actor.clip_ratio_low"] == o["actor_rollout_ref.actor.clip_ratio_high"] == "0.2"
        assert o["actor_rollout_ref.actor.optim.betas"] == "[0.9,0.999]"
        assert o["trainer.logger"] == "[console,file]"
        assert o["actor_rollout_ref.model.path"] == ENV_INPUTS["MODEL_PATH"]  # a path with a space survives
        assert o["data.train_files"] == ENV_INPUTS["TRAIN_FILES"] and o["data.val_files"] == ENV_INPUTS["VAL_FILES"]
        assert "critic.optim.lr" not in o
        log = str(out / "work" / point["name"] / "verl_log.jsonl")
        assert o["hydra.run.dir"] == f"'{out / 'work' / point['name']}'"  # config.yaml lands beside the log
        check_import(imported, "verl", log, out, point["name"], prompts, seed)
        assert point["lr"] == pytest.approx(expected_lr(LR_REF, prompts), rel=1e-12)
        assert point["samples_per_step"] == prompts * G


@pytest.mark.parametrize("fmt", ["openrlhf", "openrlhf-legacy"])
def test_openrlhf_scripts_carry_the_sweep(tmp_path, fmt):
    dotted = fmt == "openrlhf"
    f = (lambda new, old: new if dotted else old)
    out = export(tmp_path, fmt)
    for point in points_of(out):
        prompts, seed = point["prompts_per_step"], point["seed"]
        engine, imported, _ = run_script(out / point["script"], tmp_path)
        flags = flag_values(engine[:-1], "openrlhf.cli.train_ppo_ray")
        steps = math.ceil(BUDGET / (prompts * G))
        assert flags[f("--rollout.batch_size", "--rollout_batch_size")] == [str(prompts)]
        assert flags[f("--rollout.n_samples_per_prompt", "--n_samples_per_prompt")] == [str(G)]
        assert flags[f("--train.batch_size", "--train_batch_size")] == [str(prompts * G)]  # single pass
        assert flags[f("--train.max_epochs", "--max_epochs")] == ["1"]
        assert flags[f("--data.max_samples", "--max_samples")] == [str(steps * prompts)]  # the step budget
        assert flags[f("--train.num_episodes", "--num_episodes")] == ["1"]
        lr = float(flags[f("--actor.adam.lr", "--actor_learning_rate")][0])
        assert lr == pytest.approx(expected_lr(LR_REF, prompts), rel=1e-12)
        assert flags[f("--actor.lr_scheduler", "--lr_scheduler")] == ["constant"]
        assert flags[f("--algo.advantage.estimator", "--advantage_estimator")] == ["group_norm"]
        assert flags[f("--train.seed", "--seed")] == [str(seed)]
        assert flags[f("--actor.model_name_or_path", "--pretrain")] == [ENV_INPUTS["MODEL_PATH"]]
        assert flags[f("--reward.remote_url", "--remote_rm_url")] == [ENV_INPUTS["REWARD_FUNC"]]
        tb_dir = flags[f("--logger.tensorboard_dir", "--use_tensorboard")][0]
        assert tb_dir == str(out / "work" / point["name"] / "tensorboard")
        assert flags[f("--logger.wandb.run_name", "--wandb_run_name")] == [point["name"]]
        assert f("--critic.adam.lr", "--critic_learning_rate") not in flags
        check_import(imported, "tensorboard", f"{tb_dir}/{point['name']}", out, point["name"], prompts, seed)


def test_ppo_exports_carry_gae_and_the_scaled_critic_lr(tmp_path):
    verl_out, openrlhf_out = export(tmp_path, "verl", "ppo"), export(tmp_path, "openrlhf", "ppo")
    verl_point = points_of(verl_out)[0]
    o = hydra_overrides(run_script(verl_out / verl_point["script"], tmp_path)[0][:-1])
    prompts = verl_point["prompts_per_step"]
    assert o["algorithm.adv_estimator"] == "gae"
    assert float(o["critic.optim.lr"]) == pytest.approx(expected_lr(2e-4, prompts), rel=1e-12)
    assert o["critic.optim.betas"] == "[0.9,0.999]" and o["critic.optim.weight_decay"] == "0.0"
    assert o["critic.model.path"] == ENV_INPUTS["MODEL_PATH"]
    point = points_of(openrlhf_out)[0]
    flags = flag_values(run_script(openrlhf_out / point["script"], tmp_path)[0][:-1], "openrlhf.cli.train_ppo_ray")
    assert flags["--algo.advantage.estimator"] == ["gae"]
    assert float(flags["--critic.adam.lr"][0]) == pytest.approx(expected_lr(2e-4, point["prompts_per_step"]))
    assert flags["--critic.lr_scheduler"] == ["constant"] and flags["--critic.lr_warmup_ratio"] == ["0.0"]
    assert flags["--critic.adam.betas"] == ["0.9", "0.999"] and flags["--critic.max_norm"] == ["1.0"]
    assert point["critic_lr"] == pytest.approx(expected_lr(2e-4, point["prompts_per_step"]))


@pytest.mark.parametrize("fmt", ["verl", "openrlhf", "openrlhf-legacy"])
def test_scripts_are_valid_executable_bash_and_listed(tmp_path, fmt):
    out = export(tmp_path, fmt)
    points = points_of(out)
    readme = (out / "README.md").read_text()
    assert len(points) == len(PROMPTS) * len(SEEDS)
    for point in points:
        script = out / point["script"]
        text = script.read_text()
        assert text.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in text
        assert os.access(script, os.X_OK)
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
        assert f"`{point['script']}`" in readme
        assert text.rstrip().endswith(point["import"])  # the import line is the script's last line


def test_script_refuses_to_start_without_its_inputs(tmp_path):
    out = export(tmp_path, "verl")
    script = out / points_of(out)[0]["script"]
    env = {k: v for k, v in os.environ.items() if k not in ENV_INPUTS}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "set MODEL_PATH" in proc.stderr


def test_unknown_format_exits_2_listing_the_valid_ones(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", "nemo", str(write_sweep(tmp_path)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "verl, openrlhf, openrlhf-legacy" in err and not out.exists()


def test_existing_directory_is_refused_unless_overwrite(tmp_path, capsys):
    sweep = str(write_sweep(tmp_path))
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    assert main(["export", "verl", sweep, "--out", str(taken)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["export", "verl", sweep, "--out", str(taken), "--overwrite"]) == 2  # not an earlier export
    assert sorted(p.name for p in taken.iterdir()) == ["notes.txt"]
    out = export(tmp_path, "verl")
    assert main(["export", "verl", sweep, "--out", str(out)]) == 2
    assert main(["export", "openrlhf", sweep, "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "sweep.json").read_text())["format"] == "openrlhf"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp directories left behind


def test_remax_is_refused_for_openrlhf_before_writing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", "openrlhf", str(write_sweep(tmp_path, "remax")), "--out", str(out)]) == 2
    assert "no estimator for 'remax'" in capsys.readouterr().err and not out.exists()
    verl_out = export(tmp_path, "verl", "remax")
    assert "algorithm.adv_estimator=remax" in (verl_out / points_of(verl_out)[0]["script"]).read_text()


def test_verl_script_round_trip_through_the_real_import(tmp_path):
    out = export(tmp_path, "verl")
    point = points_of(out)[0]
    run_script(out / point["script"], tmp_path, real_batchscale=True)
    run = json.loads((out / "runs" / point["name"] / "run.json").read_text())
    assert (run["label"], run["seed"], run["prompts_per_step"], run["samples_per_prompt"], run["lr_rule"]) == (
        point["label"], point["seed"], point["prompts_per_step"], G, "sqrt")
    records = [json.loads(line) for line in (out / "runs" / point["name"] / "metrics.jsonl").read_text().splitlines()]
    assert max(r["samples"] for r in records) == 3 * point["prompts_per_step"] * G


ENGINE_OPTIONS = ROOT / "tests" / "engine_options"


def engine_options(name: str) -> set[str]:
    """The options an engine release accepts, as extracted from its own code (see each file's header)."""
    lines = (ENGINE_OPTIONS / name).read_text().splitlines()
    return {line for line in lines if line and not line.startswith("#")}


def export_with(tmp_path: Path, fmt: str, algorithm: str, *sets: str) -> Path:
    out = tmp_path / f"export-{fmt}-{algorithm}-{len(sets)}"
    argv = ["export", fmt, str(write_sweep(tmp_path, algorithm)), "--out", str(out)]
    for setting in sets:
        argv += ["--set", setting]
    assert main(argv) == 0
    return out


EVERY_OPTION = ("algorithm.kl_coef=0.01", "model.chat_template=true")  # switch on the conditional options too


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_every_verl_override_exists_in_verls_config(tmp_path, algorithm):
    known = engine_options("verl-b178a3c-ppo_trainer-keys.txt")
    out = export_with(tmp_path, "verl", algorithm, *EVERY_OPTION)
    point = points_of(out)[0]
    overrides = hydra_overrides(run_script(out / point["script"], tmp_path)[0][:-1])
    unknown = [key for key in overrides if key not in known and not key.startswith("hydra.")]
    assert unknown == []
    assert overrides["actor_rollout_ref.actor.ppo_mini_batch_size"] == overrides["data.train_batch_size"]
    assert overrides["actor_rollout_ref.actor.ppo_epochs"] == "1"  # one update per P x G rollout batch


@pytest.mark.parametrize(("fmt", "version", "options_file", "lengths"), [
    ("openrlhf", "0.11.0", "openrlhf-v0.11.0-train_ppo_ray-flags.txt", {"--rollout.max_new_tokens", "--data.max_len"}),
    ("openrlhf-legacy", "0.10.1", "openrlhf-v0.10.1-train_ppo_ray-flags.txt", {"--max_new_tokens", "--max_len"}),
    ("openrlhf-legacy", "0.9.7", "openrlhf-v0.9.7-train_ppo_ray-flags.txt", {"--generate_max_len", "--prompt_max_len"}),
])
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_every_openrlhf_flag_exists_in_that_releases_parser(tmp_path, fmt, version, options_file, lengths, algorithm):
    known = engine_options(options_file)
    out = export_with(tmp_path, fmt, algorithm, *EVERY_OPTION)
    point = points_of(out)[0]
    engine, _, _ = run_script(out / point["script"], tmp_path, {"OPENRLHF_VERSION": version})
    flags = flag_values(engine[:-1], "openrlhf.cli.train_ppo_ray")
    assert [flag for flag in flags if flag not in known] == []
    assert lengths <= set(flags)
    assert flags[next(f for f in ("--data.apply_chat_template", "--apply_chat_template") if f in flags)] == []
    batch = {f: int(v[0]) for f, v in flags.items() if f in ("--rollout.batch_size", "--rollout_batch_size",
                                                             "--rollout.n_samples_per_prompt", "--n_samples_per_prompt",
                                                             "--train.batch_size", "--train_batch_size")}
    rollout, n, train = sorted(batch.values(), key=list(batch.values()).index)  # one update per P x G rollout batch
    assert train == rollout * n


@pytest.mark.parametrize("version", ["0.8.0", "0.10.2"])
def test_legacy_script_stops_on_releases_its_flags_do_not_fit(tmp_path, version):
    out = export(tmp_path, "openrlhf-legacy")
    _, _, err = run_script(out / points_of(out)[0]["script"], tmp_path, {"OPENRLHF_VERSION": version}, returncode=2)
    assert f"OpenRLHF {version} does not take these flat flags" in err and "FORMAT openrlhf" in err


def test_openrlhf_script_checks_the_prompt_set_is_large_enough(tmp_path):
    out = export(tmp_path, "openrlhf")
    point = points_of(out)[0]
    needed = point["num_steps"] * point["prompts_per_step"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"input": "1+1", "label": "2"}\n' * (needed - 1))
    _, _, err = run_script(out / point["script"], tmp_path, {"TRAIN_FILES": str(prompts)}, returncode=1)
    assert f"holds {needed - 1} prompts, fewer than the {needed} (steps x P)" in err
    prompts.write_text('{"input": "1+1", "label": "2"}\n' * needed)
    engine, _, _ = run_script(out / point["script"], tmp_path, {"TRAIN_FILES": str(prompts)})
    assert engine[:2] == ["-m", "openrlhf.cli.train_ppo_ray"]


def test_a_label_holding_equals_is_quoted_for_hydra(tmp_path):
    out = export_with(tmp_path, "verl", "grpo", "optim.lr_rule=0.25")
    point = points_of(out)[0]
    assert "=" in point["name"]  # the label of a numeric LR rule: grpo-P4-G8-a=0.25
    o = hydra_overrides(run_script(out / point["script"], tmp_path)[0][:-1])
    assert o["trainer.experiment_name"] == f"'{point['name']}'"
    assert o["hydra.run.dir"] == f"'{out / 'work' / point['name']}'"
