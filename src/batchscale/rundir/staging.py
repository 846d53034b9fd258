"""Where a run is written while it trains, and how it takes its place: nothing a user types loses a finished run.

Training (`run_destination`). A new or empty `out` is written in place: a crash there leaves an unfinished run
(records, no summary.json), and a failed start, before the first record, leaves nothing. An earlier run at `out`
(replaced with --overwrite, which `check_out_dir` allows for a run only) stays untouched while the new run trains in a
hidden sibling `.NAME.training-PID-TOKEN`; the two are swapped only once the new run has finished, so a failed start
or a crash never loses the earlier run.

Sweeps (`sweep_staging_dir`, `staged_points`, `claim_staging`, `clear_staging`). A point trains in
`runs/.NAME.partial-PID-TOKEN`, a name no other process picks, and the sweep that started it moves it to `runs/NAME`
when its worker reports success. A directory under runs/ is therefore always a finished run moved by the sweep that
trained it to its end; a staging directory is never adopted as it is. A rerun holds the sweep lock, so no other
sweep (and no worker of one: they die with it) is alive: it may claim one staging directory of each point still to
run, renaming it to a fresh name of its own, and resume it from its newest checkpoint (sweep.resume picks which); it
removes every other one, with the lock file (`.<staging name>.lock`, rundir.lock.RunLock) a killed worker left
beside it. Only names of the forms above are touched.
"""

from __future__ import annotations

import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from batchscale.files import resolve_out, staged_directory, unique_suffix
from batchscale.rundir.lock import run_lock_path
from batchscale.rundir.ownership import MARKER_FILE
from batchscale.rundir.run import CONFIG_FILE, DESCRIPTOR_FILE, METRICS_FILE, sweep_runs_dir

STAGING_MARK = ".partial-"
STAGING_NAME = re.compile(r"\.(?P<name>.+)\.partial-\d+-[0-9a-f]{8}")  # .NAME.partial-PID-TOKEN (files.unique_suffix)
RUN_START_FILES = (METRICS_FILE, DESCRIPTOR_FILE, CONFIG_FILE, MARKER_FILE, f".{DESCRIPTOR_FILE}.tmp",
                   f".{CONFIG_FILE}.tmp", f".{MARKER_FILE}.tmp", "samples.jsonl", "tensorboard",
                   "wandb")  # what a run writes before a record
OLD_STAGING_NAME = re.compile(r"\.(?P<name>.+)\.partial")  # before staging names were unique
STAGING_LOCK_NAME = re.compile(r"\.(?P<staging>\..+\.partial-\d+-[0-9a-f]{8})\.lock")  # a worker's RunLock file


@contextmanager
def run_destination(out: Path, overwrite: bool) -> Iterator[Path]:
    """Yield the directory a new run writes into (see the module docstring); `out` must have passed check_out_dir.
    A link is followed to its target. A failed start removes, by name, only the files a run writes (RUN_START_FILES)
    and the directory if this call created it and it is left empty."""
    out = resolve_out(out)
    if overwrite and out.is_dir() and any(out.iterdir()):  # check_out_dir let only a run of batchscale's through
        with staged_directory(out, "training") as staging:
            yield staging
        return
    created = not out.exists()
    try:
        yield out
    except BaseException:
        metrics = out / METRICS_FILE
        if out.is_dir() and (not metrics.is_file() or metrics.stat().st_size == 0):  # a failed start: no record
            for name in RUN_START_FILES:
                path = out / name
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else \
                    path.unlink(missing_ok=True)
            if created:
                try:
                    out.rmdir()  # only if empty: nothing another process put there is touched
                except OSError:
                    pass
        raise


def sweep_staging_dir(sweep_dir: Path, name: str) -> Path:
    """A fresh staging directory name for point `name`, unique to this process."""
    return sweep_runs_dir(sweep_dir) / f".{name}{STAGING_MARK}{unique_suffix()}"


def staged_points(sweep_dir: Path) -> dict[str, list[Path]]:
    """Point name -> its staging directories under runs/ (unique names only), oldest name first."""
    runs = sweep_runs_dir(sweep_dir)
    found: dict[str, list[Path]] = {}
    for path in sorted(runs.iterdir()) if runs.is_dir() else []:
        if (match := STAGING_NAME.fullmatch(path.name)) and path.is_dir():
            found.setdefault(match["name"], []).append(path)
    return found


def claim_staging(path: Path, sweep_dir: Path, name: str) -> Path:
    """Rename an interrupted sweep's staging directory of point `name` to a fresh name of this process (call while
    holding the sweep lock), removing its dead worker's lock file; returns the new path."""
    claimed = sweep_staging_dir(sweep_dir, name)
    path.rename(claimed)
    run_lock_path(path).unlink(missing_ok=True)
    return claimed


def clear_staging(sweep_dir: Path, keep: tuple[Path, ...] | list[Path] = ()) -> list[Path]:
    """Remove every staging directory under runs/ but those in `keep`, and every staging lock file a killed worker
    left (call while holding the sweep lock); returns what was removed."""
    runs = sweep_runs_dir(sweep_dir)
    if not runs.is_dir():
        return []
    kept = {Path(p).name for p in keep}
    removed = []
    for path in sorted(runs.iterdir()):
        if path.name in kept:
            continue
        if path.is_dir() and (STAGING_NAME.fullmatch(path.name) or OLD_STAGING_NAME.fullmatch(path.name)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        elif (match := STAGING_LOCK_NAME.fullmatch(path.name)) and match["staging"] not in kept and path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
