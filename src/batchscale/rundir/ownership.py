"""What batchscale may replace or delete: only a directory it wrote, holding only what it wrote there.

    <dir>/.batchscale   {"kind": "run" | "sweep" | "export" | "demo" | "analysis", "written_by": "batchscale",
                         "directory": <the directory's inode number>}

Every directory batchscale creates gets this marker, naming its kind. `directory` is the field batchscale alone sets:
the inode number of the directory the marker was written into, so a marker is batchscale's only in the directory
batchscale wrote it in. A marker written by hand, or copied with a directory's content into another (`cp -r`), names
another inode and is no marker: that directory is then judged by its content alone, as a pre-marker one (below).
Renaming a directory, even in a move, keeps its inode on one file system. A `.batchscale` that is not a regular file
(a directory, a link, a FIFO) is not batchscale's, and counts as an entry batchscale did not write. `--overwrite` replaces a directory only when
(1) its marker names the kind the command writes (a run for `train` and `import`, an export for `export`), and
(2) every entry in its whole tree is one batchscale writes into a directory of that kind: the top level
(`KIND_ENTRIES`), a directory only where batchscale makes one (`DIRECTORY_ENTRIES`), and in checkpoints/ and policy/
only what batchscale writes there (`foreign_tree`). Any other entry stops the overwrite, which keeps every such entry
by refusing, listing them. Inputs of the command that lie inside the target stop it too.

Directories written before the marker existed are recognised strictly, by their whole content (`directory_kind`):
- a run: run.json and metrics.jsonl are regular files and every entry is a run entry (tracker stores, mlruns/ and
  wandb/, came after the marker: in a directory without one they are the user's own);
- a sweep: every entry is a sweep entry, and runs/ is a directory, or sweep.lock a regular file (a sweep that locked
  it before writing anything: the lock then names its holder), or sweep.json a sweep's document (its points are
  {name, label, seed}); a sweep only ever deletes staging names and unfinished runs of its own under runs/;
- a demo: as a sweep, and sweep.toml starts with the line the demo writes;
- an export: sweep.json and README.md are regular files, README.md starts with the export's title and holds its
  "Exported by `batchscale export" line, and every entry is an export entry.
A user's folder that merely holds a run.json or a sweep.json among its own files is none of these.

The marker is read as hostile input: a regular file (never a link) of at most MARKER_MAX_BYTES, a JSON object naming a
known kind; anything else counts as no marker. Symbolic links given as an output are followed to their target
(files.resolve_out): the target is what is checked and replaced, and the link is kept.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import write_json_atomic

MARKER_FILE = ".batchscale"
MARKER_MAX_BYTES = 4096
KINDS = ("run", "sweep", "export", "demo", "analysis")
DEMO_HEADER = "# Written by `batchscale demo`"
EXPORT_HEADER = "Exported by `batchscale export"
FOREIGN_SHOWN = 8
MAX_SWEEP_DOCUMENT_BYTES = 16 << 20
KIND_NOUNS = {"run": "run", "sweep": "sweep", "export": "previous export", "demo": "demo", "analysis": "analysis"}

# Top-level entries (fnmatch patterns) batchscale writes. Temporary names (.NAME.tmp, staging) are batchscale's too.
TEMPORARY_ENTRIES = (".*.tmp", ".report-*", ".*.checkpoint-*", ".*.saving-*", ".*.replaced-*")
ANALYSIS_ENTRIES = ("analysis.json", "j_vs_samples.png", "j_vs_steps.png", "grad_norm_vs_batch.png",
                    "r_n_vs_batch.png", "report.md", "report.html", "generation_throughput.png", "training_time.png",
                    "time_ratio_vs_batch.png", "j_vs_wall_clock.png", "plan.json", "profiles", *TEMPORARY_ENTRIES)
TRACKER_ENTRIES = ("tensorboard", "wandb", "mlruns")  # telemetry.trackers' local stores
RUN_ENTRIES = ("metrics.jsonl", "run.json", "config.json", "summary.json", "samples.jsonl", "trackers.json",
               "checkpoints", "policy", *TRACKER_ENTRIES, *ANALYSIS_ENTRIES)
SWEEP_ENTRIES = ("sweep.json", "runs", "sweep.lock", "mlruns", *ANALYSIS_ENTRIES)
PRE_MARKER_FOREIGN = ("mlruns", "wandb", "trackers.json")  # written only since the marker exists
DIRECTORY_ENTRIES = ("checkpoints", "policy", "profiles", "runs", "configs", *TRACKER_ENTRIES, ".report-*",
                     ".*.checkpoint-*", ".*.saving-*", ".*.replaced-*")  # what may be a directory at the top level
CHECKPOINT_ENTRIES = ("step-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]", ".step-*.checkpoint-*")
FLAT_DIRECTORIES = {"checkpoints": CHECKPOINT_ENTRIES, "policy": ("*",), "configs": ("*.toml",)}  # name -> what it holds (of regular files)
KIND_ENTRIES = {
    "run": RUN_ENTRIES,
    "sweep": SWEEP_ENTRIES,
    "demo": (*SWEEP_ENTRIES, "sweep.toml", "demo.json"),
    "export": ("*.sh", "*.sky.yaml", "sweep.sbatch", "configs", "README.md", "sweep.json", ".*.tmp"),
    "analysis": ANALYSIS_ENTRIES,
}


def mark_directory(path: Path, kind: str) -> None:
    """Write the marker into `path` (which exists), unless it already names `kind`."""
    if kind not in KINDS:
        raise ValueError(f"unknown directory kind {kind!r}")
    if read_marker(path) != kind:
        write_json_atomic(Path(path) / MARKER_FILE, {"kind": kind, "written_by": "batchscale",
                                                     "directory": os.stat(path).st_ino})


def read_marker(path: Path) -> str | None:
    """The kind the marker in `path` names, or None (no marker, or one that is not batchscale's: the module
    docstring)."""
    marker = Path(path) / MARKER_FILE
    try:
        if not _is_marker_file(marker):
            return None
        with open(marker, "rb") as f:
            data = json.loads(f.read(MARKER_MAX_BYTES).decode("utf-8"))
        inode = os.stat(path).st_ino
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("written_by") != "batchscale" or data.get("directory") != inode:
        return None
    return data["kind"] if data.get("kind") in KINDS else None


def _is_marker_file(marker: Path) -> bool:
    try:
        info = os.lstat(marker)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= MARKER_MAX_BYTES


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def foreign_entries(path: Path, kind: str, marked: bool = True) -> list[str]:
    """Entries of `path` batchscale does not write into a directory of `kind`, sorted, as paths relative to it: at
    the top level, and inside the directories batchscale fills (module docstring). `marked`: False for a directory
    judged by its content (no marker), where the stores that came after the marker are the user's."""
    patterns = KIND_ENTRIES[kind]
    found = []
    for entry in Path(path).iterdir():
        name = entry.name
        if name == MARKER_FILE:
            if not _is_marker_file(entry):
                found.append(name)
            continue
        if not _matches(name, patterns) or (not marked and name in PRE_MARKER_FOREIGN):
            found.append(name)
        elif entry.is_dir() and not entry.is_symlink():
            if not _matches(name, DIRECTORY_ENTRIES):
                found.append(name)  # a folder where batchscale writes a file
            elif name in FLAT_DIRECTORIES:
                found += [f"{name}/{inner}" for inner in _foreign_flat(entry, FLAT_DIRECTORIES[name])]
    return sorted(found)


