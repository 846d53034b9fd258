"""`batchscale predict RUN_DIR` is the prediction's own command; `plan --predict RUN_DIR` is its alias: the same
flags give the same document and the same table, and the alias says on stderr what it is."""

from __future__ import annotations

import json

import pytest

from document_fixtures import write_generation_profile, write_training_profile

from batchscale.analysis.synthetic import write_synthetic_run
from batchscale.cli import main
from batchscale.plan.predict_cli import ALIAS_NOTE


@pytest.fixture()
def run_dir(tmp_path):
    return write_synthetic_run(tmp_path / "run", "p16", 0, 16, noise_scale=512.0, gns_sd=0.2)


def both_spellings(capsys, run_dir, *flags) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    results = []
    for args in (["predict", str(run_dir), *flags], ["plan", "--predict", str(run_dir), *flags]):
        code = main(args)
        captured = capsys.readouterr()
        results.append((code, captured.out, captured.err))
    return results[0], results[1]


@pytest.mark.parametrize("flags", [
    [],
    ["--batches", "32,256,1024"],
    ["--generation-profile", "{gen}", "--training-profile", "{train}", "--batches", "64,512"],
    ["--model", "Qwen2.5-7B", "--hardware", "H100-SXM", "--context", "4096"],
])
def test_both_spellings_print_the_same_json(run_dir, tmp_path, capsys, flags):
    paths = {"gen": write_generation_profile(tmp_path / "gen.json"), "train": write_training_profile(tmp_path / "t.json")}
    flags = [f.format(**paths) for f in flags]
    (code, out, err), (alias_code, alias_out, alias_err) = both_spellings(capsys, run_dir, *flags, "--json")
    assert code == alias_code == 0
    assert json.loads(out) == json.loads(alias_out) and json.loads(out)["rows"]
    assert out == alias_out
    assert ALIAS_NOTE not in err and alias_err.strip().splitlines()[0] == ALIAS_NOTE


def test_both_spellings_print_the_same_table(run_dir, capsys):
    (code, out, _), (alias_code, alias_out, _) = both_spellings(capsys, run_dir, "--batches", "64,256")
    assert code == alias_code == 0 and out == alias_out and "B_noise" in out


@pytest.mark.parametrize("flags, needle", [
    (["--model", "Qwen2.5-7B"], "--model/--hardware"),
    (["--batches", "0"], "--batches"),
])
def test_bad_input_is_the_same_one_line_error(run_dir, capsys, flags, needle):
    (code, _, err), (alias_code, _, alias_err) = both_spellings(capsys, run_dir, *flags)
    assert code == alias_code == 2
    assert err.startswith(f"error: {needle}") and alias_err.endswith(err) and len(err.strip().splitlines()) == 1


def test_prediction_flags_without_a_prediction_point_at_the_command(tmp_path, capsys):
    assert main(["plan", str(tmp_path), "--batches", "64"]) == 2
    assert "batchscale predict RUN_DIR" in capsys.readouterr().err
