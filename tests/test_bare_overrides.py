"""Overrides as other frameworks write them: `batchscale train cfg.toml batch.prompts_per_step=64` and `sweep ...` take
bare KEY=VALUE arguments with the validation and messages of --set, and an unknown key names the key it most likely
meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchscale.cli import main
from batchscale.config import load_config
from batchscale.errors import UserError
from tests.test_config import BAD

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
UNKNOWN_KEYS = [
    ("task.temperature=1", "did you mean 'sampling.temperature'?"),  # the same name in another section
    ("bach.prompts_per_step=3", "did you mean 'batch'?"),
    ("optim.lr_rul=none", "did you mean 'lr_rule'?"),  # the closest name in its section
    ("run.prompts_per_stepp=3", "did you mean 'batch.prompts_per_step'?"),  # the closest dotted key anywhere
]


@pytest.mark.parametrize("item", [b[0][0] for b in BAD] + [u[0] for u in UNKNOWN_KEYS])
def test_bare_and_set_give_the_same_error_exit_2_and_write_nothing(tmp_path, capsys, item):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--set", item]) == 2
    with_set = capsys.readouterr().err
    assert main(["train", "--out", str(out), item]) == 2  # no config file: the override alone
    assert capsys.readouterr().err == with_set
    assert main(["train", str(EXAMPLES / "grpo-tiny.toml"), "--out", str(out), item]) == 2
    bare = capsys.readouterr().err
    assert bare.startswith("error: ") and len(bare.strip().splitlines()) == 1 and "Traceback" not in bare
    assert not out.exists()


@pytest.mark.parametrize("item, hint", UNKNOWN_KEYS)
def test_an_unknown_key_names_the_key_it_most_likely_meant(item, hint):
    with pytest.raises(UserError, match="unknown key") as info:
        load_config(None, [item])
    assert hint in str(info.value)


def test_no_close_key_lists_the_valid_ones():
    with pytest.raises(UserError) as info:
        load_config(None, ["batch.zzz=1"])
    assert "did you mean" not in str(info.value) and "valid keys here: prompts_per_step" in str(info.value)


def test_a_bare_argument_that_is_not_key_value_is_refused(capsys):
    assert main(["train", str(EXAMPLES / "grpo-tiny.toml"), "prompts_per_step"]) == 2
    assert capsys.readouterr().err.strip() == ("error: KEY=VALUE: 'prompts_per_step' is not of the form dotted.key=value. "
                                               "Fix: write e.g. batch.prompts_per_step=64")


@pytest.fixture
def captured(monkeypatch):
    """What `train` and `sweep` would run, without training."""
    seen = []

    def fake_train(cfg, run_dir, *args, **kwargs):
        seen.append(cfg)
        return {}, run_dir

    def fake_sweep(points, *args, **kwargs):
        seen.append([p.config for p in points])
        return {"runs": 0, "sweep_dir": "x", "skipped": 0}

    monkeypatch.setattr("batchscale.train.run_progress.train_with_progress", fake_train)
    monkeypatch.setattr("batchscale.sweep.driver.run_sweep", fake_sweep)
    return seen


def test_bare_overrides_resolve_as_set_does(captured, tmp_path):
    config = str(EXAMPLES / "grpo-tiny.toml")
    items = ["batch.prompts_per_step=64", "optim.lr=1e-5", "optim.lr_rule=none"]
    assert main(["train", config, *items, "--out", str(tmp_path)]) == 0
    assert main(["train", config, *[a for item in items for a in ("--set", item)], "--out", str(tmp_path)]) == 0
    bare, with_set = captured
    assert bare == with_set
    assert (bare.batch.prompts_per_step, bare.optim.lr, bare.optim.lr_rule) == (64, 1e-5, "none")
    assert main(["train", "batch.prompts_per_step=4", "--out", str(tmp_path)]) == 0  # no config file
    assert captured[-1] == load_config(None, ["batch.prompts_per_step=4"])


def test_bare_overrides_apply_after_set(captured, tmp_path):
    assert main(["train", "--set", "optim.lr=1e-3", "optim.lr=1e-5", "--out", str(tmp_path)]) == 0
    assert captured[0].optim.lr == 1e-5


def test_sweep_takes_bare_overrides_for_every_point(captured, capsys):
    sweep_file = str(EXAMPLES / "sweep-tiny.toml")
    assert main(["sweep", sweep_file, "run.threads=1", "sampling.temperature=0.7"]) == 0
    assert main(["sweep", sweep_file, "--set", "run.threads=1", "--set", "sampling.temperature=0.7"]) == 0
    bare, with_set = captured
    assert bare == with_set and len(bare) > 1
    assert all(c.run.threads == 1 and c.sampling.temperature == 0.7 for c in bare)
    capsys.readouterr()
    assert main(["sweep", sweep_file, "optim.lr_rul=none"]) == 2
    assert "did you mean 'lr_rule'?" in capsys.readouterr().err