def _foreign_flat(directory: Path, patterns) -> list[str]:
    """In checkpoints/ (its checkpoint directories) or policy/: what is not a regular file or link where batchscale
    writes one, at most two levels down."""
    found = []
    for entry in directory.iterdir():
        if not _matches(entry.name, patterns):
            found.append(entry.name)
        elif entry.is_dir() and not entry.is_symlink():
            if patterns is CHECKPOINT_ENTRIES:
                found += [f"{entry.name}/{inner.name}" for inner in entry.iterdir()
                          if inner.is_dir() and not inner.is_symlink()]
            else:
                found.append(entry.name)
    return found


def directory_kind(path: Path) -> str | None:
    """What batchscale wrote `path` as: its marker's kind, else the kind of a pre-marker directory recognised by its
    whole content (the module docstring), else None."""
    path = Path(path)
    if not path.is_dir():
        return None
    marked = read_marker(path)
    if marked is not None:
        return marked
    if (_is_file(path / "run.json") and _is_file(path / "metrics.jsonl")
            and not foreign_entries(path, "run", marked=False)):
        return "run"
    has_runs = (path / "runs").is_dir() and not (path / "runs").is_symlink()
    if has_runs or _is_file(path / "sweep.lock") or _is_sweep_document(path / "sweep.json"):
        if _starts_with(path / "sweep.toml", DEMO_HEADER) and not foreign_entries(path, "demo", marked=False):
            return "demo"
        if not foreign_entries(path, "sweep", marked=False):
            return "sweep"
    if (_is_file(path / "sweep.json") and _starts_with(path / "README.md", "# ")
            and EXPORT_HEADER in _head(path / "README.md") and not foreign_entries(path, "export", marked=False)):
        return "export"
    return None


