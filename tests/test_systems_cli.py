"""`batchscale roofline` through batchscale.cli.main: JSON schema, table output, and bad inputs -> exit code 2."""

import json

import pytest

from batchscale import cli
from batchscale.systems import hardware
from batchscale.systems.hardware import Hardware


@pytest.fixture(autouse=True)
def multi_command_app():
    """Typer runs a lone command as the app itself (no subcommand name). While roofline may be the only command
    registered, add a throwaway second one so `main(["roofline", ...])` parses as in the full CLI."""
    added = len(cli.app.registered_commands) < 2
    if added:
        cli.app.command("_placeholder", hidden=True)(lambda: None)
    yield
    if added:
        cli.app.registered_commands.pop()


def run_json(capsys, *args):
    assert cli.main(["roofline", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_schema(capsys):
    result = run_json(capsys, "Qwen2.5-7B", "H100-SXM", "--context", "2048", "--batches", "1,32")
    assert {"model", "hardware", "context", "rows", "kv_max_batch"} <= set(result)
    assert (result["model"], result["hardware"], result["context"]) == ("Qwen2.5-7B", "H100-SXM", 2048)
    assert [row["batch"] for row in result["rows"]] == [1, 32]
    for row in result["rows"]:
        for phase in ("decode", "train"):
            assert {"layer_s", "model_s", "tokens_per_s", "bound"} <= set(row[phase])
            assert row[phase]["bound"] in ("compute", "memory")
    assert isinstance(result["kv_max_batch"], int) and result["kv_max_batch"] > 32


def test_dtype_and_mem_util_options(capsys):
    base = run_json(capsys, "Qwen2.5-7B", "H100-SXM", "--batches", "1")
    fp32 = run_json(capsys, "Qwen2.5-7B", "H100-SXM", "--batches", "1", "--dtype-bytes", "4", "--mem-util", "0.5")
    assert fp32["weights_bytes"] == 2 * base["weights_bytes"]
    assert fp32["kv_max_batch"] < base["kv_max_batch"]


def test_cpu_hardware_uses_measurement(capsys, monkeypatch):
    fake = Hardware("cpu", 1e11, 2e10, 16e9, "fake measurement")
    monkeypatch.setattr(hardware, "measure_cpu", lambda: fake)
    result = run_json(capsys, "tiny", "cpu", "--context", "128", "--batches", "1,2")
    assert result["hardware"] == "cpu"
    assert result["ridge_flops_per_byte"] == pytest.approx(5.0)


def test_table_output(capsys):
    assert cli.main(["roofline", "tiny", "A100-80GB", "--context", "64", "--batches", "1,8"]) == 0
    out = capsys.readouterr().out
    assert "decode tok/s" in out and "KV max batch" in out


@pytest.mark.parametrize(
    "args, field",
    [
        (["gpt-17", "H100-SXM"], "model"),
        (["tiny", "TPUv9"], "hardware"),
        (["tiny", "H100-SXM", "--context", "4096"], "context"),
        (["tiny", "H100-SXM", "--batches", "0,2"], "batches"),
        (["tiny", "H100-SXM", "--batches", "1,x"], "batches"),
        (["tiny", "H100-SXM", "--mem-util", "1.5"], "mem_util"),
    ],
)
def test_bad_inputs_exit_2(capsys, args, field):
    assert cli.main(["roofline", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}") and "Fix:" in err


def test_config_json_missing_field_exit_2(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}))
    assert cli.main(["roofline", str(path), "H100-SXM"]) == 2
    assert "intermediate_size" in capsys.readouterr().err


def test_config_json_model(capsys, tmp_path):
    config = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256}
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = run_json(capsys, str(tmp_path / "config.json"), "H200", "--context", "256", "--batches", "4")
    assert result["params"] == 2 * (64 * (64 + 2 * 32) + 64 * 64 + 3 * 64 * 128) + 2 * 100 * 64
