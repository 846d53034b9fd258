"""Launch commands in a log as evidence for P, G, lr, mini-batch and epochs: a `bash -x` trace, a fenced launch
script, a `command:` header, Hydra overrides inside a line; the same precedence and contradiction checks as a config.

The verl lines are verl's console (tests/test_ingest_verl_console.py, written from aggregate_logger.py) without the
printed config; the command is verl's documented quick-start launch (`python3 -m verl.trainer.main_ppo` with Hydra
overrides, docs/start/quickstart.rst), as `bash -x` prints it (`+ ` and one line) or as a script holds it."""

from __future__ import annotations

import pytest
from test_ingest_common import check_run_dir
from test_ingest_verl_console import G, P, write_console_log

from batchscale.errors import UserError
from batchscale.ingest.importer import import_log

LR = 2e-6
OVERRIDES = [f"data.train_batch_size={P}", f"actor_rollout_ref.rollout.n={G}", f"actor_rollout_ref.actor.optim.lr={LR}",
             f"actor_rollout_ref.actor.ppo_mini_batch_size={P // 4}", "actor_rollout_ref.actor.ppo_epochs=2",
             "trainer.n_gpus_per_node=8", "trainer.logger=['console']"]


def with_header(tmp_path, header: str, name: str = "verl.log"):
    log = write_console_log(tmp_path / name, config=None)
    log.write_text(header + log.read_text())
    return log


SHAPES = {
    "bash -x trace": "+ python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo " + " ".join(OVERRIDES) + "\n",
    "fenced script": "```bash\nset -x\npython3 -m verl.trainer.main_ppo \\\n"
                     + "".join(f"    {o} \\\n" for o in OVERRIDES) + "    trainer.total_epochs=15 $@\n```\n",
    "command header": "command: python3 -m verl.trainer.main_ppo " + " ".join(f"'{o}'" for o in OVERRIDES) + "\n",
    "inside a line": "2025-03-01 10:00:00 launching job with overrides ["
                     + ", ".join(f"'{o}'" for o in OVERRIDES) + "]\n",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_launch_command_gives_p_g_lr_and_updates(tmp_path, shape):
    log = with_header(tmp_path, SHAPES[shape])
    import_log("verl", log, tmp_path / "run")
    _, run = check_run_dir(tmp_path / "run", P, G)
    assert run["import"]["batch_from"] == {"prompts_per_step": "command", "samples_per_prompt": "command"}
    assert run["lr"] == LR and (run["samples_per_update"], run["updates_per_step"]) == (P // 4 * G, 2 * 4)
    assert "launch command, line" in " ".join(run["import"]["notes"])


def test_a_flag_contradicting_the_command_names_both_and_writes_nothing(tmp_path):
    log = with_header(tmp_path, SHAPES["bash -x trace"])
    with pytest.raises(UserError, match=r"^--samples-per-prompt: 8 contradicts 4 in .*verl.log \(launch command, "
                                        r"line 1\)"):
        import_log("verl", log, tmp_path / "run", samples_per_prompt=8)
    assert not (tmp_path / "run").exists()


def test_a_command_contradicting_the_logged_tokens_is_an_error(tmp_path):
    log = with_header(tmp_path, SHAPES["bash -x trace"].replace(f"rollout.n={G}", f"rollout.n={2 * G}"))
    with pytest.raises(UserError, match=rf"launch command, line 1\): P x G = {2 * P * G} but the log holds "
                                        rf"{float(P * G)} sequences per step"):
        import_log("verl", log, tmp_path / "run")


def test_the_printed_config_wins_over_the_command_with_a_warning(tmp_path):
    log = write_console_log(tmp_path / "verl.log")  # prints CONFIG: lr 1e-6
    log.write_text(SHAPES["bash -x trace"] + log.read_text())
    import_log("verl", log, tmp_path / "run")
    _, run = check_run_dir(tmp_path / "run", P, G)
    assert run["lr"] == 1e-6 and run["import"]["batch_from"]["prompts_per_step"] == "config"
    assert any(f"sets lr = {LR}" in p and "the config was kept" in p for p in run["import"]["problems"])


def test_shell_variables_and_unknown_keys_are_not_evidence(tmp_path):
    header = ("+ python3 -m verl.trainer.main_ppo data.train_batch_size=$BATCH actor_rollout_ref.rollout.n=${N} "
              "custom.thing=3 step=9\n")
    log = with_header(tmp_path, header)
    with pytest.raises(UserError, match="prompts_per_step, samples_per_prompt"):
        import_log("verl", log, tmp_path / "run")
    import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    _, run = check_run_dir(tmp_path / "run", P, G)
    assert any("shell variables skipped" in n and "data.train_batch_size=$BATCH" in n for n in run["import"]["notes"])


def test_a_retried_launch_with_other_values_uses_the_last_and_warns(tmp_path):
    header = SHAPES["bash -x trace"].replace(f"train_batch_size={P}", f"train_batch_size={2 * P}") + \
        SHAPES["bash -x trace"]
    log = with_header(tmp_path, header)
    import_log("verl", log, tmp_path / "run")
    _, run = check_run_dir(tmp_path / "run", P, G)
    assert any("launch commands disagree on data.train_batch_size" in p for p in run["import"]["problems"])


def test_openrlhf_console_with_its_launch_flags(tmp_path):
    from test_ingest_openrlhf import G as OG
    from test_ingest_openrlhf import P as OP
    from test_ingest_openrlhf import write_console

    log = write_console(tmp_path / "train.log")
    command = (f"+ python3 -m openrlhf.cli.train_ppo_ray --pretrain Qwen/Qwen2.5-0.5B --rollout_batch_size {OP} "
               f"--n_samples_per_prompt={OG} --actor_learning_rate 5e-7 --advantage_estimator group_norm "
               "--normalize_reward --seed 3\n")
    log.write_text(command + log.read_text())
    import_log("openrlhf", log, tmp_path / "run")
    _, run = check_run_dir(tmp_path / "run", OP, OG)
    assert run["lr"] == 5e-7 and run["seed"] == 3 and run["model"] == "Qwen/Qwen2.5-0.5B"
    assert run["import"]["batch_from"] == {"prompts_per_step": "command", "samples_per_prompt": "command"}
