"""Memory feasibility in the plan on the active decode batch: a row is infeasible only when that batch's KV cache (or one
sequence's) does not fit, a larger B_train decodes in waves; --gpus / --tensor-parallel / --colocated; the regime's knee
is one that can be reached."""

from __future__ import annotations

import json

import pytest

from batchscale.cli import main
from batchscale.errors import UserError
from batchscale.plan.make import make_plan
from batchscale.plan.memory import MemoryLimit, apply_memory_limit, compute_memory_limit, describe_waves
from batchscale.plan.rows import ConfigMeasurement
from tests.test_plan_cli import make_sweep


def test_only_a_decode_batch_beyond_kv_capacity_is_infeasible_and_b_train_beyond_it_runs_in_waves():
    rows = [ConfigMeasurement("small", 1000.0, 10.0, samples_per_step=64),
            ConfigMeasurement("big", 1000.0, 40.0, samples_per_step=512),  # no cap known: the engine decodes 100
            ConfigMeasurement("capped", 1000.0, 40.0, samples_per_step=512, max_concurrency=64),
            ConfigMeasurement("overcapped", 1000.0, 40.0, samples_per_step=512, max_concurrency=256),
            ConfigMeasurement("unknown", 1000.0, 40.0)]  # no batch size known (a CSV table): left as it is
    marked = {m.label: m for m in apply_memory_limit(rows, MemoryLimit("M", "H", 4096, kv_max_batch=100))}
    assert marked["small"].feasible and marked["unknown"].feasible
    assert marked["small"].extra == {"decode_batch": 64}
    assert marked["big"].feasible and marked["big"].extra == {"decode_batch": 100, "throughput_capped_at": 100}
    assert describe_waves(marked["big"]) == "B_train 512 decodes in waves: throughput capped at 100 sequences"
    assert marked["capped"].feasible and marked["capped"].extra["throughput_capped_at"] == 64
    assert not marked["overcapped"].feasible
    assert marked["overcapped"].extra["infeasible_because"].startswith("decode batch 256 > KV capacity 100")
    none_fit = apply_memory_limit(rows[:1], MemoryLimit("M", "H", 4096, kv_max_batch=0))[0]
    assert not none_fit.feasible and "not even one sequence" in none_fit.extra["infeasible_because"]


def test_papers_p128_g8_reference_is_feasible_on_qwen7b_h100_2048_with_max_concurrency_256():
    limit = compute_memory_limit("Qwen2.5-7B", "H100-SXM", 2048)
    assert 256 < limit.kv_max_batch < 1024  # B_train = 1024 alone would not fit: the old check refused it
    reference = ConfigMeasurement("P128", 1e5, 10.0, prompts_per_step=128, samples_per_prompt=8, samples_per_step=1024,
                                  generation_batch=1024, max_concurrency=256)
    (checked,) = apply_memory_limit([reference], limit)
    assert checked.feasible and checked.extra == {"decode_batch": 256, "throughput_capped_at": 256}


def test_gpus_and_tensor_parallel_divide_the_model_and_a_colocated_trainer_takes_memory():
    one = compute_memory_limit("Qwen2.5-7B", "H100-SXM", 4096)
    tp2 = compute_memory_limit("Qwen2.5-7B", "H100-SXM", 4096, gpus=8, tensor_parallel=2)
    assert tp2.replicas == 4 and tp2.kv_max_batch > 2 * one.kv_max_batch  # the weights are held once per 2 GPUs
    colocated = compute_memory_limit("Qwen2.5-7B", "H100-SXM", 4096, gpus=8, tensor_parallel=2, colocated=True)
    from batchscale.systems.model_shapes import get_model_shape
    from batchscale.systems.roofline import count_kv_bytes_per_sequence

    shape = get_model_shape("Qwen2.5-7B")
    trainer_sequences = 16 * shape.params * 2 / 8 / count_kv_bytes_per_sequence(shape, 4096)
    assert tp2.kv_max_batch - colocated.kv_max_batch == pytest.approx(trainer_sequences, abs=1)
    rollout = ConfigMeasurement("P512", 1e5, 10.0, samples_per_step=4096, max_concurrency=256)
    (spread,) = apply_memory_limit([rollout], tp2)  # 4096 over 4 replicas: 1024 each, 256 at once
    assert spread.feasible and spread.extra == {"decode_batch": 256, "throughput_capped_at": 1024}
    with pytest.raises(UserError, match="--tensor-parallel"):
        compute_memory_limit("Qwen2.5-7B", "H100-SXM", 4096, gpus=6, tensor_parallel=4)
    with pytest.raises(UserError, match="--gpus"):
        compute_memory_limit("Qwen2.5-7B", "H100-SXM", 4096, gpus=0)


