"""Checkpoints of a training run, the files `batchscale train --resume` continues from.

    <run>/checkpoints/step-000000012/   one checkpoint, complete or absent
        checkpoint.json                 the manifest, written last: schema and version, step, samples, how many records
                                        of metrics.jsonl it follows, the loop's state (JSON), and the size and sha256
                                        of every file beside it
        *.safetensors                   tensors only (weights, optimizer moments, RNG states): nothing is unpickled

A checkpoint is written into a hidden sibling (`.step-000000012.checkpoint-PID-TOKEN`), every file fsynced, and
renamed into place whole, so a crash at any point leaves either a complete checkpoint or a hidden directory that no
reader looks at (the next checkpoint the run writes removes it). A full disk (whatever the writer raises: safetensors
has its own error type) is files.write_error's one line, and the hidden directory is removed.

Reading trusts nothing in the directory. `usable_checkpoints` goes newest first and checks the manifest (read with a
cap: MAX_MANIFEST_BYTES) for its schema and version, its fields' types and ranges, that every file it names is a
regular file inside the checkpoint (no link, and the checkpoint and checkpoints/ themselves no links) with its size
and sha256, and that metrics.jsonl holds the records it follows, the last at its step and samples: a torn, altered or
foreign checkpoint is skipped for the previous one, with a warning naming why. The training side then checks the
manifest's state against itself and against the run's config (train.checkpointing.prepare_restore) and may skip it
the same way. Only the newest `keep` are kept (`prune`); nothing else under checkpoints/ is touched.

Torch-free: the training side (train.checkpointing) writes and reads the tensor files through `write_files`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from batchscale.files import dumps_strict, loads_strict, read_bytes_capped, sha256_file, unique_suffix, write_error
from batchscale.files import os_error_of
from batchscale.rundir.run import METRICS_FILE

CHECKPOINTS_DIR = "checkpoints"
MANIFEST = "checkpoint.json"
SCHEMA = "batchscale.checkpoint"
VERSION = 1
NAME = re.compile(r"step-(\d{9})")
STAGING = re.compile(r"\.step-\d{9}\.checkpoint-\d+-[0-9a-f]{8}")
MAX_MANIFEST_BYTES = 64 * 2**20  # JSON of the loop's state and optimizer groups: tens of kB
MAX_COUNT = 2**62  # steps, samples, records: any real run is far below


class CheckpointProblem(Exception):
    """Why a checkpoint directory cannot be resumed from."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    samples: int
    records: int  # metrics.jsonl lines the checkpoint follows
    state: dict  # the loop's and the training state's JSON part (train.checkpointing)


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(run_dir: Path, step: int, samples: int, records: int, state: dict,
                     write_files: Callable[[Path], None], keep: int) -> Path:
    """Write checkpoint `step` whole (see the module docstring): `write_files(directory)` writes the tensor files,
    then the manifest is written last; the older ones beyond the newest `keep` are removed. Returns its path."""
    root = checkpoints_dir(run_dir)
    target = root / f"step-{step:09d}"
    staging = root / f".{target.name}.checkpoint-{unique_suffix()}"
    text = dumps_strict({"schema": SCHEMA, "version": VERSION, "step": step, "samples": samples,
                         "records": records, "state": state, "files": {}})  # a refused value fails before any write
    try:
        staging.mkdir(parents=True)
        write_files(staging)
        files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(staging.iterdir())}
        for name in files:
            fsync_path(staging / name)
        manifest = json.loads(text)
        manifest["files"] = files
        (staging / MANIFEST).write_text(dumps_strict(manifest, indent=1) + "\n")
        fsync_path(staging / MANIFEST)
        if target.exists():  # a checkpoint of this step from before a resume: this one replaces it
            shutil.rmtree(target)
        staging.rename(target)
        fsync_path(root)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise write_error(target, e) from None
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(e, Exception) and (cause := os_error_of(e)) is not None:  # safetensors' own error type
            raise write_error(target, cause) from None
        raise
    prune(run_dir, keep)
    return target


