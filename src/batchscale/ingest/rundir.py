"""Write an imported run directory (metrics.jsonl, run.json, summary.json) all at once, or not at all.

Everything is written into a hidden sibling temp directory first and renamed into place, so an import that fails
(bad input is caught before this point; a full disk or a kill can still happen) never leaves a half-written run for
analysis to pick up. `--overwrite` replaces only a directory that already holds a run (run.json or metrics.jsonl): it
never deletes an arbitrary non-empty directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import staged_directory

RUN_FILES = ("run.json", "metrics.jsonl")


def check_out_dir(out: Path, overwrite: bool) -> None:
    """Raise before any work if `out` cannot receive the run."""
    if out.exists() and not out.is_dir():
        raise UserError("--out", f"{out} exists and is not a directory", "choose another --out")
    if not out.is_dir() or not any(out.iterdir()):
        return
    holds_run = any((out / name).exists() for name in RUN_FILES)
    if holds_run and not overwrite:
        raise UserError("--out", f"{out} already holds a run", "choose another --out or pass --overwrite")
    if not holds_run:
        raise UserError("--out", f"{out} is a non-empty directory without a run", "choose a new or empty --out")


def summarize_records(records: list[dict]) -> dict:
    """summary.json: where the run ended and its eval scores (primary = eval/accuracy, else eval/score)."""
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    last = records[-1]
    primary = [(r.get("eval/accuracy", r.get("eval/score")), r) for r in evals]
    primary = [(score, r) for score, r in primary if score is not None]
    return {
        "step_records": len(steps),
        "eval_records": len(evals),
        "last_step": last["step"],
        "samples": max(r["samples"] for r in records),
        "wall_s": next((r["wall_s"] for r in reversed(records) if r["wall_s"] is not None), None),
        "final_eval": primary[-1][0] if primary else None,
        "best_eval": max(score for score, _ in primary) if primary else None,
        "best_eval_samples": max(primary, key=lambda p: p[0])[1]["samples"] if primary else None,
        "finished": None,  # unknown for an import: the log does not say whether the run ran to its end
    }


def write_run_dir(out: Path, records: list[dict], run_json: dict, summary: dict, overwrite: bool) -> Path:
    """Write the three files into a staged directory swapped in whole; returns the run directory."""
    check_out_dir(out, overwrite)
    with staged_directory(out, "importing") as staging:
        with open(staging / "metrics.jsonl", "w") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
        (staging / "run.json").write_text(json.dumps(run_json, indent=2) + "\n")
        (staging / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return Path(out).absolute()
