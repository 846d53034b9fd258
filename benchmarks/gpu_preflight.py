"""The GPU check's first stage: can every later stage run here? Writes RESULTS/preflight.json; exit 1 with the reason.

Run by benchmarks/gpu_check.sh on the lent machine's own python3 (its torch, transformers and the rest of its image,
plus the wheels carried in .whl/, installed with pip --no-index --target) with PYTHONPATH=src:<those wheels>. Checks,
in order, and stops at the first that fails:
1. every third-party package batchscale needs imports, in a version its pyproject.toml accepts (torch excepted: the
   pin torch==2.13.0 is for pip on CPU; the machine's own CUDA build is the one to measure), and every carried
   wheel's own requirements are met by what is importable;
2. batchscale imports from this tree's src/ (not some installed copy), with the modules the stages use;
3. the device: with `cuda`, torch is a CUDA build, sees a GPU with bf16, and a matrix product on it agrees with the
   CPU's; with `cpu` (the CPU rehearsal) this is skipped and said;
4. the warm-started tiny model shipped in src/ passes its sha256 check (else every run would warm-start it anew).
Stdlib until step 1 succeeds, so a missing package is one line naming it, not a traceback.

    python3 benchmarks/gpu_preflight.py RESULTS_DIR cuda|cpu
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import json
import os
import platform
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORT_NAMES = {"pyyaml": "yaml"}  # distribution -> module, where they differ
STAGE_MODULES = ["batchscale.cli", "batchscale.profile.generation", "batchscale.profile.training",
                 "batchscale.train.loop", "batchscale.sweep.runner", "batchscale.analysis.analyze",
                 "batchscale.plan.make"]


class Unfit(Exception):
    """Why the later stages cannot run here: one line, with what to do."""


def project_requirements() -> list[str]:
    import tomllib

    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]["dependencies"]


def check_packages(facts: dict) -> None:
    """Import each requirement; with `packaging` (in the image), check its version and the carried wheels' needs."""
    facts["packages"] = {}
    for text in project_requirements():
        name = re.match(r"[A-Za-z0-9_.-]+", text).group(0)
        module = IMPORT_NAMES.get(name.lower(), name.replace("-", "_"))
        try:
            importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - any failure to import is the finding
            carry = "" if name == "torch" else " (carry it: benchmarks/gpu_wheels.py fills .whl/, which must travel)"
            raise Unfit(f"import {module} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}{carry}") from None
        facts["packages"][name] = metadata.version(name)
    try:
        from packaging.requirements import Requirement
    except ImportError:
        raise Unfit("import packaging failed: the version checks need it (the GPU image holds it)") from None
    for text in project_requirements():
        requirement = Requirement(text)
        version = facts["packages"][requirement.name]
        if requirement.name != "torch" and not requirement.specifier.contains(version, prereleases=True):
            raise Unfit(f"{requirement.name} {version} is here, batchscale needs {requirement} (carry a wheel of a "
                        f"version that fits: benchmarks/gpu_wheels.py)")
    site = os.environ.get("GPU_CHECK_SITE")  # where gpu_check.sh installed the carried wheels
    carried = [d for d in metadata.distributions() if site and Path(str(d.locate_file(""))) == Path(site)]
    facts["carried"] = {d.metadata["Name"]: d.version for d in carried}
    for distribution in carried:
        for requirement in map(Requirement, distribution.requires or []):
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            try:
                version = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                version = None
            if version is None or not requirement.specifier.contains(version, prereleases=True):
                raise Unfit(f"carried {distribution.metadata['Name']} needs {requirement}, here "
                            f"{version or 'missing'}: add it to the carried wheels (benchmarks/gpu_wheels.py)")


def check_batchscale(facts: dict) -> None:
    import batchscale

    where = Path(batchscale.__file__).resolve()
    facts["batchscale"] = str(where)
    if ROOT / "src" not in where.parents:
        raise Unfit(f"batchscale imports from {where}, not from this tree's src/ (PYTHONPATH must start with src)")
    for module in STAGE_MODULES:
        try:
            importlib.import_module(module)
        except Exception as e:  # noqa: BLE001
            raise Unfit(f"import {module} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}") from None


def check_device(facts: dict, device: str) -> None:
    import torch

    facts["torch"] = torch.__version__
    facts["torch_cuda"] = torch.version.cuda
    if device == "cpu":
        facts["device_note"] = "device forced to cpu (the CPU rehearsal): no CUDA check"
        return
    if torch.version.cuda is None:
        raise Unfit(f"torch {torch.__version__} is not a CUDA build: run on the GPU machine's own python3")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        raise Unfit(f"CUDA: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU on this machine")
    facts["gpu"] = torch.cuda.get_device_name(0)
    facts["capability"] = list(torch.cuda.get_device_capability(0))
    facts["gpu_memory_gib"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    if not torch.cuda.is_bf16_supported():
        raise Unfit(f"{facts['gpu']} has no bf16 support: the check measures bf16 decode and training")
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=gen), torch.randn(256, 256, generator=gen)
    expected = a.double() @ b.double()
    got = (a.cuda() @ b.cuda()).double().cpu()  # float32 on the GPU (TF32 may be on: well within 1e-2)
    error = float((got - expected).norm() / expected.norm())
    facts["matmul_relative_error"] = error
    if not error < 1e-2:
        raise Unfit(f"a float32 matrix product on {facts['gpu']} is off by {error:.3g} (relative): the GPU is unwell")


def check_tiny_model(facts: dict) -> None:
    from batchscale.config import TaskConfig
    from batchscale.policy import shipped
    from batchscale.policy.tiny import content_hash, task_fields_of

    name = f"tiny-{content_hash(task_fields_of(TaskConfig()))}"
    source = shipped.shipped_dir(name)
    problem = f"no shipped copy {name} in src/batchscale/policy/shipped" if source is None else shipped.problem(source)
    if problem:
        raise Unfit(f"the tiny model's shipped copy is unusable ({problem}): every run would warm-start it anew")
    facts["tiny_model"] = name


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in ("cuda", "cpu"):
        print("usage: gpu_preflight.py RESULTS_DIR cuda|cpu", file=sys.stderr)
        return 2
    results, device = Path(argv[0]), argv[1]
    facts = {"python": platform.python_version(), "executable": sys.executable, "device": device, "ok": False}
    try:
        check_packages(facts)
        check_batchscale(facts)
        check_device(facts, device)
        check_tiny_model(facts)
        facts["ok"] = True
    except Unfit as e:
        facts["reason"] = str(e)
    results.mkdir(parents=True, exist_ok=True)
    (results / "preflight.json").write_text(json.dumps(facts, indent=2) + "\n")
    if not facts["ok"]:
        print(f"preflight: {facts['reason']}", file=sys.stderr)
        return 1
    print(f"preflight: ok: Python {facts['python']}, torch {facts['torch']}, "
          f"{facts.get('gpu') or facts.get('device_note')}; carried {facts['carried']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
