"""benchmarks/gpu_check.sh and its helpers, checked without a GPU.

- The script: the dry run lists every stage with its limit and runs nothing; bad usage and bad settings exit 2 before
  anything runs; a spent budget skips every stage and still writes exactly the 4 files that come back, the summary
  printed last.
- The summary: stdlib only (it runs with `python3 -I` when batchscale cannot be imported); from documents made on the
  CPU and ceilings of known size it computes the fractions of both ceilings exactly, prints the knee with its
  "extrapolated" flag and names what did not run; the CUDA tests' verdict fails "all skipped" on a GPU.
- The preflight names the missing GPU, a missing import and a version out of range; the wheels carried are the
  closure of what the image lacks, one version each.
- README gives the device command within the run tool's limits; the slow rehearsal (`make gpu-rehearsal`) passes.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from batchscale.rundir import write_document
from batchscale.profile.generation import profile_generation
from batchscale.profile.training import profile_training

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import gpu_preflight  # noqa: E402
import gpu_rehearsal  # noqa: E402
import gpu_summary  # noqa: E402
import gpu_wheels  # noqa: E402

STAGES = gpu_rehearsal.STAGES
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_check(*args, timeout=60, **env):
    return subprocess.run(["bash", str(BENCHMARKS / "gpu_check.sh"), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **env})


def test_dry_run_prints_the_stages_and_their_limits_and_runs_nothing(tmp_path):
    out = tmp_path / "gpu"
    done = run_check(out, "--dry-run")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "budget 360 s" in lines[0] and "device cuda" in lines[0] and "python python3" in lines[0]
    listed = [line.split()[0] for line in lines[1:-1]]
    assert listed == [*STAGES, "summary"]
    limits = [int(line.split()[1]) for line in lines[1:-1]]
    assert all(limit > 0 for limit in limits) and f"limits add up to {sum(limits[:-1])} s" in lines[-1]
    assert not out.exists()


@pytest.mark.parametrize("args, env, message", [
    ([], {}, "usage"), (["--bogus"], {}, "usage"), (["a", "b"], {}, "usage"),
    (["OUT"], {"GPU_CHECK_STAGES": "preflight,nope"}, "GPU_CHECK_STAGES: unknown stage 'nope'"),
    (["OUT"], {"GPU_CHECK_DEVICE": "tpu"}, "GPU_CHECK_DEVICE"), (["OUT"], {"GPU_CHECK_BUDGET_S": "9m"}, "whole number"),
    (["OUT"], {"GPU_CHECK_SIZE": "huge"}, "GPU_CHECK_SIZE")])
def test_bad_usage_and_settings_exit_2_before_anything_runs(tmp_path, args, env, message):
    done = run_check(*[tmp_path / a if a == "OUT" else a for a in args], **env)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "OUT").exists()


def test_a_spent_budget_skips_every_stage_and_still_returns_the_summary(tmp_path):
    """The loop without compute: with 20 s of budget (15 kept for the summary) no stage's limit fits."""
    out = tmp_path / "gpu"
    done = run_check(out, GPU_CHECK_BUDGET_S="20", GPU_CHECK_PYTHON=sys.executable, GPU_CHECK_WORK=tmp_path / "work")
    assert done.returncode == 1, done.stderr  # nothing ran: not a passing check
    assert {p.name for p in out.iterdir()} == gpu_rehearsal.OUT_FILES and not gpu_rehearsal.what_comes_back(out)
    rows = [line.split("\t") for line in (out / "stages.tsv").read_text().splitlines()[1:]]
    assert [row[0] for row in rows] == STAGES and {row[1] for row in rows} == {"skipped"}
    assert all("limit does not fit in the" in row[4] for row in rows)
    summary = (out / "summary.md").read_text()
    assert done.stdout.endswith(summary) and "preflight (skipped: its 60 s limit does not fit" in summary


