"""`batchscale config show [FILE] [KEY=VALUE ...]` (issue 45): the resolved config as TOML that loads back as the same
config, the defaults that differ marked, the derived plan as comments, --json as a run's config.json, bad input as
train refuses it, and hostile strings kept inert."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from batchscale.cli import main
from batchscale.config import derive_plan, load_config, resolved_config
from batchscale.threads import choose_threads

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def show(capsys, *args) -> str:
    assert main(["config", "show", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("args", [
    [],
    [str(EXAMPLES / "grpo-tiny.toml")],
    [str(EXAMPLES / "ppo-tiny.toml"), "optim.lr=2e-5", "run.trackers=[wandb,mlflow]", "--set", "run.seed=7"],
    [str(EXAMPLES / "remax-tiny.toml"), "task.params={min_terms=2, note=\"a\\\"b\"}", "run.label=x y"],
    ["batch.prompts_per_step=4", "optim.lr_rule=0.25"],  # overrides alone, no file
])
def test_the_toml_loads_back_as_the_same_config(capsys, tmp_path, args):
    text = show(capsys, *args)
    saved = tmp_path / "shown.toml"
    saved.write_text(text)
    config = next((Path(a) for a in args if a.endswith(".toml")), None)
    overrides = [a for a in args if "=" in a]
    assert load_config(saved) == load_config(config, overrides)


def test_defaults_that_differ_are_marked_and_the_plan_follows_as_comments(capsys):
    text = show(capsys, str(EXAMPLES / "grpo-tiny.toml"), "batch.prompts_per_step=64")
    lines = text.splitlines()
    assert "prompts_per_step = 64  # default 16" in lines
    assert 'compute_dtype = "float32"  # default "auto"' in lines  # the examples' values are not the defaults
    assert "samples_per_prompt = 8" in lines  # equal to the default: no comment
    assert "# threads: unset" in lines
    derived = lines[lines.index("# [derived] what batchscale computes from the keys above (not keys of a config file)"):]
    assert "# samples_per_step = 512" in derived and "# accumulation_steps = 16" in derived
    assert "# lr = 2e-05" in derived and '# label = "grpo-P64-G8-sqrt"' in derived
    chosen = choose_threads("tiny").threads  # this machine's CPUs: one per CPU
    assert any(line.startswith(f"# threads = {chosen}  (on this machine: ") for line in derived)
    assert "derived" not in tomllib.loads(text)


def test_json_is_the_config_json_a_run_writes(capsys):
    cfg = load_config(EXAMPLES / "ppo-tiny.toml", ["run.seed=3"])
    shown = json.loads(show(capsys, str(EXAMPLES / "ppo-tiny.toml"), "run.seed=3", "--json"))
    assert shown == json.loads(json.dumps(resolved_config(cfg, derive_plan(cfg))))
    assert shown["derived"]["critic"]["lr"] == pytest.approx(1e-3)


def test_bad_input_is_one_error_line_as_train_gives_it(capsys, tmp_path):
    assert main(["config", "show", "batch.micro_batch_size=48"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: batch.micro_batch_size: ") and len(err.strip().splitlines()) == 1
    assert main(["config", "show", str(tmp_path / "missing.toml")]) == 2
    assert "error: CONFIG: no config file at" in capsys.readouterr().err
    assert main(["config", "show", "optim.learning_rate=1e-5"]) == 2
    assert "did you mean 'optim.lr'" in capsys.readouterr().err


def test_hostile_strings_stay_inert_and_load_back(capsys, tmp_path):
    label = "run\u202egnp.exe\x1b[31m\x7f\"\\"
    text = show(capsys, "--set", f"task.eval_path={json.dumps(label)}")
    assert "\x1b" not in text and "\u202e" not in text and "\x7f" not in text
    assert '\\u202e' in text and '\\u001b' in text
    saved = tmp_path / "shown.toml"
    saved.write_text(text)
    assert load_config(saved).task.eval_path == label
