"""The run directory's one home: every writer's output reads back equal through the one reader, the reader applies one
policy (truncated last line, corrupt line, unfinished run) whoever calls it, and version 1 still reads."""

import json
import math

import pytest

from batchscale.analysis.synthetic import write_synthetic_run
from batchscale.errors import DataWarning, UserError
from batchscale.rundir import (AnalysisDocument, GenerationProfile, RunDescriptor, RunLog, check_out_dir,
                               read_document, read_run, summarize_run, write_document, write_run)
from batchscale.rundir.run import METRICS_FILE, SUMMARY_FILE, parse_run_dir_name, run_dir_name

DESCRIPTOR = RunDescriptor(label="grpo-P4-G2", seed=3, algorithm="grpo", prompts_per_step=4, samples_per_prompt=2,
                           samples_per_step=8, samples_per_update=8, lr=1e-4, lr_rule="sqrt", max_concurrency=16,
                           model="tiny", task="arithmetic")
RECORDS = [
    {"kind": "eval", "step": 0, "samples": 0, "wall_s": 0.1, "eval/accuracy": 0.25},
    {"kind": "step", "step": 1, "samples": 8, "wall_s": 1.0, "reward/mean": 0.5, "time/step": 0.8,
     "time/generate": 0.3, "time/train": 0.5, "grad_norm/actor": 1.5},
    {"kind": "step", "step": 2, "samples": 16, "wall_s": 2.0, "reward/mean": 0.6, "time/step": 0.9,
     "time/generate": 0.4, "time/train": 0.5, "grad_norm/actor": 1.2},
    {"kind": "eval", "step": 2, "samples": 16, "wall_s": 2.1, "eval/accuracy": 0.5},
]


def stream_run(run_dir, records=RECORDS, finish=True):
    log = RunLog(run_dir, DESCRIPTOR, config={"model": {"name": "tiny"}})
    for record in records:
        log.write(record)
    if finish:
        log.finish(summarize_run(DESCRIPTOR, records, finished=True, machine={"cpu": "test"}))
    else:
        log.close()
    return run_dir


def test_a_run_directory_name_reads_back_as_its_label_and_seed():
    assert run_dir_name("grpo-P8-G8-sqrt-async-k2", 3) == "grpo-P8-G8-sqrt-async-k2__s3"
    assert parse_run_dir_name(run_dir_name("grpo-P8-G8-sqrt-async-k2", 3)) == ("grpo-P8-G8-sqrt-async-k2", 3)
    assert parse_run_dir_name(run_dir_name("a_s_b", 0)) == ("a_s_b", 0)
    assert [parse_run_dir_name(name) for name in ("custom", "a__sx", "a__s", "__s1", "a__s1b")] == [None] * 5


def test_streamed_and_staged_runs_read_back_equal(tmp_path):
    streamed = read_run(stream_run(tmp_path / "streamed"))
    staged = read_run(write_run(tmp_path / "staged", DESCRIPTOR, RECORDS,
                                summarize_run(DESCRIPTOR, RECORDS, finished=None)))
    for run in (streamed, staged):
        assert run.descriptor == DESCRIPTOR
        assert run.steps == RECORDS[1:3] and run.evals == [RECORDS[0], RECORDS[3]]
    assert streamed.summary.finished is True and staged.summary.finished is None
    assert streamed.summary.machine == {"cpu": "test"}
    summary = streamed.summary
    assert (summary.steps, summary.last_step, summary.samples) == (2, 2, 16)
    assert (summary.eval_start, summary.eval_end, summary.eval_best, summary.eval_best_samples) == (0.25, 0.5, 0.5, 16)
    assert summary.samples_per_s == pytest.approx(16 / 1.7)
    assert summary.time_shares == pytest.approx({"generate": 0.7 / 1.7, "train": 1.0 / 1.7})


def test_synthetic_writer_reads_back(tmp_path):
    run = read_run(write_synthetic_run(tmp_path / "syn", "syn", 1, prompts_per_step=4, total_samples=256,
                                       eval_every_samples=64))
    assert run.descriptor.samples_per_step == 32 and run.descriptor.samples_per_update == 32
    assert run.descriptor.updates_per_step == 1 and run.descriptor.generation_batch == 32
    assert [r["samples"] for r in run.evals] == [0, 64, 128, 192, 256] and run.finished


