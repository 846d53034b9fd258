"""GradientNoiseCallback under DDP: two CPU processes (torch.distributed, gloo), each training on its half of every
step's micro-batches (tests/trl_ddp_worker.py), against one process running all of them in sequence. The estimator's
inputs (each micro-batch's own mean gradient norm |m|^2, the completions, the all-reduced step's norm before the
clip), the logged estimates and the trained weights match to float tolerance, for a process's micro-batches (K = 2)
and for its local batch as the small batch (K = 1); both processes log the same values."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import TrainerState

from batchscale.integrations.trl import GradientNoiseCallback
from trl_standin import TinyLM, log, make_micro_batches, run_step, trainer_args

ROOT = Path(__file__).resolve().parents[1]
WORLD, ROWS, STEPS, SEED, CLIP = 2, 3, 2, 7, 0.05


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(tmp_path: Path, loss_type: str, accumulation: int) -> list[dict]:
    port, out = free_port(), tmp_path / "ddp.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}"}
    procs = []
    for rank in range(WORLD):
        spec = {"src": str(ROOT / "src"), "rank": rank, "world": WORLD, "port": port, "loss_type": loss_type,
                "accumulation": accumulation, "rows": ROWS, "steps": STEPS, "seed": SEED, "out": str(out),
                "max_grad_norm": CLIP}
        procs.append(subprocess.Popen([sys.executable, str(ROOT / "tests" / "trl_ddp_worker.py"), json.dumps(spec)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    return [json.loads(Path(f"{out}{'' if rank == 0 else f'.rank{rank}'}").read_text()) for rank in range(WORLD)]


def run_single(loss_type: str, accumulation: int) -> dict:
    """One process, the same P x K micro-batches per step in rank order."""
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    args = trainer_args(loss_type, WORLD * accumulation, max_grad_norm=CLIP)
    callback, state = GradientNoiseCallback(), TrainerState()
    callback.on_train_begin(args, state, None, model=model)
    steps = []
    for step in range(STEPS):
        batches = make_micro_batches(SEED + step, WORLD * accumulation, ROWS)
        tokens = int(sum(b["completion_mask"].sum() for b in batches))
        run_step(model, callback, batches, args, state, loss_tokens=tokens, optimizer=optimizer)
        steps.append({"inputs": dict(callback.last_step), "entry": log(callback, args, state, {"loss": 0.0})})
    callback.on_train_end(args, state, None)
    return {"steps": steps, "parameters": {n: p.detach().reshape(-1).tolist() for n, p in model.named_parameters()}}


@pytest.mark.slow
@pytest.mark.parametrize("loss_type,accumulation", [("dapo", 2), ("grpo", 1)])
def test_two_processes_give_the_single_process_estimator_inputs(tmp_path, loss_type, accumulation):
    ranks, single = run_ddp(tmp_path, loss_type, accumulation), run_single(loss_type, accumulation)
    for ddp_step, one_step in zip(ranks[0]["steps"], single["steps"]):
        got, want = ddp_step["inputs"], one_step["inputs"]
        assert (got["processes"], want["processes"]) == (WORLD, 1)
        assert len(got["chunk_grad_sq"]) == WORLD * accumulation
        assert got["chunk_grad_sq"] == pytest.approx(want["chunk_grad_sq"], rel=1e-9)
        assert got["samples"] == want["samples"] == [ROWS] * (WORLD * accumulation)
        assert got["batch_sq"] == pytest.approx(want["batch_sq"], rel=1e-9)
        assert got["batch_sq"] > CLIP ** 2  # the norm before the clip, which clipped this step
        for key in ("gns/grad_sq", "gns/trace_sigma", "gns/b_noise"):
            want = one_step["entry"][key]  # b_noise: None while the EMA of |G|^2 is not positive
            assert ddp_step["entry"][key] == (None if want is None else pytest.approx(want, rel=1e-7)), key
    for rank in ranks[1:]:  # every process computes and logs the same
        assert [s["entry"]["gns/grad_sq"] for s in rank["steps"]] == [s["entry"]["gns/grad_sq"] for s in ranks[0]["steps"]]
    for name, values in single["parameters"].items():  # DDP trained the same model: the next step's inputs agree too
        assert ranks[0]["parameters"][name] == pytest.approx(values, rel=1e-9, abs=1e-12)
