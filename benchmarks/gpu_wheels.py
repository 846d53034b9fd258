"""Fill `.whl/` with exactly the wheels the lent GPU machine lacks, for its Python (3.12, manylinux x86_64).

That machine reaches no package registry; its python3 already holds torch, transformers and most of what batchscale
needs (benchmarks/gpu_image.txt, from the device documentation), but not pydantic. What is missing travels with the
working tree as wheels in the ignored `.whl/` (64 MiB travel in all, the tree included), and benchmarks/gpu_check.sh
installs them there with `pip install --no-index --no-deps --target`.

What is missing: batchscale's runtime requirements (pyproject.toml) that the image does not hold, and everything those
require in turn (Requires-Dist of the versions installed here, markers evaluated for the target Python, extras left
out) that the image does not hold either, or may hold in too old a version: a carried package's requirement with a
version bound is carried too unless the image's documented version satisfies it (pydantic 2.14 needs
typing-extensions >= 4.16, a July 2026 release, and the image's version is not documented). Each is pinned to the
version installed here (the one the tests ran with) and downloaded with the device documentation's `pip download
--only-binary=:all: --platform ...` command. Afterwards every wheel's own METADATA is read again: a requirement neither
carried nor in the image is an error, and so is a second version of one package (two stop the whole install there).

    .venv/bin/python benchmarks/gpu_wheels.py                       # .whl/ for the GPU (cp312)
    .venv/bin/python benchmarks/gpu_wheels.py --python-version 3.11 --dest DIR   # the CPU rehearsal's (cp311)
    .venv/bin/python benchmarks/gpu_wheels.py --list                # what would be carried; downloads nothing

Exit 2 with one `error:` line when a wheel cannot be had or the set is inconsistent. Never deletes a file.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parent.parent
IMAGE = Path(__file__).resolve().parent / "gpu_image.txt"
# manylinux tags pip matches exactly (the device documentation's list, plus the glibc versions wheels often name)
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_24_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64",
             "manylinux_2_35_x86_64"]


class WheelError(Exception):
    pass


def image_packages(path: Path = IMAGE) -> dict[str, str | None]:
    """{canonical name: documented version, None when the documentation gives none} of the GPU image's packages."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    pairs = (line.partition("==") for line in lines if line)
    return {canonicalize_name(name): version or None for name, _, version in pairs}


def project_requirements(root: Path = ROOT) -> list[Requirement]:
    with (root / "pyproject.toml").open("rb") as f:
        return [Requirement(text) for text in tomllib.load(f)["project"]["dependencies"]]


def target_environment(python_version: str) -> dict[str, str]:
    """Marker values of the target: CPython `python_version` on Linux x86_64."""
    return {**default_environment(), "python_version": python_version, "python_full_version": f"{python_version}.0",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def applies(requirement: Requirement, environment: dict[str, str]) -> bool:
    """A requirement of the plain install: its marker holds on the target and names no extra."""
    if requirement.marker is None:
        return True
    return requirement.marker.evaluate({**environment, "extra": ""})


def image_satisfies(requirement: Requirement, image: dict[str, str | None]) -> bool:
    """The image holds the package, in a version known to satisfy the requirement's bound (if it has one)."""
    name = canonicalize_name(requirement.name)
    if name not in image:
        return False
    if not requirement.specifier:
        return True
    return image[name] is not None and requirement.specifier.contains(image[name], prereleases=True)


def missing_closure(requirements: list[Requirement], image: dict[str, str | None],
                    environment: dict[str, str]) -> dict[str, str]:
    """{canonical name: version installed here} of every requirement the image lacks, and of theirs in turn (theirs
    also where the image's version is not known to satisfy their bound). The project's own bounds are modest and
    checked on the GPU by the preflight."""
    carried: dict[str, str] = {}
    queue = [(r, True) for r in requirements if applies(r, environment)]
    while queue:
        requirement, ours = queue.pop(0)
        name = canonicalize_name(requirement.name)
        if name in carried or (name in image if ours else image_satisfies(requirement, image)):
            continue
        try:
            distribution = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            raise WheelError(f"{requirement.name} is needed on the GPU but not installed here, so no version to pin "
                             f"(make install)") from None
        carried[name] = distribution.version
        queue += [(r, False) for r in map(Requirement, distribution.requires or []) if applies(r, environment)]
    return carried


def download(name: str, version: str, dest: Path, python_version: str) -> None:
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
               "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", *platforms,
               "-d", str(dest), f"{name}=={version}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise WheelError(f"pip download {name}=={version} for Python {python_version} failed: {last}")


def wheels_in(dest: Path) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in sorted(dest.glob("*.whl")):
        found.setdefault(canonicalize_name(parse_wheel_filename(path.name)[0]), []).append(path)
    return found


def wheel_requirements(path: Path) -> list[Requirement]:
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        text = archive.read(name).decode()
    return [Requirement(line.split(":", 1)[1].strip()) for line in text.splitlines()
            if line.startswith("Requires-Dist:")]


def check(dest: Path, carried: dict[str, str], image: dict[str, str | None], environment: dict[str, str]) -> list[Path]:
    """The wheels of `carried` in `dest`: one version each, the pinned one, and nothing they need left out."""
    found = wheels_in(dest)
    extra = [p.name for name, paths in found.items() if name not in carried for p in paths]
    if extra:
        raise WheelError(f"{dest} holds wheels the GPU does not need ({', '.join(extra)}): remove them, since the "
                         f"install there takes every wheel in the folder")
    wheels = []
    for name, version in carried.items():
        paths = found.get(name, [])
        if len(paths) != 1 or parse_wheel_filename(paths[0].name)[1].public != version:
            raise WheelError(f"{dest} should hold exactly one wheel of {name}, version {version}; it holds "
                             f"{[p.name for p in paths] or 'none'}: remove the others")
        for requirement in wheel_requirements(paths[0]):
            needed = canonicalize_name(requirement.name)
            if applies(requirement, environment) and needed not in carried and not image_satisfies(requirement, image):
                raise WheelError(f"{paths[0].name} requires {requirement}, neither carried nor known to be in the GPU "
                                 f"image in that version")
        wheels.append(paths[0])
    return wheels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=ROOT / ".whl", help="the folder (default: .whl, ignored by git)")
    parser.add_argument("--python-version", default="3.12", help="the target's Python (the GPU's: 3.12)")
    parser.add_argument("--list", action="store_true", help="print what would be carried, download nothing")
    args = parser.parse_args(argv)
    environment = target_environment(args.python_version)
    try:
        image = image_packages()
        carried = missing_closure(project_requirements(), image, environment)
        if args.list:
            print("\n".join(f"{name}=={version}" for name, version in carried.items()))
            return 0
        args.dest.mkdir(parents=True, exist_ok=True)
        have = wheels_in(args.dest)
        for name, version in carried.items():
            if not any(parse_wheel_filename(p.name)[1].public == version for p in have.get(name, [])):
                download(name, version, args.dest, args.python_version)
        wheels = check(args.dest, carried, image, environment)
    except WheelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in wheels)
    for path in wheels:
        print(f"{path.stat().st_size / 2**20:7.2f} MiB  {path.name}")
    print(f"{size / 2**20:7.2f} MiB  in {len(wheels)} wheels for Python {args.python_version} in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