def test_unfinished_run_has_no_summary(tmp_path):
    run = read_run(stream_run(tmp_path / "r", finish=False))
    assert run.summary is None and not run.finished and len(run.steps) == 2


def test_truncated_last_line_is_dropped_with_a_warning(tmp_path):
    run_dir = stream_run(tmp_path / "r", finish=False)
    with open(run_dir / METRICS_FILE, "a") as f:
        f.write('{"kind": "step", "step": 3, "samp')  # a crash mid-write: no newline
    with pytest.warns(DataWarning, match="truncated last line 5"):
        run = read_run(run_dir)
    assert [r["step"] for r in run.steps] == [1, 2]


@pytest.mark.parametrize("bad_line, message", [
    ("{not json", "line 2: is not valid JSON"),
    ('{"kind": "step", "step": 1, "wall_s": 1.0}', "line 2: the record lacks samples"),
    ('{"kind": "step", "step": -1, "samples": 8, "wall_s": 1.0}', "line 2: the record step -1"),
    ('[1, 2]', "line 2: the record is not a JSON object"),
])
def test_a_corrupt_line_before_the_last_is_an_error_naming_it(tmp_path, bad_line, message):
    run_dir = stream_run(tmp_path / "r", finish=False)
    lines = (run_dir / METRICS_FILE).read_text().splitlines()
    lines.insert(1, bad_line)
    (run_dir / METRICS_FILE).write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=message) as error:
        read_run(run_dir)
    assert str(run_dir / METRICS_FILE) in error.value.field


def test_a_complete_but_corrupt_last_line_is_an_error_not_a_truncation(tmp_path):
    run_dir = stream_run(tmp_path / "r", finish=False)
    with open(run_dir / METRICS_FILE, "a") as f:
        f.write("{oops}\n")  # the newline was written, so the line is whole: corrupt, not cut
    with pytest.raises(UserError, match="line 5"):
        read_run(run_dir)


def test_records_of_another_kind_are_ignored_and_repeated_steps_keep_the_later(tmp_path):
    run_dir = stream_run(tmp_path / "r", finish=False)
    with open(run_dir / METRICS_FILE, "a") as f:  # what another tool (or a later batchscale) may add
        f.write(json.dumps({"kind": "note", "text": "hello"}) + "\n")
        f.write(json.dumps({**RECORDS[2], "wall_s": 9.0, "grad_norm/actor": 0.9}) + "\n")  # a resumed run's repeat
    run = read_run(run_dir)
    assert [r["grad_norm/actor"] for r in run.steps] == [1.5, 0.9]


def test_version_1_run_json_reads_with_single_pass_defaults(tmp_path):
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({
        "label": "p8", "seed": 0, "algorithm": "grpo", "prompts_per_step": 8, "samples_per_prompt": 8,
        "samples_per_step": 64, "lr": 1e-6, "lr_rule": 0.5, "model": "m", "task": "t", "source": "verl"}))
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    (run_dir / SUMMARY_FILE).write_text(json.dumps({"finished": True, "eval/accuracy_end": 0.5}))
    run = read_run(run_dir)
    d = run.descriptor
    assert d.schema_version == 1 and d.samples_per_update == 64 and d.updates_per_step == 1
    assert d.generation_batch == 64 and d.rollout_mode == "sync" and d.max_concurrency is None
    assert d.lr_rule == "a=0.5"
    assert run.summary.finished is True and run.summary.eval_end == 0.5  # rebuilt from the records


