"""Habits users bring from Hydra, verl, TRL and OpenRLHF (issue 45): list values written Hydra's way in overrides, and
an unknown key steered to ours by meaning as well as spelling (config/messages.py's SYNONYMS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchscale.cli import main
from batchscale.config import load_config, parse_override
from batchscale.config.messages import SYNONYMS
from batchscale.config.schema import Config
from batchscale.errors import UserError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("item, value", [
    ("run.trackers=[wandb,mlflow]", ["wandb", "mlflow"]),  # Hydra: unquoted items
    ("run.trackers=[wandb, mlflow]", ["wandb", "mlflow"]),
    ('run.trackers=["wandb", "mlflow"]', ["wandb", "mlflow"]),  # TOML, as before
    ('run.trackers=[wandb,"mlflow",]', ["wandb", "mlflow"]),  # mixed, a trailing comma
    ("run.trackers=[]", []),
    ("optim.betas=[0.9,0.95]", [0.9, 0.95]),  # items that are TOML values stay numbers
    ("task.params={min_terms=2}", {"min_terms": 2}),
    ("run.threads=null", None),  # Hydra's null
    ("optim.lr_rule=sqrt", "sqrt"),  # a bare word stays a string
    ("run.label=a,b", "a,b"),  # commas outside brackets are part of the string
])
def test_override_values_as_toml_and_hydra_write_them(item, value):
    assert parse_override(item)[1] == value


def test_hydra_lists_configure_a_run_and_a_bad_item_is_named():
    cfg = load_config(EXAMPLES / "grpo-tiny.toml", ["run.trackers=[tensorboard]", "optim.betas=[0.9,0.95]",
                                                    "optim.max_grad_norm=null"])
    assert cfg.run.trackers == ["tensorboard"] and cfg.optim.betas == (0.9, 0.95) and cfg.optim.max_grad_norm is None
    with pytest.raises(UserError, match=r"run\.trackers: got 'comet'"):
        load_config(None, ["run.trackers=[tensorboard,comet]"])


def test_a_bare_hydra_list_reaches_the_run_as_set_does(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("batchscale.train.run_progress.train_with_progress",
                        lambda cfg, out, overwrite=False, **kw: (seen.append(cfg), ({}, out))[1])
    assert main(["train", str(EXAMPLES / "grpo-tiny.toml"), "run.trackers=[tensorboard]", "--out",
                 str(tmp_path / "r")]) == 0
    assert seen[0].run.trackers == ["tensorboard"]


MEANINGS = [
    ("optim.learning_rate=1e-5", "did you mean 'optim.lr'"),  # not lr_rule, the closest spelling
    ("batch.batch_size=64", "did you mean 'batch.prompts_per_step'"),
    ("train_batch_size=64", "did you mean 'batch.prompts_per_step'"),
    ("data.train_batch_size=64", "did you mean 'batch.prompts_per_step'"),  # verl's, inside an unknown section
    ("num_generations=8", "did you mean 'batch.samples_per_prompt'"),  # TRL
    ("rollout.n=8", "did you mean 'batch.samples_per_prompt'"),  # verl
    ("actor_rollout_ref.rollout.n=8", "did you mean 'batch.samples_per_prompt'"),
    ("actor_rollout_ref.actor.optim.lr=1e-6", "did you mean 'optim.lr'"),
    ("n_samples_per_prompt=8", "did you mean 'batch.samples_per_prompt'"),  # OpenRLHF
    ("algorithm.beta=0.04", "did you mean 'algorithm.kl_coef'"),
    ("trainer.logger=[console,wandb]", "did you mean 'run.trackers'"),
    ("algorithm.ppo_mini_batch_size=64", "a count of mini-batches per step, not their size"),
]


@pytest.mark.parametrize("item, hint", MEANINGS)
def test_an_unknown_key_is_steered_by_meaning(item, hint, capsys):
    with pytest.raises(UserError, match="unknown key") as info:
        load_config(None, [item])
    assert hint in str(info.value)
    assert main(["train", item]) == 2  # one line on the command line too, before any compute
    err = capsys.readouterr().err
    assert err.startswith("error: ") and hint in err and len(err.strip().splitlines()) == 1


def test_every_synonym_points_at_a_real_key():
    for name, (target, _) in SYNONYMS.items():
        section, _, key = target.partition(".")
        assert key in Config.model_fields[section].annotation.model_fields, (name, target)
        assert name.split(".")[-1] not in Config.model_fields[section].annotation.model_fields or "." in name, name
