"""Where a run is written while it trains, and how it takes its place: nothing a user types loses a finished run.

Training (`run_destination`). A new or empty `out` is written in place: a crash there leaves an unfinished run
(records, no summary.json), and a failed start, before the first record, leaves nothing. An earlier run at `out`
(replaced with --overwrite, which `check_out_dir` allows for a run only) stays untouched while the new run trains in a
hidden sibling `.NAME.training-PID-TOKEN`; the two are swapped only once the new run has finished, so a failed start
or a crash never loses the earlier run.

Sweeps (`sweep_staging_dir`, `clear_staging`). A point trains in `runs/.NAME.partial-PID-TOKEN`, a name no other
process picks, and the sweep that started it moves it to `runs/NAME` when its worker reports success. A directory
under runs/ is therefore always a finished run moved by the sweep that trained it; a staging directory is never
adopted, and a rerun (holding the sweep lock, so no other sweep is alive) removes every one it finds.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from batchscale.files import staged_directory, unique_suffix
from batchscale.rundir.run import METRICS_FILE, is_run_dir, sweep_runs_dir

STAGING_MARK = ".partial-"


@contextmanager
def run_destination(out: Path, overwrite: bool) -> Iterator[Path]:
    """Yield the directory a new run writes into (see the module docstring); `out` must have passed check_out_dir."""
    out = Path(out)
    if overwrite and out.is_dir() and is_run_dir(out):
        with staged_directory(out, "training") as staging:
            yield staging
        return
    created = not out.exists()
    try:
        yield out
    except BaseException:
        metrics = out / METRICS_FILE
        if out.is_dir() and (not metrics.is_file() or metrics.stat().st_size == 0):  # a failed start: no record
            if created:
                shutil.rmtree(out, ignore_errors=True)
            else:
                for path in out.iterdir():
                    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        raise


def sweep_staging_dir(sweep_dir: Path, name: str) -> Path:
    """A fresh staging directory name for point `name`, unique to this process."""
    return sweep_runs_dir(sweep_dir) / f".{name}{STAGING_MARK}{unique_suffix()}"


def clear_staging(sweep_dir: Path) -> list[Path]:
    """Remove every staging directory under runs/ (call while holding the sweep lock); returns what was removed."""
    runs = sweep_runs_dir(sweep_dir)
    removed = [p for p in runs.glob(f".*{STAGING_MARK}*") if p.is_dir()] if runs.is_dir() else []
    removed += [p for p in runs.glob(".*.partial") if p.is_dir()] if runs.is_dir() else []  # before unique names
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
