"""sweep.json: the sweep's points, and what a racing sweep (`sweep --adaptive`, sweep.race) fixed and decided.

    {"schema_version": 2,
     "points": [{"name": "grpo-P8-G8-sqrt__s0", "label": "grpo-P8-G8-sqrt", "seed": 0}, ...],
     "race": {"reference": ..., "target": 0.587, "target_rule": "...", "initial_seeds": 2, "max_seeds": 3,
              "time_budget_s": 300.0, "stopped": {"grpo-P64-G8-sqrt": "cannot win (T > 41 s at N = 5,120)"},
              "budgets": {"grpo-P8-G8-sqrt": 9216.0, ...}, "not_run": []}}

`race` is absent for a plain sweep. A racing sweep fixes its target before any run may stop at it, so `analyze` reads
the target from here when none is given (the runs stopped at exactly this score: another target would misread them).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from batchscale.errors import UserError
from batchscale.files import read_json_object, write_json_atomic
from batchscale.rundir.run import SCHEMA_VERSION, SWEEP_FILE, validation_error


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SweepPoint(_Strict):
    name: str
    label: str
    seed: int


class RaceFacts(_Strict):
    reference: str
    target: float | None  # None: no target could be fixed (the reference does not learn): nothing was stopped
    target_rule: str  # where the target came from, in words
    initial_seeds: int
    max_seeds: int
    time_budget_s: float | None
    stopped: dict[str, str] = {}  # label -> why the point was stopped ("cannot win (T > x s at N = y)")
    # label -> the most samples a seed of the point could train (sized from the reference's N*: sweep.race)
    budgets: dict[str, float] = {}
    not_run: list[str] = []  # points none of whose seeds ran (the time budget ended first)


class SweepDocument(_Strict):
    schema_version: int = SCHEMA_VERSION
    points: list[SweepPoint]
    race: RaceFacts | None = None


def sweep_file(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / SWEEP_FILE


def write_sweep_document(sweep_dir: Path, document: SweepDocument) -> None:
    write_json_atomic(sweep_file(sweep_dir), document.model_dump(mode="json", exclude_none=False))


def write_sweep_points(sweep_dir: Path, points: list[dict], race: RaceFacts | None = None) -> None:
    write_sweep_document(sweep_dir, SweepDocument(points=[SweepPoint(**p) for p in points], race=race))


def read_sweep_document(sweep_dir: Path) -> SweepDocument | None:
    """sweep.json of a sweep directory; None when there is none (a directory of imported runs)."""
    path = sweep_file(sweep_dir)
    if not path.is_file():
        return None
    data = read_json_object(path)
    try:
        return SweepDocument.model_validate(data)
    except ValidationError as error:
        raise validation_error(path, error, "rerun the sweep to rewrite it (finished runs are kept)") from None


def race_target(sweep_dir: Path) -> tuple[float, str] | None:
    """(target, rule) that a racing sweep fixed, or None (no sweep.json, a plain sweep, or no target fixed)."""
    document = read_sweep_document(sweep_dir)
    if document is None or document.race is None or document.race.target is None:
        return None
    return document.race.target, f"fixed by the racing sweep: {document.race.target_rule}"