def check_replaceable(path: Path, kind: str, option: str = "--out") -> None:
    """Raise unless `--overwrite` may replace the non-empty directory `path` with a new one of `kind`."""
    found = directory_kind(path)
    if found is None:
        foreign = foreign_entries(path, kind, marked=False)
        keeps = f" (it keeps {_listed(foreign)}, which batchscale did not write)" if foreign else ""
        raise UserError(option, f"{path} is a non-empty directory without a {KIND_NOUNS[kind]} batchscale wrote (no "
                        f"{MARKER_FILE} marker, nor only the files an earlier batchscale writes there); batchscale "
                        f"replaces only a {kind} directory it wrote{keeps}", f"choose a new or empty {option}")
    if found != kind:
        raise UserError(option, f"{path} is a {found} directory, not a {kind} directory (--overwrite replaces only "
                        f"a {kind} directory)", f"choose a new or empty {option}")
    foreign = foreign_entries(path, kind, marked=read_marker(path) is not None)
    if foreign:
        raise UserError(option, f"{path} holds {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} batchscale "
                        f"did not write ({_listed(foreign)}); --overwrite would delete them, so it stops and keeps "
                        "everything",
                        f"move them out of {path}, or choose a new or empty {option}")


def _listed(names: list[str]) -> str:
    return ", ".join(names[:FOREIGN_SHOWN]) + (f" and {len(names) - FOREIGN_SHOWN} more"
                                               if len(names) > FOREIGN_SHOWN else "")


def check_inputs_outside(target: Path, inputs: dict[str, Path | None], option: str = "--out") -> None:
    """Raise if any input (option name -> path) lies inside `target`, which is about to be replaced."""
    target = Path(os.path.realpath(target))
    for name, path in inputs.items():
        if path is None:
            continue
        real = Path(os.path.realpath(path))
        if real == target or target in real.parents:
            raise UserError(option, f"{target} holds the input {name} {path}, which --overwrite would delete",
                            f"move {path} out of {target}, or choose another {option}")


def check_may_write_outputs(path: Path, names: tuple[str, ...], option: str) -> None:
    """Raise if writing `names` into the existing directory `path` would replace a file batchscale did not write:
    `path` must be new, empty, batchscale's (directory_kind), or hold none of those names."""
    path = Path(path)
    if not path.is_dir() or directory_kind(path) is not None:
        return
    taken = sorted(name for name in names if os.path.lexists(path / name))
    if taken:
        raise UserError(option, f"{path} is not a directory batchscale wrote and already holds {', '.join(taken)}, "
                        "which this command would overwrite", f"choose a new or empty {option}, or move those files")


def _is_sweep_document(path: Path) -> bool:
    """sweep.json as a sweep writes it: an object whose points are {name, label, seed} objects."""
    if not _is_file(path) or path.stat().st_size > MAX_SWEEP_DOCUMENT_BYTES:
        return False
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    points = data.get("points") if isinstance(data, dict) else None
    return isinstance(points, list) and all(isinstance(p, dict) and {"name", "label", "seed"} <= set(p) for p in points)


def _is_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _head(path: Path, size: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(size).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _starts_with(path: Path, text: str) -> bool:
    return _is_file(path) and _head(path, len(text.encode()) + 16).startswith(text)
