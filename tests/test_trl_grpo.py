"""GradientNoiseCallback in TRL's real GRPOTrainer (CPU, a tiny random Llama, 3 steps of 2 micro-batches, TRL's default
token-sum loss `dapo`, gradient checkpointing on as TRL defaults, a linearly decaying learning rate), added as TRL
users add callbacks (`GRPOTrainer(..., callbacks=[GradientNoiseCallback()])`): training is bitwise the same with and
without it (losses, gradient norms, final weights), every training log carries the gns keys and timers (their step
norm is the Trainer's own before clipping), `batchscale import trl` passes them and the decaying learning rate
(`lr/actor` per record) into the step records, and `batchscale predict` plans from the imported run. The same under DDP:
two CPU processes (torchrun, gloo), where the step norm the estimate uses must be the all-reduced one the Trainer
logs as grad_norm.

TRL runs in its own venv, .cache/bench/trl-venv (benchmarks/e2e_trl.py's recipe: torch==2.13.0 pinned first, then
trl==1.13.0), made when BATCHSCALE_TEST_TRL=1 (about 3 minutes; otherwise the test runs only where it exists); the
test skips, saying why, when it cannot be made (no package registry)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import socket
import subprocess
from pathlib import Path

import pytest

from batchscale.cli import main
from batchscale.rundir import read_run

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).with_name("trl_grpo_worker.py")
P, G, MICRO, ACCUMULATION, STEPS = 2, 4, 4, 2, 3  # a step: 2 micro-batches of 4 completions = 2 groups of 4


@pytest.fixture(scope="module")
def trl_python() -> Path:
    spec = importlib.util.spec_from_file_location("e2e_trl", ROOT / "benchmarks" / "e2e_trl.py")
    e2e_trl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e2e_trl)
    ready = (e2e_trl.TRL_VENV / ".batchscale-ready").is_file()
    if not ready and os.environ.get("BATCHSCALE_TEST_TRL") != "1":  # making it takes ~3 min: not in every run
        pytest.skip(f"no TRL venv at {e2e_trl.TRL_VENV}: BATCHSCALE_TEST_TRL=1 makes it (~3 min) and runs this test")
    try:
        return e2e_trl.ensure_trl_venv(e2e_trl.TRL_VENV)
    except (subprocess.CalledProcessError, OSError) as e:
        pytest.skip(f"the TRL venv ({e2e_trl.TRL_VENV}) could not be made, is a package registry reachable? ({e})")


def train(python: Path, model_dir: Path, out_dir: Path, callback: bool, processes: int = 1) -> dict:
    spec = {"src": str(ROOT / "src"), "model_dir": str(model_dir), "out_dir": str(out_dir), "callback": callback,
            "steps": STEPS, "micro_batch_size": MICRO, "accumulation": ACCUMULATION, "samples_per_prompt": G,
            "max_new_tokens": 8, "loss_type": "dapo", "max_grad_norm": 0.5, "logging_steps": 1}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    launcher = [] if processes == 1 else ["-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                                          "--master_port", str(free_port())]
    proc = subprocess.run([str(python), *launcher, str(WORKER), json.dumps(spec)], capture_output=True, text=True,
                          env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    versions = json.loads(proc.stdout.strip().splitlines()[-1])
    state = json.loads((out_dir / "trainer_state.json").read_text())
    return {"versions": versions, "log": [e for e in state["log_history"] if "loss" in e]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_entries(log: list[dict], batch: int) -> None:
    """Every training entry carries the keys, and |G|^2 + tr(Sigma) / B is |g_B|^2 identically: the estimate's step
    norm is the Trainer's grad_norm, the (all-reduced) norm before the clip (max_grad_norm 0.5 clips)."""
    assert [e["step"] for e in log] == list(range(1, STEPS + 1))
    for entry in log:
        for key in ("gns/grad_sq", "gns/trace_sigma", "time/generate", "time/train"):
            assert isinstance(entry[key], float) and math.isfinite(entry[key]), (key, entry)
        assert "gns/b_noise" in entry  # a number, or null while not resolved
        assert entry["time/generate"] > 0 and entry["time/train"] > 0
        assert entry["gns/grad_sq"] + entry["gns/trace_sigma"] / batch == pytest.approx(entry["grad_norm"] ** 2,
                                                                                        rel=1e-4)
    assert any(entry["grad_norm"] > 0.5 for entry in log)
    rates = [entry["learning_rate"] for entry in log]
    assert rates == sorted(rates, reverse=True) and rates[0] > rates[-1]  # the linear schedule decays


@pytest.mark.slow
def test_callback_in_a_real_grpo_run(trl_python, random_model_dir, tmp_path, capsys):
    import torch

    plain = train(trl_python, random_model_dir, tmp_path / "plain", callback=False)
    measured = train(trl_python, random_model_dir, tmp_path / "measured", callback=True)
    assert measured["versions"]["trl"] == "1.13.0" and measured["versions"]["gradient_checkpointing"]

    # the training itself is unchanged, bitwise
    assert [e["step"] for e in measured["log"]] == list(range(1, STEPS + 1))
    for key in ("loss", "grad_norm", "reward"):
        assert [e[key] for e in measured["log"]] == [e[key] for e in plain["log"]], key
    weights = [torch.load(tmp_path / run / "weights.pt") for run in ("plain", "measured")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])

    check_entries(measured["log"], MICRO * ACCUMULATION)
    assert not any(key.startswith("gns/") for e in plain["log"] for key in e)

    # imported: the step records carry them; predict runs on the import
    run_dir = tmp_path / "run"
    assert main(["import", "trl", str(tmp_path / "measured"), "--out", str(run_dir),
                 "--prompts-per-step", str(P), "--samples-per-prompt", str(G)]) == 0
    run = read_run(run_dir)
    assert run.samples_per_step == MICRO * ACCUMULATION
    for record, entry in zip(run.steps, measured["log"]):
        for key in ("gns/grad_sq", "gns/trace_sigma", "gns/b_noise", "time/generate", "time/train"):
            assert record[key] == entry[key], key
        assert record["lr/actor"] == entry["learning_rate"]  # the schedule, step by step, not a constant
    block = json.loads((run_dir / "run.json").read_text())["import"]
    assert any("GradientNoiseCallback" in note for note in block["notes"])
    assert not any(key.startswith(("gns/", "time/")) for key in block["unknown_keys"])
    assert not any(line.startswith(("time/generate", "time/train")) for line in block["not_provided"])
    capsys.readouterr()
    assert main(["predict", str(run_dir), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["reference"]["samples_per_step"] == MICRO * ACCUMULATION
    assert "b_noise" in document and document["rows"]


@pytest.mark.slow
def test_callback_in_a_real_grpo_run_under_ddp(trl_python, random_model_dir, tmp_path):
    run = train(trl_python, random_model_dir, tmp_path / "ddp", callback=True, processes=2)
    assert run["versions"]["world_size"] == 2
    check_entries(run["log"], 2 * MICRO * ACCUMULATION)  # B: both processes' micro-batches
    run_dir = tmp_path / "run"
    assert main(["import", "trl", str(tmp_path / "ddp"), "--out", str(run_dir),
                 "--prompts-per-step", str(2 * P), "--samples-per-prompt", str(G)]) == 0
    assert [r["gns/grad_sq"] for r in read_run(run_dir).steps] == [e["gns/grad_sq"] for e in run["log"]]
