"""`make gpu-rehearsal`: benchmarks/gpu_check.sh rehearsed on this CPU, in an environment like the lent GPU machine's.

The GPU machine runs the check on its own python3, whose packages are the image's (benchmarks/gpu_image.txt), with no
registry: batchscale comes from src/ on PYTHONPATH and what the image lacks from the wheels carried in .whl/. Here:
1. .whl/ is filled for the GPU (Python 3.12; benchmarks/gpu_wheels.py) and what would travel is counted: tracked and
   untracked-not-ignored files, a shared/ folder in the checkout, and the carried .whl/, under the 64 MiB limit;
2. a fresh venv without pip or site packages gets links to only the image's packages installed in this project's
   .venv (and what they need), never the ones the GPU must be sent (pydantic, ...): those come, as there, from
   wheels installed by the check with pip --no-index --no-deps --target (built here for this Python, 3.11); what
   batchscale calls directly (transformers, huggingface-hub, tokenizers, safetensors) is installed instead in the
   version the image documents (transformers 5.17.0);
3. the device's command runs in it with small sizes (training and the qwen stages on llama-10m: an update of a 135M or
   494M model takes tens of seconds on 2 shared cores), the device forced to cpu and the limits scaled: every stage
   must pass, $OUT must hold exactly its 4 files within the limits of what comes back (8 files, 2 folders down, plain
   names, 16 MiB each) and the output must end with the summary;
4. both failure paths: no GPU (the device left at cuda: torch here is a CPU build) and a missing import (no carried
   wheels): the preflight must stop every later stage with that reason, and the summary must still be written.
Departures from the GPU machine, said in the report: torch 2.13.0+cpu (there 2.11.0+cu130, a CUDA build: the API
batchscale uses exists in both), this .venv's numpy, Python 3.11 (there 3.12.3), the CPU, and the sizes.

    .venv/bin/python benchmarks/gpu_rehearsal.py [--keep DIR]    exit 0 when every check passed
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_wheels  # noqa: E402  (beside this file)

ROOT = Path(__file__).resolve().parent.parent
DEVICE_COMMAND = 'bash benchmarks/gpu_check.sh "$OUT"'  # README "On a GPU": the run tool's command, carry [".whl"]
CARRY = [".whl"]
TRAVEL_LIMIT = 64 * 2**20
BACK_FILES, BACK_DEPTH, BACK_FILE_BYTES, BACK_BYTES = 8, 2, 16 * 2**20, 64 * 2**20
OUT_FILES = {"summary.md", "summary.json", "stages.tsv", "logs.tar.gz"}
# what batchscale calls directly, installed in the image's documented version (torch cannot be: the image's is a CUDA
# build; numpy stays this .venv's, since scipy and torch here are built against it)
AS_IN_THE_IMAGE = ("transformers", "huggingface-hub", "tokenizers", "safetensors")
STAGES = ["preflight", "ceilings", "gpu_tests", "generation_smollm2_engine", "generation_smollm2_hf", "training_smollm2",
          "grpo_sweep", "generation_qwen_engine", "training_qwen", "generation_qwen_hf"]


class Checks:
    def __init__(self):
        self.results: list[tuple[bool, str]] = []

    def check(self, ok: bool, what: str) -> bool:
        self.results.append((bool(ok), what))
        print(f"{'PASS' if ok else 'FAIL'}  {what}", flush=True)
        return bool(ok)


def travel_bytes(root: Path, carry: list[str]) -> dict:
    """What a run call sends: tracked and untracked-not-ignored files, shared/ in the checkout, the carried paths."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    tree = sum(os.lstat(root / name).st_size for name in set(listed) if name and os.path.lexists(root / name))
    extra = {}
    for name in [*carry, "shared"]:
        path = root / name
        extra[name] = sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir()) if path.is_dir() else 0
    return {"tree": tree, **extra, "total": tree + sum(extra.values())}


def what_comes_back(out: Path) -> list[str]:
    """How $OUT breaks the limits of what comes back from the device machine (none: an empty list)."""
    problems, files = [], [p for p in out.rglob("*") if not p.is_dir()]
    if len(files) > BACK_FILES:
        problems.append(f"{len(files)} files, at most {BACK_FILES} come back")
    for path in files:
        relative = path.relative_to(out)
        if len(relative.parts) - 1 > BACK_DEPTH:
            problems.append(f"{relative} is {len(relative.parts) - 1} folders down, at most {BACK_DEPTH}")
        if not all(re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in relative.parts):
            problems.append(f"{relative} has a name other than letters, digits, '.', '_' and '-'")
        if path.is_symlink() or path.stat().st_size > BACK_FILE_BYTES:
            problems.append(f"{relative} is a link or over 16 MiB")
    if sum(p.stat().st_size for p in files) > BACK_BYTES:
        problems.append("over 64 MiB together")
    return problems


