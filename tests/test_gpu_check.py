"""benchmarks/gpu_check.sh and its summary, checked without a GPU: the dry run prints every stage with its limit and
runs nothing; the summary turns the documents the stages write (here made on the CPU) into summary.json/.md and names
every stage that did not run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchscale.rundir import write_document
from batchscale.profile.generation import profile_generation
from batchscale.profile.training import profile_training

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
STAGES = ["install", "warm_models", "gpu_tests", "generation_smollm2_engine", "generation_smollm2_hf", "training_qwen",
          "grpo_sweep", "generation_qwen_engine", "generation_qwen_hf", "summary"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_dry_run_prints_the_stages_and_their_limits_and_runs_nothing(tmp_path):
    out = tmp_path / "gpu"
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu_check.sh"), str(out), "--dry-run"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "budget 530 s" in lines[0]  # under 9 minutes, the summary included
    listed = [line.split()[0] for line in lines[1:-1]]
    assert listed == STAGES
    for line in lines[1:-1]:
        assert int(line.split()[1]) > 0 and line.split()[2] == "s"  # every stage has its own limit
    assert "--device cuda" in done.stdout and "pytest -m gpu" in done.stdout
    assert not out.exists()


@pytest.mark.skipif(not (BENCHMARKS.parent / ".venv" / "bin" / "python").is_file(), reason="no .venv (make install)")
def test_a_spent_budget_skips_every_stage_and_still_writes_the_summary(tmp_path):
    """The loop itself, without compute: with 20 s of budget (15 kept for the summary) no stage fits."""
    out = tmp_path / "gpu"
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu_check.sh"), str(out)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "GPU_CHECK_BUDGET_S": "20"})
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in (out / "stages.tsv").read_text().splitlines()[1:]]
    assert [row[0] for row in rows] == STAGES[:-1] and {row[1] for row in rows} == {"skipped"}
    summary = json.loads((out / "summary.json").read_text())
    assert {x["stage"] for x in summary["not_run_or_failed"]} == {*STAGES[:-1], "vllm"}
    assert "install (skipped: budget spent" in (out / "summary.md").read_text()


@pytest.mark.parametrize("args", [[], ["--bogus"], ["a", "b"]])
def test_bad_usage_exits_2(args):
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu_check.sh"), *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "usage" in done.stderr


def test_summary_from_the_stages_documents(tmp_path, random_model_dir):
    quiet = lambda _message: None  # noqa: E731
    for backend in ("engine", "hf"):
        profile = profile_generation(str(random_model_dir), concurrencies=[1, 2], backend=backend, repeats=1, waves=1,
                                     min_responses=4, samples_per_prompt=2, max_new_tokens=4, device="cpu",
                                     log=quiet, hardware="H100-SXM")
        write_document(tmp_path / f"generation_smollm2_{backend}.json", profile)
    write_document(tmp_path / "training_qwen.json", profile_training(
        str(random_model_dir), batches=[4, 8], repeats=1, device="cpu", log=quiet, hardware="H100-SXM"))
    (tmp_path / "stages.tsv").write_text("stage\tstatus\tseconds\tlimit_s\tnote\n"
                                         "install\tok\t12\t240\t\n"
                                         "grpo_sweep\tskipped\t0\t90\tbudget spent (3 s left)\n")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_summary.py"), str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    smollm2 = summary["generation"]["smollm2"]
    assert set(smollm2["engine_over_hf"]) == {"1", "2"} and all(r > 0 for r in smollm2["engine_over_hf"].values())
    assert 0 < smollm2["engine"]["bandwidth_fraction_at_1"] < 1 and smollm2["engine"]["hardware"] == "H100-SXM"
    assert summary["generation"]["qwen"]["missing"] == {
        "engine": "generation_qwen_engine.json was not written", "hf": "generation_qwen_hf.json was not written"}
    assert summary["training"]["utilization_best"] > 0
    assert summary["grpo_sweep"]["missing"] == ["analysis.json was not written", "plan.json was not written"]
    not_run = {x["stage"]: x["status"] for x in summary["not_run_or_failed"]}
    assert not_run == {"grpo_sweep": "skipped", "vllm": "skipped"}
    markdown = (tmp_path / "summary.md").read_text()
    assert "| 1 |" in markdown and "grpo_sweep (skipped: budget spent" in markdown and "gpu tests" in markdown
