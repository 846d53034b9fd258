"""The catalogue of hostile inputs, round three, part B (issue 39), its bounded readers: every file a command reads
is bounded by size, width and type (TRL's training_args.bin by its expanded size, integers, zip sizes, encryption and
method; model directories holding pickles; reasoning-gym params; configs with 5,000-digit integers; run files and
report inputs streamed or read under caps). Each case is one `error:` line, exit 2, no traceback, nothing written;
resume, full disk and kill leftovers are in test_hostile_round3_b."""

from __future__ import annotations

import io
import json
import shutil
import struct
import time
import zipfile
from pathlib import Path

import pytest
from test_hostile_round3_b import refused, small_config_overrides

from batchscale.cli import main


# --- bounded readers: TRL's training_args.bin -----------------------------------------------------------------------

def text_op(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def int_op(value: int) -> bytes:
    if -2**31 <= value < 2**31:
        return b"J" + struct.pack("<i", value)  # BININT
    width = (value.bit_length() + 8) // 8
    return b"\x8b" + struct.pack("<i", width) + value.to_bytes(width, "little", signed=True)  # LONG4


def training_args(fields: bytes, prelude: bytes = b"") -> bytes:
    """A protocol-2 pickle of TRL's GRPOConfig as Trainer._save writes it (GLOBAL, EMPTY_TUPLE, NEWOBJ, BUILD with
    a dict of its fields), with `prelude` run first (its values left in the memo)."""
    return (b"\x80\x02" + prelude + b"ctrl.trainer.grpo_config\nGRPOConfig\n)\x81}" + fields + b"b.")


def setitem(key: str, value: bytes) -> bytes:
    return text_op(key) + value + b"s"


BATCH_FIELDS = (setitem("per_device_train_batch_size", int_op(4)) + setitem("gradient_accumulation_steps", int_op(1))
                + setitem("num_generations", int_op(2)))


def doubling_lists(levels: int = 40) -> bytes:
    """memo 0 = [1]; memo k = [memo k-1, memo k-1]: 2^levels leaves from ~12 bytes a level."""
    out = b"]" + int_op(1) + b"aq\x00" + b"0"
    for k in range(1, levels + 1):
        out += b"](h" + bytes([k - 1]) + b"h" + bytes([k - 1]) + b"eq" + bytes([k]) + b"0"
    return out


def wide_dicts(width: int = 1000) -> bytes:
    """memo 0 = a dict of `width` keys; the fields then hold it `width` times: width^2 keys once expanded."""
    return b"}(" + b"".join(text_op(f"k{i}") + int_op(i) for i in range(width)) + b"uq\x00" + b"0"


def zipped(data: bytes, method: int = zipfile.ZIP_STORED, encrypted: bool = False, declared: int | None = None,
           name: str = "training_args/data.pkl") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        archive.writestr(name, data)
    raw = bytearray(buffer.getvalue())
    local, central = raw.find(b"PK\x03\x04"), raw.find(b"PK\x01\x02")
    if encrypted:
        raw[local + 6] |= 1
        raw[central + 8] |= 1
    if declared is not None:  # a size that lies about what the member expands to
        struct.pack_into("<I", raw, local + 22, declared)
        struct.pack_into("<I", raw, central + 24, declared)
    return bytes(raw)


GOOD_ARGS = training_args(BATCH_FIELDS)
# (name, training_args.bin bytes, what the one error line says); before: a hang, a traceback, or accepted
PICKLE_CASES = [
    ("shared lists expanding to 2^40 items", training_args(BATCH_FIELDS + setitem("deep", b"h\x28"), doubling_lists()),
     "expands to more than 100,000 values"),
    ("a million keys through shared dicts",
     training_args(BATCH_FIELDS + b"(" + b"".join(text_op(f"o{i}") + b"h\x00" for i in range(1000)) + b"u",
                   wide_dicts()), "expands to more than 100,000 values"),
    ("a 5,000-digit batch size", training_args(
        setitem("per_device_train_batch_size", int_op(10**5000)) + setitem("generation_batch_size", int_op(10**5000))
        + b"".join(setitem(k, int_op(1)) for k in ("gradient_accumulation_steps", "steps_per_generation",
                                                      "num_iterations")) + setitem("num_generations", int_op(2))),
     "it holds an integer of 16,610 bits"),
    ("a zip bomb", zipped(b"\x80\x02" + b"N" * (40 * 2**20) + b".", zipfile.ZIP_DEFLATED),
     "declares 41,943,043 bytes, more than the 33,554,432"),
    ("a member larger than it declares", zipped(b"\x80\x02" + b"N" * 2**20 + b".", zipfile.ZIP_DEFLATED, declared=100),
     "not a readable zip (BadZipFile"),
    ("an encrypted member", zipped(GOOD_ARGS, encrypted=True), "is encrypted; refused"),
    ("an lzma member", zipped(GOOD_ARGS, zipfile.ZIP_LZMA), "is compressed with method 14"),
    ("a bzip2 member", zipped(GOOD_ARGS, zipfile.ZIP_BZIP2), "is compressed with method 12"),
]


def write_trl_checkpoint(directory: Path, args: bytes) -> Path:
    from test_ingest_trl import write_trainer_state

    directory.mkdir()
    write_trainer_state(directory / "trainer_state.json")
    (directory / "training_args.bin").write_bytes(args)
    return directory


@pytest.mark.parametrize("name, args, says", PICKLE_CASES, ids=[c[0] for c in PICKLE_CASES])
def test_a_hostile_training_args_bin_is_one_error_line_at_once(name, args, says, tmp_path, capsys):
    checkpoint = write_trl_checkpoint(tmp_path / "checkpoint", args)
    started = time.perf_counter()
    refused(capsys, ["import", "trl", checkpoint, "--out", tmp_path / "run"], "training_args.bin", says)
    assert time.perf_counter() - started < 30  # the 2^40 expansion never runs
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_well_formed_training_args_bin_still_imports(method, tmp_path, capsys):
    checkpoint = write_trl_checkpoint(tmp_path / "checkpoint", zipped(GOOD_ARGS, method))
    assert main(["import", "trl", str(checkpoint), "--out", str(tmp_path / "run"), "--prompts-per-step", "4",
                 "--samples-per-prompt", "2"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "run.json").read_text())["prompts_per_step"] == 4


# --- bounded readers: models, configs, run files --------------------------------------------------------------------

def test_a_model_directory_with_pickled_weights_is_refused(random_model_dir, tmp_path, capsys):
    """Before: loaded with torch.load, whose refusal of a crafted pickle suggests weights_only=False."""
    import torch
    from safetensors.torch import load_file

    model = tmp_path / "pickled"
    shutil.copytree(random_model_dir, model)
    torch.save(load_file(model / "model.safetensors"), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    line = refused(capsys, ["train", "--out", tmp_path / "run", "--set", f"model.name='{model}'",
                            *(f"--set={o}" for o in small_config_overrides())],
                   "model.name", "holds its weights as pickles (pytorch_model.bin)")
    assert "weights_only" not in line and not (tmp_path / "run").exists()


needs_gym = pytest.mark.skipif(not __import__("importlib").util.find_spec("reasoning_gym"),
                               reason="needs the optional extra reasoning-gym")
DIGITS_5000 = "1" + "0" * 5000


@needs_gym
@pytest.mark.parametrize("params, says", [
    ("{size=2.5}", "task.params.size: must be an integer"),
    ("{min_terms=2.5}", "task.params.min_terms: must be an integer"),
    ("{min_terms=10000000000000000000}", "must be an integer within +-(2**63 - 1)"),
    (f"{{min_terms={10**120}}}", f"(got an integer of {(10**120).bit_length()} bits)"),
    ("{min_terms=" + DIGITS_5000 + "}", "its value cannot be read (Exceeds the limit (4300 digits)"),
])
def test_reasoning_gym_params_of_the_wrong_type_or_size_are_one_line(params, says, tmp_path, capsys):
    """Before: a float reached the generator's randrange (TypeError), 5,000 digits tomllib's int() (ValueError)."""
    refused(capsys, ["train", "--out", tmp_path / "run", "--set=task.name='reasoning_gym'",
                     "--set=task.dataset='polynomial_multiplication'", f"--set=task.params={params}",
                     "--set=model.name='tiny'"], says)


def test_a_5000_digit_integer_in_a_config_file_or_a_set_is_one_line(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(f"[batch]\nprompts_per_step = {DIGITS_5000}\n")
    refused(capsys, ["train", config, "--out", tmp_path / "run"], str(config), "holds a value that cannot be read")
    refused(capsys, ["train", "--out", tmp_path / "run", f"--set=batch.prompts_per_step={DIGITS_5000}"],
            "--set batch.prompts_per_step", "its value cannot be read")


def test_an_inline_table_for_a_section_merges_into_it(tmp_path):
    """Before: `--set run={budget_samples=1024}` replaced the file's whole [run] section."""
    from batchscale.config import load_config

    config = tmp_path / "run.toml"
    config.write_text("[run]\neval_every_samples = 4\nseed = 7\n[task]\nparams = {a = 1}\n")
    cfg = load_config(config, ["run={budget_samples=1024}"])
    assert (cfg.run.budget_samples, cfg.run.eval_every_samples, cfg.run.seed) == (1024, 4, 7)
    assert load_config(config, ["task.params={b=2}"]).task.params == {"b": 2}  # a table value is replaced whole


def synthetic_run(path: Path) -> Path:
    from batchscale.analysis.synthetic import write_synthetic_run

    return write_synthetic_run(path, "p16", 0, 16, noise_scale=512.0, gns_sd=0.2)


def test_gns_terms_that_are_text_are_an_error_naming_the_key(tmp_path, capsys):
    """Before: read as never logged, so `predict` said "unresolved (infinite: pure noise at the run's batch)"."""
    run = synthetic_run(tmp_path / "run")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for record in records:
        record.update({key: str(value) for key, value in record.items() if key.startswith("gns/")})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    refused(capsys, ["predict", run], "metrics.jsonl line 2", "gns/grad_sq", "is not a number or null")


def sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


def test_a_sparse_8_gib_samples_file_is_never_read_whole(tmp_path, capsys):
    """Before: `report` read samples.jsonl whole (8 GiB in memory, MemoryError on a small machine)."""
    from batchscale.analysis.synthetic import write_synthetic_sweep

    sweep = write_synthetic_sweep(tmp_path / "sweep", prompts_per_step=(4, 8), seeds=(0,))
    run = sorted((sweep / "runs").iterdir())[0]
    sparse(run / "samples.jsonl", 8 * 2**30)
    refused(capsys, ["report", sweep], "samples.jsonl", "holds 8,589,934,592 bytes, more than the 1,073,741,824")


def test_a_sparse_figure_the_report_would_inline_is_refused_by_its_size(tmp_path, capsys):
    from batchscale.analysis.synthetic import write_synthetic_sweep

    sweep = write_synthetic_sweep(tmp_path / "sweep", prompts_per_step=(4, 8), seeds=(0,))
    assert main(["analyze", str(sweep)]) == 0
    sparse(sweep / "j_vs_samples.png", 2**30)
    refused(capsys, ["report", sweep], "j_vs_samples.png", "holds 1,073,741,824 bytes, more than the 67,108,864")


@pytest.mark.parametrize("name, size, says", [
    ("metrics.jsonl", 9 * 2**30, "holds 9,663,676,416 bytes"),
    ("run.json", 2**30, "holds 1,073,741,824 bytes, more than the 268,435,456"),
])
def test_a_sparse_run_file_is_refused_by_its_size(name, size, says, tmp_path, capsys):
    run = synthetic_run(tmp_path / "run")
    sparse(run / name, size)
    refused(capsys, ["predict", run], name, says)


def test_an_endless_line_is_refused_at_its_cap(tmp_path, capsys):
    run = synthetic_run(tmp_path / "run")
    lines = len((run / "metrics.jsonl").read_bytes().splitlines())
    with open(run / "metrics.jsonl", "ab") as f:
        f.write(b" " * (17 * 2**20) + b"\n")
    refused(capsys, ["predict", run], "metrics.jsonl", f"line {lines + 1} is longer than the 16,777,216 bytes")


def test_the_report_streams_only_the_first_and_last_eval(tmp_path):
    from batchscale.rundir.samples import SamplesLog, first_and_last_evals, sample_rows

    log = SamplesLog(tmp_path)
    for step in range(0, 50):
        log.write(sample_rows(step, step * 8, [("p", f"r{step}", "a", 0.5), ("q", f"s{step}", "b", 1.0)]))
    log.close()
    rows = first_and_last_evals(tmp_path)
    assert [(r.step, r.response) for r in rows] == [(0, "r0"), (0, "s0"), (49, "r49"), (49, "s49")]