def exposed_distributions(carried: dict[str, str]) -> list[metadata.Distribution]:
    """This environment's distributions that the GPU image holds, and what they need, less what the GPU is sent and
    the image lacks (one it holds in a version too old for a carried wheel, typing-extensions, stays: the carried one
    shadows it there as here)."""
    image = gpu_wheels.image_packages()
    carried = {name: version for name, version in carried.items() if name not in image}
    installed = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
    queue = [name for name in image if name in installed]
    exposed: dict[str, metadata.Distribution] = {}
    while queue:
        name = queue.pop()
        if name in exposed or name in carried or name not in installed:
            continue
        exposed[name] = installed[name]
        for requirement in map(Requirement, installed[name].requires or []):
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                queue.append(canonicalize_name(requirement.name))
    return list(exposed.values())


def imitation_python(where: Path, carried: dict[str, str], python_version: str) -> Path:
    """A venv without pip or site packages, given links to the exposed distributions' top-level files only, except
    the packages batchscale calls directly whose version the image documents: those are installed in that version."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    python = where / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    image, wheels = gpu_wheels.image_packages(), where.parent / "image-wheels"
    pinned = {name: image[name] for name in AS_IN_THE_IMAGE
              if image.get(name) and metadata.version(name) != image[name]}
    for name, version in pinned.items():
        gpu_wheels.download(name, version, wheels, python_version)
    if pinned:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                        "--no-deps", "--target", str(site), *map(str, wheels.glob("*.whl"))], check=True)
    for distribution in exposed_distributions(carried):
        if canonicalize_name(distribution.metadata["Name"]) in pinned:
            continue
        for file in distribution.files or []:
            top = file.parts[0]
            if top == ".." or top.endswith(".egg-link") or top == "__pycache__" or (site / top).exists():
                continue
            (site / top).symlink_to(Path(distribution.locate_file(top)))
    return python


def run_check(env: dict, out: Path, checks: Checks, label: str, timeout_s: float) -> tuple[int, str]:
    began = time.monotonic()
    done = subprocess.run(["bash", "-c", DEVICE_COMMAND], cwd=ROOT, env={**env, "OUT": str(out)}, capture_output=True,
                          text=True, timeout=timeout_s)
    print(f"      {label}: exit {done.returncode} in {time.monotonic() - began:.0f} s "
          f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    problems = what_comes_back(out)
    checks.check(not problems, f"{label}: $OUT is within what comes back ({'; '.join(problems) or 'ok'})")
    checks.check({p.name for p in out.iterdir()} == OUT_FILES, f"{label}: $OUT holds exactly {sorted(OUT_FILES)}")
    summary = (out / "summary.md").read_text() if (out / "summary.md").is_file() else "\0"
    checks.check(done.stdout.endswith(summary), f"{label}: the output ends with the summary")
    return done.returncode, done.stderr


def stage_rows(out: Path) -> dict[str, dict]:
    lines = (out / "stages.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    return {row["stage"]: row for row in (dict(zip(header, line.split("\t"))) for line in lines[1:])}


def check_happy_path(env: dict, out: Path, checks: Checks) -> None:
    code, stderr = run_check(env, out, checks, "rehearsal", 3000)
    rows = stage_rows(out)
    bad = {name: f"{row['status']}: {row['note']}" for name, row in rows.items() if row["status"] != "ok"}
    checks.check(code == 0 and list(rows) == STAGES and not bad, f"rehearsal: every stage ok ({bad or 'yes'})")
    summary = json.loads((out / "summary.json").read_text())
    docs = summary["documents"]
    checks.check(all("rows" in docs[name] for name in docs), "rehearsal: every profile summarized "
                 f"({ {name: doc['missing'] for name, doc in docs.items() if 'missing' in doc} or 'yes'})")
    engine = docs["generation_smollm2_engine"]
    fractions = [(r["of_copy_ceiling"], r["of_matmul_ceiling"]) for r in engine.get("rows", {}).values()]
    checks.check(fractions and all(copy and matmul for copy, matmul in fractions),
                 "rehearsal: generation rows carry the fraction of both ceilings measured in the run")
    checks.check("extrapolated" in engine.get("knee_text", "") or "within" in engine.get("knee_text", ""),
                 "rehearsal: the knee is printed with its extrapolated flag")
    training = docs["training_smollm2"]
    checks.check(training.get("synthetic_lengths") == {"prompt_tokens": 4, "response_tokens": 8},
                 "rehearsal: training ran on the given sequence lengths")
    checks.check("best" in summary["grpo_sweep"] and "labels" in summary["grpo_sweep"],
                 "rehearsal: the GRPO sweep was analysed and planned")
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    checks.check("logs/preflight.log" in names and "results/plan.json" in names
                 and not any("policy" in n.split("/") for n in names), "rehearsal: the archive holds logs and results, "
                 "no model weights")


def check_failure(env: dict, out: Path, checks: Checks, label: str, expect: str) -> None:
    code, _ = run_check(env, out, checks, label, 600)
    rows = stage_rows(out)
    preflight = rows.get("preflight", {})
    later = [row for name, row in rows.items() if name != "preflight"]
    checks.check(code != 0 and preflight.get("status") == "failed" and expect in preflight.get("note", ""),
                 f"{label}: the preflight fails naming '{expect}' ({preflight.get('note', 'no row')[:160]})")
    checks.check(len(later) == len(STAGES) - 1 and all(r["status"] == "skipped" and r["note"].startswith(
        "preflight failed: ") for r in later), f"{label}: every later stage is skipped with the preflight's reason")
    checks.check(expect in (out / "summary.md").read_text(), f"{label}: the summary names the reason")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="keep the rehearsal's folders here (default: a temporary one)")
    args = parser.parse_args(argv)
    checks, began = Checks(), time.monotonic()
    print(f"gpu rehearsal: Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}", flush=True)
    if gpu_wheels.main([]) != 0:
        return checks.check(False, "the GPU's wheels (.whl, Python 3.12) could be had") or 1
    sizes = travel_bytes(ROOT, CARRY)
    checks.check(sizes["total"] < TRAVEL_LIMIT, f"what travels: tree {sizes['tree'] / 2**20:.1f} MiB + .whl "
                 f"{sizes['.whl'] / 2**20:.1f} MiB + shared/ {sizes['shared'] / 2**20:.1f} MiB = "
                 f"{sizes['total'] / 2**20:.1f} MiB, under 64 MiB")
    base = Path(args.keep or tempfile.mkdtemp(prefix="gpu_rehearsal."))
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    wheels = base / f"whl-cp{here.replace('.', '')}"
    if gpu_wheels.main(["--python-version", here, "--dest", str(wheels)]) != 0:
        return checks.check(False, f"the rehearsal's wheels (Python {here}) could be had") or 1
    carried = gpu_wheels.missing_closure(gpu_wheels.project_requirements(), gpu_wheels.image_packages(),
                                         gpu_wheels.target_environment(here))
    python = imitation_python(base / "python", carried, here)
    probe = subprocess.run([python, "-c", "import torch, transformers, scipy, typer\ntry:\n import pydantic\nexcept "
                            "ImportError:\n print('no pydantic', transformers.__version__)"],
                           capture_output=True, text=True)
    image = gpu_wheels.image_packages()
    if not checks.check(probe.stdout.strip() == f"no pydantic {image['transformers']}", "the imitation python has the "
                        f"image's packages, transformers {image['transformers']} among them, and not the carried ones "
                        f"({probe.stdout.strip() or probe.stderr.strip()[-200:]})"):
        return 1
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if Path(sys.prefix) not in Path(p).parents)  # no `python3` of this .venv
    env = {key: value for key, value in os.environ.items() if not key.startswith(("GPU_CHECK_", "BATCHSCALE_"))
           and key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=path, GPU_CHECK_PYTHON=str(python), GPU_CHECK_DEVICE="cpu", GPU_CHECK_SIZE="small",
               GPU_CHECK_WHEELS=str(wheels), GPU_CHECK_HARDWARE="H200", GPU_CHECK_LIMIT_SCALE="6",
               GPU_CHECK_BUDGET_S="3000")
    empty = base / "no-wheels"
    empty.mkdir(exist_ok=True)
    check_failure({**env, "GPU_CHECK_DEVICE": "cuda", "GPU_CHECK_WORK": str(base / "work-no-gpu")},
                  base / "out-no-gpu", checks, "no GPU", "CUDA build")
    check_failure({**env, "GPU_CHECK_WHEELS": str(empty), "GPU_CHECK_WORK": str(base / "work-no-wheels")},
                  base / "out-no-wheels", checks, "missing import", "import pydantic failed")
    check_happy_path({**env, "GPU_CHECK_WORK": str(base / "work")}, base / "out", checks)
    if (base / "out" / "summary.md").is_file():
        print("\n" + (base / "out" / "summary.md").read_text())
    failed = [what for ok, what in checks.results if not ok]
    print(f"differs from the GPU machine: torch {metadata.version('torch')} (there 2.11.0+cu130), numpy "
          f"{metadata.version('numpy')} (there {image['numpy']}), Python {here} (there 3.12.3), the CPU, small sizes; "
          f"as there: {', '.join(f'{name} {image[name]}' for name in AS_IN_THE_IMAGE)}")
    print(f"gpu rehearsal: {len(checks.results) - len(failed)} passed, {len(failed)} failed in "
          f"{time.monotonic() - began:.0f} s (load average {os.getloadavg()[0]:.1f}); folders in {base}")
    if args.keep is None and not failed:
        shutil.rmtree(base)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
