"""Memory feasibility in the plan: rows whose rollout batch's KV cache does not fit never win, and say why."""

from __future__ import annotations

import json

import pytest

from batchscale.cli import main
from batchscale.errors import UserError
from batchscale.plan.decide import ConfigMeasurement
from batchscale.plan.make import make_plan
from batchscale.plan.memory import MemoryLimit, apply_memory_limit, compute_memory_limit
from tests.test_plan_cli import make_sweep


def test_rows_beyond_kv_capacity_become_infeasible_with_the_reason():
    rows = [ConfigMeasurement("small", 1000.0, 10.0, samples_per_step=64),
            ConfigMeasurement("big", 1000.0, 40.0, samples_per_step=512),
            ConfigMeasurement("unknown", 1000.0, 40.0)]  # no batch size known (a CSV table): left as it is
    marked = {m.label: m for m in apply_memory_limit(rows, MemoryLimit("M", "H", 4096, kv_max_batch=100))}
    assert marked["small"].feasible and marked["unknown"].feasible
    assert not marked["big"].feasible
    assert marked["big"].extra["infeasible_because"].startswith("B_train 512 > KV capacity 100")


def test_memory_limit_is_the_rooflines_kv_capacity():
    from batchscale.systems.hardware import get_hardware
    from batchscale.systems.models import get_model_shape
    from batchscale.systems.roofline import compute_kv_max_batch

    limit = compute_memory_limit("Qwen2.5-7B", "H100-SXM", 8192)
    assert limit.kv_max_batch == compute_kv_max_batch(get_model_shape("Qwen2.5-7B"), get_hardware("H100-SXM"), 8192)
    assert 0 < limit.kv_max_batch < compute_memory_limit("Qwen2.5-7B", "H100-SXM", 2048).kv_max_batch


def test_an_infeasible_faster_row_never_wins_and_the_explanation_says_why(tmp_path):
    sweep = make_sweep(tmp_path)  # P4 (ref, 16 samples/step), P16 (64, the winner without a limit), P64, P256
    decision, explanation, _, source = make_plan(sweep, memory=MemoryLimit("M", "H", 4096, kv_max_batch=32))
    assert decision.best == "P4"
    assert "P16 would be faster" in explanation and "infeasible: B_train 64 > KV capacity 32" in explanation
    assert source["memory"]["kv_max_batch"] == 32


def test_cli_memory_check(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    assert main(["plan", str(sweep), "--model", "tiny", "--hardware", "A100-80GB", "--context", "128", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(r["feasible"] for r in doc["rows"]) and doc["best"] == "P16"  # a tiny model fits any of these batches
    assert main(["plan", str(sweep), "--model", "tiny"]) == 2
    assert "needs both" in capsys.readouterr().err
    with pytest.raises(UserError, match="is infeasible"):
        make_plan(sweep, memory=MemoryLimit("M", "H", 4096, kv_max_batch=8))  # even the reference does not fit