def test_the_summary_imports_nothing_but_the_standard_library():
    tree = ast.parse((BENCHMARKS / "gpu_summary.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}
    assert imported - {"__future__"} <= sys.stdlib_module_names


def write_ceilings(results: Path, copy_bytes_per_s: float, matmul_flops_per_s: float) -> None:
    block = lambda value: {"best": value, "median": value, "samples": [value]}  # noqa: E731
    (results / "ceilings.json").write_text(json.dumps({
        "name": "cpu", "device": "cpu", "torch": "x", "seconds": 1.0,
        "copy": {"buffer_bytes": 2**20, "bytes_moved": 2**21, "bytes_per_s": block(copy_bytes_per_s)},
        "matmul_bf16": {"n": 64, "flops": 2 * 64**3, "relative_error": 1e-3, "flops_per_s": block(matmul_flops_per_s)}}))


def test_summary_from_the_stages_documents(tmp_path, random_model_dir):
    work, out = tmp_path / "work", tmp_path / "out"
    results = work / "results"
    quiet = lambda _message: None  # noqa: E731
    for backend in ("engine", "hf"):
        profile = profile_generation(str(random_model_dir), concurrencies=[1, 2], backend=backend, repeats=1, waves=1,
                                     min_responses=4, samples_per_prompt=2, max_new_tokens=4, device="cpu",
                                     log=quiet, hardware="H100-SXM")
        write_document(results / f"generation_smollm2_{backend}.json", profile)
    write_document(results / "training_smollm2.json", profile_training(
        str(random_model_dir), batches=[2, 4], repeats=1, device="cpu", log=quiet, hardware="H100-SXM",
        prompt_tokens=6, response_tokens=10))
    write_ceilings(results, copy_bytes_per_s=1e11, matmul_flops_per_s=1e12)
    (results / "broken.json").write_text("{")
    (work / "runs" / "policy").mkdir(parents=True)
    (work / "runs" / "policy" / "weights.json").write_text("{}")  # never archived: model files stay behind
    (work / "stages.tsv").write_text("stage\tstatus\tseconds\tlimit_s\tnote\n"
                                     "preflight\tok\t12\t60\t\n"
                                     "grpo_sweep\tskipped\t0\t90\tits 90 s limit does not fit in the 3 s left\n")
    done = subprocess.run([sys.executable, "-I", str(BENCHMARKS / "gpu_summary.py"), str(work), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in out.iterdir()} == {"summary.md", "summary.json", "logs.tar.gz"}
    summary = json.loads((out / "summary.json").read_text())
    docs = summary["documents"]
    engine = json.loads((results / "generation_smollm2_engine.json").read_text())
    for row in engine["rows"]:  # the fractions of the measured ceilings, from the document's own numbers
        got = docs["generation_smollm2_engine"]["rows"][str(row["concurrency"])]
        weight_bytes = engine["roofline"]["weight_bytes"]
        assert got["of_copy_ceiling"] == pytest.approx(row["decode_steps"] * weight_bytes / row["time_s"] / 1e11)
        assert got["of_matmul_ceiling"] == pytest.approx(2 * weight_bytes / 4 * row["tokens_per_s"] / 1e12)
    training = docs["training_smollm2"]
    assert training["synthetic_lengths"] == {"prompt_tokens": 6, "response_tokens": 10}
    assert all(r["of_matmul_ceiling"] == pytest.approx(r["flops_per_s"] / 1e12) for r in training["rows"])
    assert docs["generation_qwen_engine"] == {"missing": "generation_qwen_engine.json was not written"}
    assert summary["grpo_sweep"]["missing"] == ["analysis.json was not written", "plan.json was not written"]
    assert {x["stage"]: x["status"] for x in summary["not_run_or_failed"]} == {"grpo_sweep": "skipped", "vllm": "skipped"}
    markdown = (out / "summary.md").read_text()
    knee = docs["generation_smollm2_engine"]["knee"]
    assert ("extrapolated: beyond the largest level measured, 2" if knee["extrapolated"] else "within the levels") \
        in markdown
    assert "random weights" in markdown and "grpo_sweep (skipped: its 90 s limit" in markdown
    assert "| 1 |" in markdown and "6 + 10 random tokens" in markdown
    import tarfile

    with tarfile.open(out / "logs.tar.gz") as tar:
        names = set(tar.getnames())
    assert "results/training_smollm2.json" in names and "stages.tsv" in names
    assert not any("policy" in name for name in names)


def test_summary_of_an_empty_run_names_what_is_missing(tmp_path):
    (tmp_path / "work").mkdir()
    assert gpu_summary.main([str(tmp_path / "work"), str(tmp_path / "out")]) == 0
    markdown = (tmp_path / "out" / "summary.md").read_text()
    assert "ceilings.json was not written" in markdown and "## CUDA tests (pytest -m gpu)\n\nnot run" in markdown


def junit(tmp_path: Path, passed: int, skipped: int, failed: int = 0) -> Path:
    cases = ["<testcase classname='t' name='p%d'/>" % i for i in range(passed)]
    cases += ["<testcase classname='t' name='s%d'><skipped message='no CUDA device'/></testcase>" % i
              for i in range(skipped)]
    cases += ["<testcase classname='t' name='f%d'><failure message='x'/></testcase>" % i for i in range(failed)]
    path = tmp_path / "tests.xml"
    path.write_text(f"<testsuites><testsuite tests='{passed + skipped + failed}' failures='{failed}' errors='0' "
                    f"skipped='{skipped}'>{''.join(cases)}</testsuite></testsuites>")
    return path


@pytest.mark.parametrize("device, passed, skipped, failed, verdict", [
    ("cuda", 8, 0, 0, None), ("cuda", 0, 8, 0, "8 of 8 skipped on a GPU: no CUDA device"),
    ("cuda", 7, 1, 0, "1 of 8 skipped"), ("cuda", 7, 0, 1, "1 failed: t::f0"), ("cuda", 0, 0, 0, "no test selected"),
    ("cpu", 0, 8, 0, None), ("cpu", 1, 7, 0, "1 ran without CUDA")])
def test_the_cuda_tests_verdict(tmp_path, device, passed, skipped, failed, verdict):
    got = gpu_summary.tests_verdict(gpu_summary.read_tests(junit(tmp_path, passed, skipped, failed)), device)
    assert got == verdict if verdict is None else verdict in got
    assert gpu_summary.main(["--tests", str(tmp_path / "tests.xml"), device]) == (0 if verdict is None else 1)


def test_the_preflight_names_a_missing_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "cuda", "13.0")  # a CUDA build on a machine whose GPU is gone
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(gpu_preflight.Unfit, match="CUDA: torch .* sees no GPU"):
        gpu_preflight.check_device({}, "cuda")
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(gpu_preflight.Unfit, match="not a CUDA build"):
        gpu_preflight.check_device({}, "cuda")
    facts = {}
    gpu_preflight.check_device(facts, "cpu")  # the rehearsal: said, not checked
    assert "forced to cpu" in facts["device_note"]


@pytest.mark.parametrize("requirement, message", [
    ("no-such-package>=1", "import no_such_package failed: ModuleNotFoundError"),
    ("numpy>=99", "numpy 2.")])
def test_the_preflight_names_a_missing_import_or_version(monkeypatch, requirement, message):
    monkeypatch.setattr(gpu_preflight, "project_requirements", lambda: ["scipy>=1", requirement])
    with pytest.raises(gpu_preflight.Unfit, match=message):
        gpu_preflight.check_packages({})


def test_the_preflight_passes_here_on_the_cpu(tmp_path):
    assert gpu_preflight.main([str(tmp_path), "cpu"]) == 0
    facts = json.loads((tmp_path / "preflight.json").read_text())
    assert facts["ok"] and facts["batchscale"].startswith(str(ROOT / "src")) and facts["tiny_model"].startswith("tiny-")


def test_the_carried_wheels_are_the_closure_of_what_the_image_lacks():
    env = gpu_wheels.target_environment("3.12")
    image = gpu_wheels.image_packages()
    assert "pydantic" not in image and image["transformers"] == "5.17.0" and image["typing-extensions"] is None
    carried = gpu_wheels.missing_closure(gpu_wheels.project_requirements(), image, env)
    # pydantic and what it needs; typing-extensions too, as pydantic needs a newer one than the image is known to hold
    assert set(carried) == {"pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions"}
    documented = {**image, "typing-extensions": "99.0"}
    assert "typing-extensions" not in gpu_wheels.missing_closure(gpu_wheels.project_requirements(), documented, env)


def fake_wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", "Name: x\n" + "".join(f"Requires-Dist: {r}\n"
                                                                                      for r in requires))
    return path


