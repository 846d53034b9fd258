"""Console output of several Ray processes interleaved: a config dict broken by other processes' lines, read from two
real verl v0.1 consoles (tests/fixtures/real_logs/README.md says where each comes from and which lines were kept).

In the Qwen2.5-0.5B log, line 111 of the kept text ends `'experiment_name': 'gemma2b_function_rm',(pid=934604) `
and the dict resumes 60 lines later; before this was read, the import asked for G although the log proves it. In the
gemma-2-2b log the same break comes with ANSI colour and a two-word worker name, and the uploader's edit lost a line
of the dict (a `commit:` line sits inside it): that dict cannot be read, and the import says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ingest_common import check_run_dir

from batchscale.ingest.console import ANSI, clean_lines, read_literal, split_processes
from batchscale.ingest.importer import import_log

REAL = Path(__file__).parent / "fixtures" / "real_logs"
QWEN = REAL / "verl_v0.1_qwen2.5-0.5b_gsm8k_interleaved.log"
GEMMA = REAL / "verl_v0.1_gemma-2-2b_gsm8k_ansi_interleaved.log"


def test_the_qwen_v0_1_console_gives_p_g_and_updates_from_its_broken_config(tmp_path):
    text = ANSI.sub("", QWEN.read_text())
    assert "'experiment_name': 'gemma2b_function_rm',(pid=934604) \n" in text  # the real break, kept as it was
    import_log("verl", QWEN, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", 256, 1)
    block = run["import"]
    assert block["batch_from"] == {"prompts_per_step": "config", "samples_per_prompt": "config"}
    assert "config printed at start-up, line 13" in block["config_path"]
    # ppo_mini_batch_size 64 of 256 prompts: 4 updates; the lr and the rest come from the same dict
    assert run["updates_per_step"] == 4 and run["samples_per_update"] == 64
    assert run["lr"] == 1e-6 and run["algorithm"] == "ppo" and run["model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert any("rollout section has no n" in note for note in block["notes"])
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in steps] == list(range(1, 12))  # logged 0..10, zero-based
    assert steps[0]["time/generate"] == 20.251 and steps[0]["reward/mean"] == 0.004
    # "Initial validation metrics" (a full-precision repr); the validation in the line of step:9 printed
    # `val/test_score/openai/gsm8k:0.000`, unknown rather than zero (3 decimals), so it is dropped and counted
    assert [(r["step"], r["eval/accuracy"]) for r in evals] == [(0, 0.0)]
    assert any("printed as 0.000 treated as unknown" in p for p in block["problems"])


def test_the_gemma_console_with_a_damaged_dict_says_so_and_uses_the_other_evidence(tmp_path):
    text = GEMMA.read_text()
    assert "\x1b[36m(VGNd5CWorkerDict_0:0 WorkerDict pid=65860)" in text and "\ncommit:\n" in text
    import_log("verl", GEMMA, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", 512, 1)
    block = run["import"]
    assert any("config printed at line 9 does not close or parse" in p for p in block["problems"])
    assert block["batch_from"] == {"prompts_per_step": "command", "samples_per_prompt": "log"}
    assert any("lr(1e-4) names date it before 2856be4" in note for note in block["notes"])
    assert [r["step"] for r in records if r["kind"] == "step"] == list(range(1, 12))


def test_a_line_is_split_at_every_ray_prefix_and_keeps_its_process():
    line = ("\x1b[2m\x1b[36m(main_task pid=64899)\x1b[0m              'experiment_name': 'x',\x1b[2m\x1b[36m"
            "(VGNd5CWorkerDict_0:0 WorkerDict pid=65860)\x1b[0m Flash Attention 2.0 only supports")
    assert [(p, t) for p, t in split_processes(line.replace("\x1b[2m\x1b[36m", "").replace("\x1b[0m", ""))] == [
        ("", ""), ("64899", "             'experiment_name': 'x',"), ("65860", "Flash Attention 2.0 only supports")]
    lines = clean_lines(line + "\n(pid=934604) \n(TaskRunner pid=7, ip=10.0.0.1) step:1 - a:1")
    assert [(n, p, t) for n, t, p in lines] == [
        (1, "64899", "             'experiment_name': 'x',"), (1, "65860", "Flash Attention 2.0 only supports"),
        (3, "7", "step:1 - a:1")]


def test_a_literal_follows_its_own_process_across_other_lines():
    text = "\n".join([
        "(main_task pid=1) {'data': {'train_batch_size': 8,",
        "(main_task pid=1)           'seed': 1},(pid=2) ",
        "(pid=2) libgomp: Invalid value",
        "Loading checkpoint shards: 100%|##########| 3/3",
        "(WorkerDict pid=2)  'trainer': {'n_gpus_per_node': 8}}",  # another process's text: not part of it
        "(main_task pid=1)  'trainer': {'nnodes': 1}}",
        "(main_task pid=1) original dataset len: 7473",
    ])
    lines = clean_lines(text)
    value, after = read_literal(lines, 0)
    assert value == {"data": {"train_batch_size": 8, "seed": 1}, "trainer": {"nnodes": 1}}
    assert lines[after].text == "original dataset len: 7473"
    # without prefixes nothing tells one process's lines from another's: the literal must continue on the next line
    bare = clean_lines("{'data': {'train_batch_size': 8,\nlibgomp: Invalid value\n          'seed': 1}}")
    assert read_literal(bare, 0) is None


@pytest.mark.parametrize("foreign", [10, 2001])
def test_other_processes_lines_inside_a_literal_are_bounded(foreign):
    lines = clean_lines("\n".join(["(main_task pid=1) {'data': {'train_batch_size': 8,"]
                                  + ["(pid=2) noise"] * foreign + ["(main_task pid=1)           'seed': 1}}"]))
    assert (read_literal(lines, 0) is None) == (foreign > 2000)


def test_a_dict_line_cut_by_the_process_output_continues_on_its_next_line():
    """gsm8k/qwen2-7b-fsdp2.log (eric-haibin-lin/verl-data at 2ef0b0a, verl 0.3, 2025-05-01), lines of its config
    as printed: the `wrap_policy` line is cut after `'min_num_params': ` and its `0}},` follows unindented."""
    text = "\n".join([
        "(TaskRunner pid=2664304) {'actor_rollout_ref': {'actor': {'fsdp_config': {'fsdp_size': -1,",
        "(TaskRunner pid=2664304)                                                  'wrap_policy': {'min_num_params': ",
        "(TaskRunner pid=2664304) 0}},",
        "(TaskRunner pid=2664304)                                  'grad_clip': 1.0}},",
        "(TaskRunner pid=2664304)  'data': {'train_batch_size': 1024}}",
    ])
    value, _ = read_literal(clean_lines(text), 0)
    assert value["actor_rollout_ref"]["actor"]["fsdp_config"]["wrap_policy"] == {"min_num_params": 0}
    assert value["data"]["train_batch_size"] == 1024
