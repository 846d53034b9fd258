"""Importing hostile or odd input (issue 30): what is not a regular file, caps on bytes and lines, YAML alias bombs,
a console scan that stays linear, torn last lines, W&B CSV header quirks, U+2028 in JSONL, pipes, and names that
collide. Each refusal is one `error:` line, exit 2, nothing written."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from test_ingest_common import check_run_dir
from test_ingest_verl_console import G, P, step_metrics, write_console_log

from batchscale.cli import main
from batchscale.errors import UserError
from batchscale.ingest import console, inputs
from batchscale.ingest.importer import import_log

BATCH = ["--prompts-per-step", str(P), "--samples-per-prompt", str(G)]


def refused(capsys, args: list[str], *expected: str) -> str:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in err, err
    return err


def write_jsonl(path: Path, steps=(1, 2, 3)) -> Path:
    path.write_text("".join(json.dumps({"step": s, "data": {k: float(v) for k, v in step_metrics(s).items()}}) + "\n"
                            for s in steps))
    return path


@pytest.mark.parametrize("fmt", ["trl", "verl", "wandb-csv", "openrlhf", "tensorboard"])
def test_a_character_device_is_refused_before_a_byte_is_read(tmp_path, capsys, fmt):
    refused(capsys, ["import", fmt, "/dev/zero", "--out", str(tmp_path / "run"), *BATCH],
            "/dev/zero: is a character device, not a regular file or a pipe")
    assert not (tmp_path / "run").exists()


def test_byte_and_line_caps_name_the_cap(tmp_path, capsys, monkeypatch):
    log = write_console_log(tmp_path / "verl.log")
    monkeypatch.setattr(inputs, "MAX_INPUT_BYTES", 1000)
    refused(capsys, ["import", "verl", str(log), "--out", str(tmp_path / "run")], "is larger than 1000 bytes")
    monkeypatch.setattr(inputs, "MAX_INPUT_BYTES", 2**30)
    monkeypatch.setattr(inputs, "MAX_INPUT_LINES", 5)
    refused(capsys, ["import", "verl", str(log), "--out", str(tmp_path / "run")], "lines, more than the 5 this reads")
    assert not (tmp_path / "run").exists()


def test_a_pipe_is_read_as_a_stream(tmp_path):
    """What `batchscale import verl <(cat log)` hands over: a FIFO, readable once."""
    source = write_jsonl(tmp_path / "verl.jsonl").read_bytes()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(source))
    writer.start()
    import_log("verl", fifo, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    writer.join(timeout=10)
    records, _ = check_run_dir(tmp_path / "run", P, G)
    assert [r["step"] for r in records if r["kind"] == "step"] == [1, 2, 3]
    with pytest.raises(UserError, match="is a pipe: tensorboard event files are read from disk"):
        import_log("tensorboard", fifo, tmp_path / "run2")


def test_a_yaml_alias_bomb_is_refused_not_expanded(tmp_path, capsys):
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 13):
        bomb.append(f"{chr(97 + level)}: &{chr(97 + level)} " + "{" + ", ".join(
            f"k{i}: *{chr(96 + level)}" for i in range(9)) + "}")
    (tmp_path / "config.yaml").write_text("\n".join(bomb) + "\n")
    assert (tmp_path / "config.yaml").stat().st_size < 1200
    log = write_jsonl(tmp_path / "verl.jsonl")
    refused(capsys, ["import", "verl", str(log), "--out", str(tmp_path / "run"), "--config",
                     str(tmp_path / "config.yaml")], "uses more than 100 YAML aliases")
    assert main(["import", "verl", str(log), "--out", str(tmp_path / "run"), *BATCH]) == 0  # found beside: ignored
    assert any("ignored" in n and "YAML aliases" in n for n in
               json.loads((tmp_path / "run" / "run.json").read_text())["import"]["notes"])


def test_a_wide_yaml_without_aliases_is_capped_in_keys(tmp_path, capsys, monkeypatch):
    from batchscale.ingest import frameworkconfig

    monkeypatch.setattr(frameworkconfig, "MAX_CONFIG_KEYS", 50)
    (tmp_path / "wide.yaml").write_text("".join(f"k{i}: {i}\n" for i in range(60)))
    refused(capsys, ["import", "verl", str(write_jsonl(tmp_path / "v.jsonl")), "--out", str(tmp_path / "run"),
                     "--config", str(tmp_path / "wide.yaml")], "expands to more than 50 config keys")


def test_printed_dicts_are_each_parsed_once(tmp_path, monkeypatch):
    """2,000 printed dicts that look like a config but do not parse (26 KB): each is tried once, not against every
    line after it (the quadratic scan); benchmarks/import_console.py times it on logs up to 10 MB."""
    calls = []
    real = console.ast.literal_eval
    monkeypatch.setattr(console.ast, "literal_eval", lambda text: calls.append(len(text)) or real(text))
    log = write_console_log(tmp_path / "verl.log", config=None)
    noise = "".join("{'data': x}\n" for _ in range(2000))
    log.write_text(noise + log.read_text())
    assert 20_000 < len(noise) < 30_000
    import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    assert len(calls) <= 2000 + 10 and max(calls) < 100


def test_a_console_cut_mid_line_drops_the_torn_line(tmp_path):
    log = write_console_log(tmp_path / "verl.log", config=None)
    text = log.read_text().rstrip("\n")
    cut = text[:text.rindex("timing_s/step:") + len("timing_s/step:np.float6")]  # the last step line, torn
    cut = cut[:cut.rindex("\n")] + "\n" + text[text.rindex("\n", 0, text.rindex("step:4")) + 1:][:200]
    log.write_text(cut)
    assert not cut.endswith("\n") and cut.rsplit("\n", 1)[-1].startswith("(TaskRunner pid=51234) step:4")
    import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert [r["step"] for r in records if r["kind"] == "step"] == [1, 2, 3]
    assert any("(the last) is cut mid-line" in p for p in run["import"]["problems"])


def test_wandb_csv_duplicated_column_is_named_and_a_bom_reads(tmp_path, capsys):
    header = "_step,_runtime,critic/score/mean,timing_s/step,critic/score/mean\n"
    (tmp_path / "dup.csv").write_text(header + "1,10,0.1,9.0,0.2\n")
    refused(capsys, ["import", "wandb-csv", str(tmp_path / "dup.csv"), "--out", str(tmp_path / "run"), *BATCH],
            "column 'critic/score/mean' appears 2 times")
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf_step,_runtime,critic/score/mean,timing_s/step\n1,10,0.1,9.0\n"
                                       b"2,20,0.2,9.0\n")
    assert main(["import", "wandb-csv", str(tmp_path / "bom.csv"), "--out", str(tmp_path / "run"), *BATCH]) == 0
    records, _ = check_run_dir(tmp_path / "run", P, G)
    assert [r["step"] for r in records] == [1, 2]


def test_jsonl_with_line_separators_inside_strings_is_valid(tmp_path):
    log = write_jsonl(tmp_path / "verl.jsonl")
    lines = log.read_text().split("\n")
    lines[1] = lines[1][:-1] + ', "sample": "first\u2028second\u2029third\x85fourth"}'
    log.write_text("\n".join(lines))
    import_log("verl", log, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert [r["step"] for r in records] == [1, 2, 3] and run["import"]["problems"] == []


def test_negative_seed_names_the_flag(tmp_path, capsys):
    refused(capsys, ["import", "verl", str(write_jsonl(tmp_path / "v.jsonl")), "--out", str(tmp_path / "run"),
                     "--seed", "-1", *BATCH], "--seed: must be a non-negative integer, got -1")
    assert not (tmp_path / "run").exists()


def test_chart_runs_mapping_to_one_directory_are_refused_before_writing(tmp_path, capsys):
    chart = tmp_path / "chart.csv"
    chart.write_text('"Step","a/b - val-core/x/reward/mean@1","a:b - val-core/x/reward/mean@1"\n1,0.1,0.2\n2,0.3,0.4\n')
    refused(capsys, ["import", "wandb-csv", str(chart), "--out", str(tmp_path / "out"), *BATCH],
            "run 'a:b': and run 'a/b' both map to the directory a_b")
    assert not (tmp_path / "out").exists()


def test_a_run_json_given_as_a_training_profile_says_what_it_is(tmp_path):
    from batchscale.rundir import TrainingProfile, read_document

    import_log("verl", write_jsonl(tmp_path / "v.jsonl"), tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    with pytest.raises(UserError, match=r"--training-profile .*run.json: not a training profile \(it is a run "
                                        r"descriptor, run.json\): it lacks"):
        read_document(tmp_path / "run" / "run.json", TrainingProfile, "--training-profile")