def test_knee_is_reachable_and_tentative_when_extrapolated():
    from document_fixtures import generation_profile

    from batchscale.plan.make import reachable_knee

    profile = generation_profile([1, 4, 16, 64], [10.0, 38.0, 120.0, 260.0])  # still rising: B_90 beyond 64
    assert profile.knee.b_90 > 64
    limit = compute_memory_limit("Qwen2.5-7B", "H100-SXM", 4096)  # 241 sequences, as the issue found
    knee, note = reachable_knee(542.0, profile, limit)
    assert knee == 64 and "beyond the largest concurrency measured, 64" in note and "KV capacity" in note
    big_profile = generation_profile([1, 64, 1024], [10.0, 400.0, 500.0])
    knee, note = reachable_knee(542.0, big_profile, limit)
    assert knee == limit.kv_max_batch and "beyond the KV capacity" in note
    assert reachable_knee(100.0, big_profile, None) == (100.0, None)


def test_memory_limit_is_the_rooflines_kv_capacity():
    from batchscale.systems.hardware import get_hardware
    from batchscale.systems.model_shapes import get_model_shape
    from batchscale.systems.roofline import compute_kv_max_batch

    limit = compute_memory_limit("Qwen2.5-7B", "H100-SXM", 8192)
    assert limit.kv_max_batch == compute_kv_max_batch(get_model_shape("Qwen2.5-7B"), get_hardware("H100-SXM"), 8192)
    assert 0 < limit.kv_max_batch < compute_memory_limit("Qwen2.5-7B", "H100-SXM", 2048).kv_max_batch


def test_an_infeasible_faster_row_never_wins_and_the_explanation_says_why(tmp_path):
    sweep = make_sweep(tmp_path)  # P4 (ref, 16 samples/step), P16 (64, the winner without a limit), P64, P256
    limit = MemoryLimit("M", "H", 4096, kv_max_batch=32)
    made = make_plan(sweep, memory=limit, max_concurrency=64)
    decision, explanation, source = made.decision, made.explanation, made.source
    assert decision.best == "P4"
    assert "P16 would be faster" in explanation and "infeasible: decode batch 64 > KV capacity 32" in explanation
    assert source["memory"]["kv_max_batch"] == 32 and source["memory"]["replicas"] == 1
    made = make_plan(sweep, memory=limit)
    decision, explanation = made.decision, made.explanation  # no cap known: P16 decodes 32 at a time
    assert decision.best == "P16" and "throughput capped at 32 sequences" in explanation


def test_cli_memory_check(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    assert main(["plan", str(sweep), "--model", "tiny", "--hardware", "A100-80GB", "--context", "128", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(r["feasible"] for r in doc["rows"]) and doc["best"] == "P16"  # a tiny model fits any of these batches
    assert main(["plan", str(sweep), "--model", "Qwen2.5-7B", "--hardware", "H100-SXM", "--gpus", "2",
                 "--tensor-parallel", "2", "--colocated", "--max-concurrency", "8", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["memory"]["tensor_parallel"] == 2 and doc["memory"]["colocated"] is True
    assert {r["label"]: r["decode_batch"] for r in doc["rows"]}["P16"] == 8
    assert main(["plan", str(sweep), "--model", "tiny"]) == 2
    assert "needs both" in capsys.readouterr().err
    assert main(["plan", str(sweep), "--max-concurrency", "0"]) == 2
    assert "--max-concurrency" in capsys.readouterr().err
    with pytest.raises(UserError, match="is infeasible"):
        make_plan(sweep, memory=MemoryLimit("M", "H", 4096, kv_max_batch=8), max_concurrency=16)  # not the reference


def test_table_max_concurrency_column(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("label,samples_to_target,throughput,samples_per_step,max_concurrency\n"
                     "ref,1000,10,1024,256\nbig,1000,20,4096,512\n")
    decision = make_plan(table=table, memory=MemoryLimit("M", "H", 2048, kv_max_batch=300)).decision
    assert decision.row("ref").measurement.feasible and not decision.row("big").measurement.feasible
    assert decision.row("ref").measurement.extra["throughput_capped_at"] == 256