@pytest.mark.parametrize("change, message", [
    ({"seed": -1}, "seed: input should be greater than or equal to 0"),
    ({"seed": 1.5}, "seed: input should be a valid integer"),
    ({"seed": "3"}, "seed: input should be a valid integer"),
    ({"samples_per_prompt": 3}, "4 x 3 != samples_per_step 8"),
    ({"samples_per_update": 3}, "samples_per_update 3 must divide samples_per_step 8"),
    ({"schema_version": 99}, "newer than this batchscale reads"),
])
def test_descriptor_rules_are_one_line_errors_naming_the_key(tmp_path, change, message):
    run_dir = stream_run(tmp_path / "r")
    data = {**json.loads((run_dir / "run.json").read_text()), **change}
    (run_dir / "run.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=message) as error:
        read_run(run_dir)
    assert "run.json" in error.value.field


def test_writers_refuse_nan_and_infinity(tmp_path):
    log = RunLog(tmp_path / "r", DESCRIPTOR)
    with pytest.raises(ValueError, match="reward/mean = nan is not finite"):
        log.write({**RECORDS[1], "reward/mean": math.nan})
    log.close()
    assert (tmp_path / "r" / METRICS_FILE).read_text() == ""
    with pytest.raises(ValueError):
        write_run(tmp_path / "w", DESCRIPTOR, [{**RECORDS[1], "time/step": math.inf}],
                  summarize_run(DESCRIPTOR, RECORDS, finished=None))
    assert not (tmp_path / "w").exists()
    with pytest.raises(ValueError, match="finite"):
        RunDescriptor(**{**DESCRIPTOR.to_json(), "lr": math.inf})


def test_out_dir_policy_replaces_only_a_run(tmp_path):
    check_out_dir(tmp_path / "new", overwrite=False)
    (tmp_path / "empty").mkdir()
    check_out_dir(tmp_path / "empty", overwrite=False)
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("years of work")
    for overwrite in (False, True):
        with pytest.raises(UserError, match="without a run"):
            check_out_dir(other, overwrite)
    run_dir = stream_run(tmp_path / "run")
    with pytest.raises(UserError, match="already holds a run"):
        check_out_dir(run_dir, overwrite=False)
    check_out_dir(run_dir, overwrite=True)


def test_documents_round_trip_and_name_the_bad_key(tmp_path):
    document = AnalysisDocument(reference="a", target=0.5, target_rule="given", grad_norm_slope=None, b_simple=None,
                                configs={"a": {
                                    "prompts_per_step": 4, "samples_per_prompt": 2, "samples_per_step": 8,
                                    "samples_per_update": 8, "updates_per_step": 1, "lr": 1e-4, "lr_rule": "sqrt",
                                    "seeds": [0, 1], "r_n": 1.0, "updates_to_target": 3.0, "update_ratio": 1.0,
                                    "grad_norm_actor": 1.0, "aligned": True, "samples_to_target": {
                                        "mean": 24.0, "ci_low": 20.0, "ci_high": 28.0, "reached": 2,
                                        "censored": 0}}})
    path = write_document(tmp_path / "analysis.json", document)
    assert read_document(path, AnalysisDocument) == document
    data = json.loads(path.read_text())
    data["configs"]["a"]["samples_to_target"]["reached"] = "two"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"configs\.a\.samples_to_target\.reached: input should be a valid integer"):
        read_document(path, AnalysisDocument)
    with pytest.raises(UserError, match="--generation-profile .*is not a file"):
        read_document(tmp_path / "missing.json", GenerationProfile, "--generation-profile")
    (tmp_path / "newer.json").write_text(json.dumps({**document.to_json(), "schema_version": 7}))
    with pytest.raises(UserError, match="newer than this batchscale"):
        read_document(tmp_path / "newer.json", AnalysisDocument)


def test_capped_lines_keep_a_line_at_the_cap_and_refuse_one_past_it(tmp_path):
    from batchscale.files import TooLarge, iter_lines_capped

    path = tmp_path / "lines"
    path.write_bytes(b"x" * 8 + b"\n" + b"yy\n" + b"torn")
    assert [(i, o, line, ended) for i, o, line, ended in iter_lines_capped(path, 100, 8)] == [
        (0, 0, b"x" * 8, True), (1, 9, b"yy", True), (2, 12, b"torn", False)]
    with pytest.raises(TooLarge, match="line 1 is longer than the 7 bytes"):
        list(iter_lines_capped(path, 100, 7))
    with pytest.raises(TooLarge, match="holds 16 bytes, more than the 15"):
        list(iter_lines_capped(path, 15, 8))


def test_os_error_of_finds_the_errno_inside_a_library_error():
    import errno

    from batchscale.files import os_error_of

    rust = type("SafetensorError", (Exception,), {})("Error while serializing: I/O error: No space left on device "
                                                      "(os error 28)")
    assert os_error_of(rust).errno == errno.ENOSPC
    try:
        try:
            raise OSError(errno.EDQUOT, "quota")
        except OSError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert os_error_of(outer).errno == errno.EDQUOT
    assert os_error_of(ValueError("no errno here")) is None
