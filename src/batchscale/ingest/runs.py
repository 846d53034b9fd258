"""One run per import: files (or stretches of one file) that hold different runs are refused, a resumed run merges.

A run resumed from a checkpoint at step k logs again from step k + 1 (verl, OpenRLHF and TRL all do), with the same
config; it may log steps k + 1 .. its crash point twice, and the later values win (records.merge_rows_by_step). What
tells a different run apart (the rule docs/IMPORT.md states):

- it starts from scratch: its first step is 0 or 1 (an eval before training, or the first update) while the earlier
  piece had gone past it, or it starts before the earlier piece's first step;
- it leaves a gap: its first step is more than one past the earlier piece's last (no checkpoint lies there);
- its config differs from the earlier piece's in what defines a run (P, G, lr, model, data, seed, mini-batch, epochs:
  frameworkconfig.read_run_fields of the config the piece carries: TRL's `args/text_summary`, verl's printed dict);
- it evaluates on other data: both pieces log eval metrics, under different names (other datasets or sources).

Pieces are ordered by their first timestamp (TensorBoard event files: the file-version event the writer stamps at
start-up; files without one by name) and each either continues the run so far or starts a new one. Several runs are a
UserError naming each (file or lines, steps, evals) and how to import each on its own; nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow, eval_name
from batchscale.ingest.frameworkconfig import read_run_fields

RUN_FIELDS = ("prompts_per_step", "samples_per_prompt", "lr", "model", "task", "seed", "mini_batch_prompts", "epochs")
SHOWN_EVALS = 2


@dataclass
class Piece:
    """One file of a run (an event file), or one stretch of a file, with what tells runs apart."""

    name: str  # for messages: a file name, or "lines 1-40"
    rows: list[RawRow]
    start_time_s: float | None = None
    config: dict = field(default_factory=dict)  # the flattened config the piece carries, {} when none

    def steps(self) -> tuple[int, int]:
        return min(row.step for row in self.rows), max(row.step for row in self.rows)


def eval_names(style: str, rows: list[RawRow]) -> frozenset[str]:
    return frozenset(name for row in rows for key in row.metrics if (name := eval_name(style, key)) is not None)


def why_not_continued(style: str, earlier: list[Piece], later: Piece) -> str | None:
    """Why `later` is not the run of `earlier` resumed (module docstring: every reason that holds), or None when it
    is."""
    reasons = []
    config = next((p.config for p in reversed(earlier) if p.config), {})
    if config and later.config:
        before, after = (read_run_fields(c, style, []) for c in (config, later.config))
        changed = [f"{name} {before[name]} -> {after[name]}" for name in RUN_FIELDS
                   if name in before and name in after and before[name] != after[name]]
        if changed:
            reasons.append(f"has another config ({', '.join(changed)})")
    evals_before = eval_names(style, [row for p in earlier for row in p.rows])
    evals_after = eval_names(style, later.rows)
    if evals_before and evals_after and not evals_before & evals_after:
        reasons.append(f"evaluates on other data ({', '.join(sorted(evals_after)[:SHOWN_EVALS])} instead of "
                       f"{', '.join(sorted(evals_before)[:SHOWN_EVALS])})")
    first, last = min(p.steps()[0] for p in earlier), max(p.steps()[1] for p in earlier)
    start = later.steps()[0]
    if start <= 1 < last or start < first:
        reasons.append(f"starts again at step {start}")
    elif start > last + 1:
        reasons.append(f"starts at step {start}, after a gap (the run before it ends at step {last})")
    return f"{later.name} {' and '.join(reasons)}" if reasons else None


def group_runs(style: str, pieces: list[Piece], in_order: bool = False) -> tuple[list[list[Piece]], list[str]]:
    """(runs, reasons): the pieces in start order (`in_order`: as given, the order a file was written in), grouped
    into runs; the reasons say why each new run began."""
    if not in_order:
        pieces = sorted(pieces, key=lambda p: (p.start_time_s is None, p.start_time_s or 0.0, p.name))
    runs: list[list[Piece]] = []
    reasons: list[str] = []
    for piece in pieces:
        reason = why_not_continued(style, runs[-1], piece) if runs else None
        if runs and reason is None:
            runs[-1].append(piece)
        else:
            runs.append([piece])
            if reason:
                reasons.append(reason)
    return runs, reasons


def describe(style: str, run: list[Piece]) -> str:
    first, last = min(p.steps()[0] for p in run), max(p.steps()[1] for p in run)
    evals = sorted(eval_names(style, [row for p in run for row in p.rows]))
    shown = f", evals {', '.join(evals[:SHOWN_EVALS])}{', ...' if len(evals) > SHOWN_EVALS else ''}" if evals else ""
    return f"{' + '.join(p.name for p in run)} (steps {first}-{last}{shown})"


def several_runs_error(path: str, style: str, runs: list[list[Piece]], reasons: list[str], fix: str) -> UserError:
    found = "; ".join(f"run {i}: {describe(style, run)}" for i, run in enumerate(runs, start=1))
    return UserError(path, f"holds {len(runs)} runs, not one ({found}): {'; '.join(reasons)}", fix)


def split_at_restarts(rows: list[RawRow]) -> list[list[RawRow]]:
    """A file's rows cut where its step count goes back (a resume, or another run appended to the same file)."""
    pieces: list[list[RawRow]] = []
    highest = None
    for row in rows:
        if highest is not None and row.step < highest and (row.step <= 1 or row.step < pieces[-1][0].step):
            pieces.append([])
            highest = None
        if not pieces:
            pieces.append([])
        pieces[-1].append(row)
        highest = row.step if highest is None else max(highest, row.step)
    return pieces


def check_one_run(path: str, parsed: ParsedLog) -> None:
    """Refuse a file whose step count starts again (module docstring): two runs written to one file (a file logger
    that appends, `tee -a`); a resume (the count goes back to a later step) is one run and merges."""
    stretches = split_at_restarts(parsed.rows)
    if len(stretches) < 2:
        return
    pieces = [Piece(name=f"{rows[0].where}-{rows[-1].where.split()[-1]}", rows=rows) for rows in stretches]
    runs, reasons = group_runs(parsed.style, pieces, in_order=True)
    if len(runs) > 1:
        cut = runs[1][0].rows[0].where
        raise several_runs_error(path, parsed.style, runs, reasons,
                                 f"import one run at a time: split the file where the second run begins ({cut}; "
                                 "e.g. head -n / tail -n +) and import each part")
