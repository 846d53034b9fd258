"""`batchscale predict RUN_DIR` is the prediction's one command (its `plan --predict` alias was dropped, issue 38):
`plan` takes no prediction flags, and the memory options the two share are declared once (plan/options.py), so they
read the same in both commands' help."""

from __future__ import annotations

import json

import pytest

from batchscale.analysis.synthetic import write_synthetic_run
from batchscale.cli import main


@pytest.fixture()
def run_dir(tmp_path):
    return write_synthetic_run(tmp_path / "run", "p16", 0, 16, noise_scale=512.0, gns_sd=0.2)


def test_predict_prints_its_document(run_dir, capsys):
    assert main(["predict", str(run_dir), "--batches", "32,256,1024", "--json"]) == 0
    batches = [row["samples_per_step"] for row in json.loads(capsys.readouterr().out)["rows"]]
    assert {32, 256, 1024} <= set(batches)  # and the run's own, 128


@pytest.mark.parametrize("flags", [["--predict", "{run}"], ["{run}", "--batches", "64"],
                                   ["{run}", "--training-profile", "t.json"]])
def test_plan_takes_no_prediction_flags(run_dir, capsys, flags):
    assert main(["plan", *(f.format(run=run_dir) for f in flags)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No such option") and len(err.strip().splitlines()) == 1


def test_the_shared_options_read_the_same_in_both_commands(capsys):
    helps = {}
    for command in ("plan", "predict"):
        main([command, "--help"])
        helps[command] = " ".join(capsys.readouterr().out.replace("\u2502", " ").split())  # rich's box edges out
    for text in ("--model", "--hardware", "--context", "--mem-util", "--generation-profile", "the roofline and the "
                 "KV-cache check", "Usable fraction of device memory."):
        assert text in helps["plan"] and text in helps["predict"]
