"""The warm-started tiny model a package may ship, so that an install from it needs no warm start.

`policy/shipped/tiny-<content_hash>/` holds the default task's model exactly as `build_tiny` saves it (float32
weights, tokenizer, warm_start.json) plus SHIPPED.json: the machine it was built on (CPU model and flags, torch and
transformers versions), when it was built and shipped, its greedy accuracy, and the sha256 of every file. A copy is
used only when it passes that check (`problem`); `install` copies it into the cache directory `build_tiny` builds into,
and checks the copies again.

Git holds the default task's copy (12.8 MB of float32, built once on one machine), so that every clone and every
CPU starts the demo from the same weights: a warm start from the recipe lands anywhere in its accuracy band
depending on the CPU's rounding (0.273 / 0.324 / 0.344 on three machines), and the demo's answer with it.
`python -m batchscale.policy.tiny --ship` regenerates it after a recipe change (a build from the recipe in a
temporary cache; `--from DIR` ships a model directory already built by the current recipe), and a wheel ships it as
package data (pyproject.toml).
"""

from __future__ import annotations

import datetime
import json
import platform
import shutil
from pathlib import Path

from batchscale.files import sha256_file, staged_directory

SHIPPED_ROOT = Path(__file__).parent / "shipped"
RECORD = "SHIPPED.json"
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "warm_start.json")
REBUILD_ENV = "BATCHSCALE_TINY_BUILD"  # "1": build the tiny model from the recipe, not from the shipped copy


def shipped_dir(name: str, root: Path | None = None) -> Path | None:
    """The shipped model directory called `name` (tiny-<content_hash>) under `root` (default: the package's), None
    when none by that name is shipped."""
    path = Path(root or SHIPPED_ROOT) / name
    return path if path.is_dir() else None


def read_record(path: Path) -> dict:
    return json.loads((Path(path) / RECORD).read_text())


def problem(path: Path) -> str | None:
    """Why the shipped copy at `path` must not be used (a file missing, or not the one its record names), None when
    every file matches the sha256 in SHIPPED.json."""
    path = Path(path)
    try:
        expected = read_record(path)["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{path / RECORD} is unreadable ({e})"
    for name in FILES:
        if name not in expected:
            return f"{path / RECORD} records no sha256 for {name}"
        if not (path / name).is_file():
            return f"{path / name} is missing"
        if sha256_file(path / name) != expected[name]:
            return f"{path / name} does not match the sha256 in {RECORD}"
    return None


def install(source: Path, staging: Path) -> None:
    """Copy the shipped model at `source` into `staging` (the directory build_once renames into the cache), SHIPPED.json
    included (it says where the cached copy came from); raises when a copied file is not the recorded one."""
    for name in (*FILES, RECORD):
        shutil.copyfile(Path(source) / name, Path(staging) / name)
    bad = problem(staging)
    if bad is not None:
        raise OSError(f"copying the shipped tiny model: {bad}")


def describe(record: dict) -> str:
    """"<cpu>, greedy accuracy 0.344", for the line that says the shipped copy is used."""
    machine = record.get("built_on", {})
    return f"built on {machine.get('cpu_model') or 'an unnamed CPU'}, greedy accuracy {record.get('accuracy', 0):.3f}"


def machine_facts() -> dict:
    """This machine as a shipped model records it: CPU model, the flags that choose kernel paths, all CPU flags, the
    torch CPU capability, and the versions that produce the weights."""
    import torch
    import transformers

    from batchscale.cpu import cpu_flags, cpu_model, kernel_flags

    return {"cpu_model": cpu_model(), "kernel_flags": " ".join(kernel_flags()),
            "cpu_flags": " ".join(sorted(f for f in cpu_flags() if f not in ("flags", ":"))),  # less the line's label
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}


def ship(built: Path, name: str, root: Path | None = None, content_hash: str | None = None) -> Path:
    """Copy the model directory `built` (built by the recipe on this machine) into `root`/`name` with its SHIPPED.json,
    replacing any copy of that name, and remove the other shipped tiny-* copies (one recipe, one copy)."""
    built, root = Path(built), Path(root or SHIPPED_ROOT)
    missing = [n for n in FILES if not (built / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{built} lacks {', '.join(missing)}: not a built tiny model directory")
    warm = json.loads((built / "warm_start.json").read_text())
    built_at = datetime.datetime.fromtimestamp((built / "model.safetensors").stat().st_mtime, datetime.timezone.utc)
    with staged_directory(root / name, "shipping") as staging:
        for n in FILES:
            shutil.copyfile(built / n, staging / n)
        record = {"name": name, "content_hash": content_hash or name.removeprefix("tiny-"),
                  "accuracy": warm["accuracy"], "steps": warm["steps"], "learned_at": warm["learned_at"],
                  "built_on": machine_facts(), "built_at": built_at.isoformat(timespec="seconds"),
                  "shipped_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "sha256": {n: sha256_file(staging / n) for n in FILES}}
        (staging / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    for other in root.glob("tiny-*"):
        if other.is_dir() and other.name != name:
            shutil.rmtree(other)
    return root / name
