"""verl's Hydra config with `${...}` interpolations (ingest/interpolation.py): node references resolved with
OmegaConf, and nothing a file contains ever run or read from the environment."""

from __future__ import annotations

import pytest
from test_ingest_common import check_run_dir
from test_ingest_verl import write_verl_log

from batchscale.ingest.frameworkconfig import read_config_file, read_run_fields
from batchscale.ingest.importer import import_log

omegaconf = pytest.importorskip("omegaconf")

# The shape of verl's ppo_trainer.yaml as Hydra saves it (.hydra/config.yaml keeps interpolations unresolved): the
# critic's mini-batch and epochs tied to the actor's, and a user's command line tying the batch and the lr to keys
# of their own (`data.train_batch_size=${trainer.prompts}`, a relative `${..lr_base}`).
VERL_CONFIG = """
trainer:
  prompts: 16
  project_name: gsm8k
  experiment_name: qwen_${trainer.prompts}
data:
  train_batch_size: ${trainer.prompts}
  max_prompt_length: 512
  train_files: ~/data/gsm8k/train.parquet
  seed: ${oc.env:BATCHSCALE_TEST_SEED}
actor_rollout_ref:
  model:
    path: Qwen/Qwen2.5-0.5B
  actor:
    lr_base: 3.0e-6
    optim:
      lr: ${..lr_base}
    ppo_mini_batch_size: ${.ppo_mini_batch_size_per_step}
    ppo_mini_batch_size_per_step: ${data.train_batch_size}
    ppo_epochs: 1
  rollout:
    n: ${.group}
    group: 4
    prompt_length: ${data.max_prompt_length}
critic:
  ppo_mini_batch_size: ${actor_rollout_ref.actor.ppo_mini_batch_size}
  ppo_epochs: ${actor_rollout_ref.actor.ppo_epochs}
algorithm:
  adv_estimator: grpo
"""


def test_a_verl_config_with_interpolations_imports_its_batch_and_lr(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHSCALE_TEST_SEED", "7")
    run_out = tmp_path / "outputs"
    (run_out / ".hydra").mkdir(parents=True)
    (run_out / ".hydra" / "config.yaml").write_text(VERL_CONFIG)
    config = read_config_file(run_out / ".hydra" / "config.yaml")
    assert config["data.train_batch_size"] == 16 and config["actor_rollout_ref.rollout.n"] == 4
    assert config["actor_rollout_ref.actor.optim.lr"] == 3e-6  # relative, two levels up
    assert config["critic.ppo_mini_batch_size"] == 16  # a chain of three references
    assert config["critic.ppo_epochs"] == 1 and config["actor_rollout_ref.rollout.prompt_length"] == 512
    assert config["trainer.experiment_name"] == "qwen_${trainer.prompts}"  # string interpolation: left
    assert config["data.seed"] == "${oc.env:BATCHSCALE_TEST_SEED}"  # the environment is never read
    notes: list[str] = []
    fields = read_run_fields(config, "verl", notes)
    assert fields["prompts_per_step"] == 16 and fields["samples_per_prompt"] == 4 and fields["lr"] == 3e-6
    assert fields["mini_batch_prompts"] == 16 and "seed" not in fields
    assert notes == ["config data.seed = '${oc.env:BATCHSCALE_TEST_SEED}' is an unresolved interpolation; ignored"]

    import_log("verl", write_verl_log(run_out / "log.jsonl"), tmp_path / "run")
    _, run = check_run_dir(tmp_path / "run", 16, 4)
    assert run["lr"] == 3e-6 and run["import"]["batch_from"] == {"prompts_per_step": "config",
                                                                   "samples_per_prompt": "config"}


def test_no_resolver_in_a_file_ever_runs(tmp_path):
    """A resolver this process has registered (a user's, OmegaConf's own oc.env / oc.decode / oc.create) is never
    called on a file's contents, directly or through a reference to it."""
    calls = []
    omegaconf.OmegaConf.register_resolver("bs_test_boom", lambda *args: calls.append(args) or 99, replace=True)
    path = tmp_path / "config.yaml"
    path.write_text("data:\n  train_batch_size: ${bs_test_boom:rm -rf ~}\n"
                    "actor_rollout_ref:\n  rollout:\n    n: ${data.train_batch_size}\n"
                    "  actor:\n    optim:\n      lr: ${oc.decode:'1e-3'}\n"
                    "  model:\n    path: ${oc.env:HOME}\n")
    try:
        config = read_config_file(path)
    finally:
        omegaconf.OmegaConf.clear_resolver("bs_test_boom")
    assert calls == []
    assert config["data.train_batch_size"] == "${bs_test_boom:rm -rf ~}"
    assert config["actor_rollout_ref.rollout.n"] == "${data.train_batch_size}"  # points at a resolver: left
    assert config["actor_rollout_ref.model.path"] == "${oc.env:HOME}"
    assert config["actor_rollout_ref.actor.optim.lr"] == "${oc.decode:'1e-3'}"


def test_expansion_bombs_cycles_and_missing_keys_stay_unresolved(tmp_path):
    """A chain of string interpolations doubling at each level, references to whole mappings, a cycle and a missing
    key: each left as written, at once."""
    bomb = "a0: xxxxxxxxxxxxxxxx\n" + "".join(f"a{i}: ${{a{i - 1}}}${{a{i - 1}}}\n" for i in range(1, 60))
    tree = "t0: {x: 1, y: 2}\n" + "".join(f't{i}: {{x: "${{t{i - 1}}}", y: "${{t{i - 1}}}"}}\n' for i in range(1, 40))
    path = tmp_path / "config.yaml"
    path.write_text(bomb + tree + "c1: ${c2}\nc2: ${c1}\nm: ${no.such.key}\nlist: [5, 6]\nfirst: ${list[1]}\n")
    config = read_config_file(path)
    assert config["a59"] == "${a58}${a58}" and config["t39.x"] == "${t38}"
    assert config["c1"] == "${c2}" and config["m"] == "${no.such.key}"
    assert config["first"] == 6


def test_without_omegaconf_interpolations_stay_as_written(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "omegaconf", None)  # import omegaconf raises ImportError
    path = tmp_path / "config.yaml"
    path.write_text("data:\n  train_batch_size: 8\nactor_rollout_ref:\n  rollout:\n    n: ${data.train_batch_size}\n")
    assert read_config_file(path)["actor_rollout_ref.rollout.n"] == "${data.train_batch_size}"


def test_a_config_too_large_to_resolve_quickly_stays_as_written(tmp_path, monkeypatch):
    """OmegaConf costs tens of microseconds per value: past MAX_RESOLVED_VALUES nothing is resolved."""
    from batchscale.ingest import interpolation

    path = tmp_path / "config.yaml"
    path.write_text("data:\n  train_batch_size: 8\nactor_rollout_ref:\n  rollout:\n    n: ${data.train_batch_size}\n")
    assert read_config_file(path)["actor_rollout_ref.rollout.n"] == 8
    monkeypatch.setattr(interpolation, "MAX_RESOLVED_VALUES", 5)  # 6 values: the root, 3 mappings, 2 leaves
    assert read_config_file(path)["actor_rollout_ref.rollout.n"] == "${data.train_batch_size}"