def checkpoint_steps(run_dir: Path, links: bool = False) -> list[tuple[int, Path]]:
    """(step, path) of every directory named like a checkpoint, oldest first (complete or not); with `links`, also
    the links named like one (to be read and refused with a warning, never pruned or followed)."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir() or root.is_symlink():  # never followed out of the run (train.resume refuses it)
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := NAME.fullmatch(p.name)) and ((links and p.is_symlink()) or (p.is_dir() and not p.is_symlink()))]
    return sorted(found)


def prune(run_dir: Path, keep: int) -> list[Path]:
    """Remove the checkpoints older than the newest `keep`, and hidden staging directories a crash left; returns
    what was removed. Only names this module writes are touched."""
    removed = [path for _, path in checkpoint_steps(run_dir)[:-keep]]
    root = checkpoints_dir(run_dir)
    if root.is_dir() and not root.is_symlink():
        removed += [p for p in root.iterdir() if STAGING.fullmatch(p.name) and p.is_dir() and not p.is_symlink()]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def read_manifest(path: Path) -> dict:
    """The manifest of the checkpoint at `path`, its schema, version and fields checked (not its files); raises
    CheckpointProblem saying why not."""
    path = Path(path)
    try:
        manifest = loads_strict(read_bytes_capped(path / MANIFEST, MAX_MANIFEST_BYTES))
    except FileNotFoundError:
        raise CheckpointProblem(f"{MANIFEST} is missing (torn: the write did not finish)") from None
    except (OSError, ValueError) as e:  # ValueError: not JSON, NaN, an integer of thousands of digits, TooLarge
        raise CheckpointProblem(f"{MANIFEST} is unreadable ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise CheckpointProblem(f"{MANIFEST} is not a batchscale checkpoint manifest")
    if manifest.get("version") != VERSION:
        raise CheckpointProblem(f"its schema version is {manifest.get('version')!r:.40}; this batchscale reads "
                                f"{VERSION}")
    fields = {"step": int, "samples": int, "records": int, "state": dict, "files": dict}
    for key, kind in fields.items():
        if not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool):
            raise CheckpointProblem(f"{MANIFEST}: {key} must be a {kind.__name__}")
    for key in ("step", "samples", "records"):
        if not 1 <= manifest[key] <= MAX_COUNT:
            raise CheckpointProblem(f"{MANIFEST}: {key} must be an integer from 1 to 2**62")
    if NAME.fullmatch(path.name) and int(path.name[5:]) != manifest["step"]:
        raise CheckpointProblem(f"{MANIFEST} says step {manifest['step']}, its directory another")
    return manifest


def read_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint at `path`, its files checked against its manifest; raises CheckpointProblem saying why not.
    Every file must be a regular file inside the checkpoint directory: a link (out of the run, or anywhere) is
    refused, as is a checkpoint directory that is itself a link."""
    path = Path(path)
    if path.is_symlink():
        raise CheckpointProblem(f"it is a link (to {os.path.realpath(path)}), not a directory the run wrote")
    manifest = read_manifest(path)
    for name, facts in manifest["files"].items():
        file = path / name
        if "/" in name or name.startswith(".") or name == MANIFEST or not isinstance(facts, dict):
            raise CheckpointProblem(f"{MANIFEST} names a file {name!r:.80} a checkpoint cannot hold")
        if file.is_symlink():
            raise CheckpointProblem(f"{name} is a link (to {os.path.realpath(file)}), not a file the run wrote")
        if not file.is_file():
            raise CheckpointProblem(f"{name} is missing")
        if file.stat().st_size != facts.get("bytes") or sha256_file(file) != facts.get("sha256"):
            raise CheckpointProblem(f"{name} does not match the size and sha256 in {MANIFEST}")
    return Checkpoint(path, manifest["step"], manifest["samples"], manifest["records"], manifest["state"])


def kept_records(run_dir: Path, checkpoint: Checkpoint) -> list[dict]:
    """The first `checkpoint.records` records of metrics.jsonl, those the checkpoint follows; the last must be of its
    step and samples. Raises CheckpointProblem when the log does not hold them."""
    records = []
    try:
        with open(Path(run_dir) / METRICS_FILE, "rb") as f:
            for line in f:
                if len(records) == checkpoint.records:
                    break
                if not line.endswith(b"\n"):
                    break  # a torn last line: not a record
                records.append(loads_strict(line))
    except (OSError, ValueError) as e:
        raise CheckpointProblem(f"{METRICS_FILE} cannot be read up to its record {checkpoint.records} ({e})") from None
    last = records[-1] if records else None
    if len(records) != checkpoint.records or not isinstance(last, dict) or last.get("step") != checkpoint.step:
        raise CheckpointProblem(f"{METRICS_FILE} does not hold the {checkpoint.records} records it follows")
    if last.get("samples") != checkpoint.samples:
        raise CheckpointProblem(f"it says {checkpoint.samples:,} samples, but its last record in {METRICS_FILE} "
                                f"{last.get('samples')!r:.40}")
    return records


def usable_checkpoints(run_dir: Path, warn: Callable[[str], None] = print) -> Iterator[tuple[Checkpoint, list[dict]]]:
    """Newest first, each checkpoint that passes its checks, with the records it follows; each one skipped is a
    warning naming why. A checkpoints/ that is a link is not read at all."""
    root = checkpoints_dir(run_dir)
    if root.is_symlink():
        warn(f"warning: not reading {root}: it is a link (to {os.path.realpath(root)}), not the run's own directory")
        return
    for step, path in reversed(checkpoint_steps(run_dir, links=True)):
        try:
            checkpoint = read_checkpoint(path)
            records = kept_records(run_dir, checkpoint)
        except CheckpointProblem as e:
            warn(f"warning: skipping checkpoint {path}: {e}")
            continue
        yield checkpoint, records


def newest_checkpoint(run_dir: Path, warn: Callable[[str], None] = print) -> tuple[Checkpoint, list[dict]] | None:
    """The newest checkpoint that passes its checks, with the records it follows; None when none does. Each one
    skipped is a warning naming why."""
    return next(usable_checkpoints(run_dir, warn), None)


def newest_manifest(run_dir: Path) -> dict | None:
    """The manifest of the newest checkpoint whose manifest reads (its files not checked: cheap, for a check before
    anything loads); None when there is none."""
    if checkpoints_dir(run_dir).is_symlink():
        return None
    for _, path in reversed(checkpoint_steps(run_dir)):
        try:
            return None if path.is_symlink() else read_manifest(path)
        except CheckpointProblem:
            continue
    return None


def rewind_metrics(run_dir: Path, records: list[dict]) -> None:
    """Make metrics.jsonl hold exactly its first len(records) lines (the later ones were written after the
    checkpoint and will be written again): a new file renamed over the old, so a crash here changes nothing."""
    path = Path(run_dir) / METRICS_FILE
    with open(path, "rb") as f:
        lines = [f.readline() for _ in range(len(records))]
        rest = f.read(1)
    if not rest:
        return
    tmp = path.with_name(f".{path.name}.rewind-{unique_suffix()}")
    try:
        with open(tmp, "wb") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(path, e) from None