def test_the_wheel_folder_is_checked_one_version_each_and_nothing_left_out(tmp_path):
    env, image = gpu_wheels.target_environment("3.12"), {"numpy": None}
    fake_wheel(tmp_path, "alpha", "1.0", "numpy", "beta>=2; python_version < '3.0'")
    assert [p.name for p in gpu_wheels.check(tmp_path, {"alpha": "1.0"}, image, env)] == ["alpha-1.0-py3-none-any.whl"]
    fake_wheel(tmp_path, "alpha", "0.9")
    with pytest.raises(gpu_wheels.WheelError, match="exactly one wheel of alpha"):
        gpu_wheels.check(tmp_path, {"alpha": "1.0"}, image, env)
    (tmp_path / "alpha-0.9-py3-none-any.whl").unlink()
    fake_wheel(tmp_path, "gamma", "1.0", "delta")
    with pytest.raises(gpu_wheels.WheelError, match="does not need"):
        gpu_wheels.check(tmp_path, {"alpha": "1.0"}, image, env)
    with pytest.raises(gpu_wheels.WheelError, match="requires delta, neither carried"):
        gpu_wheels.check(tmp_path, {"alpha": "1.0", "gamma": "1.0"}, image, env)


def test_what_comes_back_is_checked_against_the_device_limits(tmp_path):
    for i in range(9):
        (tmp_path / f"f{i}.txt").write_text("x")
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c" / "deep.txt").write_text("x")
    (tmp_path / "bad name.txt").write_text("x")
    problems = "; ".join(gpu_rehearsal.what_comes_back(tmp_path))
    assert "11 files, at most 8" in problems and "3 folders down" in problems and "bad name.txt has a name" in problems


def test_readme_and_benchmarks_give_the_device_command_within_its_limits():
    command = gpu_rehearsal.DEVICE_COMMAND
    assert len(command) < 2000
    for doc in ("README.md", "BENCHMARKS.md"):
        text = (ROOT / doc).read_text()
        assert f"command='{command}'" in text and "carry=[\".whl\"]" in text and "timeout_s=420" in text, doc
        assert f"GPU_CHECK_STAGES=generation_smollm2_hf {command}" in text, doc
    assert "gpu-rehearsal:" in (ROOT / "Makefile").read_text() and "gpu-wheels:" in (ROOT / "Makefile").read_text()


@pytest.mark.slow
def test_the_cpu_rehearsal_passes(tmp_path):
    """`make gpu-rehearsal`: the device's command in an imitation of its environment, both failure paths and the size
    limits (minutes on 2 cores; it needs PyPI once for the wheels, like `make install`)."""
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_rehearsal.py"), "--keep", str(tmp_path)],
                          capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " 0 failed in " in done.stdout.splitlines()[-1]
