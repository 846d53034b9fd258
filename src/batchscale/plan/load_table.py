"""Read a decision table measured elsewhere: a CSV with one configuration per row.

Columns (header names are case-insensitive; extra columns are ignored):
- `label` (required): the configuration's name, unique;
- `samples_to_target` (required): N*, samples, > 0; or `censored` / `inf` when it never reached the target;
- `throughput` (required): q, end-to-end samples/s, > 0;
- `feasible` (optional): true/false, 1/0, yes/no; missing column means every row is feasible;
- `prompts_per_step`, `samples_per_prompt`, `samples_per_step` (optional): P, G and B_train, positive integers, shown in
  the table and used to name the next larger batch in the explanation. B_train = P*G is filled in when only P and G are given.
- `max_concurrency` (optional): sequences the engine decodes at once, a positive integer; the memory check's decode batch
  is min(B_train, max_concurrency) (plan/memory.py). `plan --max-concurrency` overrides it.

A table carries no per-seed spread, so a plan from it is never `resolved` (resolve.py says why).

Every rule broken raises `UserError` naming the file, the row (1-based line number, header is line 1) and the column.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import read_text_utf8
from batchscale.plan.rows import ConfigMeasurement

REQUIRED_COLUMNS = ("label", "samples_to_target", "throughput")
BATCH_COLUMNS = ("prompts_per_step", "samples_per_prompt", "samples_per_step")
CENSORED_WORDS = {"censored", "inf", "infinity", "never"}
TRUE_WORDS, FALSE_WORDS = {"true", "1", "yes", "y"}, {"false", "0", "no", "n"}


def load_table(path: Path) -> list[ConfigMeasurement]:
    """Parse and validate the CSV at `path` into one measurement per row, in file order."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--table {path}", "is not a readable file", "give the path of a CSV file")
    text = read_text_utf8(path, f"--table {path}").removeprefix("\ufeff")  # a byte-order mark is no column
    with io.StringIO(text, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise UserError(f"{path}", "is empty", "write a header line: label,samples_to_target,throughput")
        columns = [h.strip().lower() for h in header]
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise UserError(
                f"{path} header", f"lacks column(s) {', '.join(missing)} (found: {', '.join(columns)})",
                "the header must name label,samples_to_target,throughput (feasible is optional)",
            )
        measurements, seen = [], {}
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue  # blank line
            line = reader.line_num
            if len(cells) != len(columns):
                raise UserError(
                    f"{path} line {line}", f"has {len(cells)} cells, the header has {len(columns)}", "give every column"
                )
            row = {c: v.strip() for c, v in zip(columns, cells)}
            where = f"{path} line {line}"
            label = row["label"]
            if not label:
                raise UserError(f"{where} column label", "is empty", "name the configuration")
            if label in seen:
                raise UserError(
                    f"{where} column label", f"{label!r} already appears on line {seen[label]}", "give each label one row"
                )
            seen[label] = line
            measurements.append(_parse_row(row, where))
    if not measurements:
        raise UserError(f"{path}", "has a header but no rows", "add one row per configuration")
    return measurements


def _parse_row(row: dict[str, str], where: str) -> ConfigMeasurement:
    label = row["label"]
    where = f"{where} (label {label!r})"
    n_text = row["samples_to_target"]
    censored = n_text.lower() in CENSORED_WORDS
    samples_to_target = None if censored else _parse_positive(n_text, f"{where} column samples_to_target", censor_hint=True)
    throughput = _parse_positive(row["throughput"], f"{where} column throughput")
    feasible = _parse_bool(row["feasible"], f"{where} column feasible") if "feasible" in row else True
    batch = {c: _parse_count(row[c], f"{where} column {c}") if row.get(c) else None for c in BATCH_COLUMNS}
    max_concurrency = _parse_count(row["max_concurrency"], f"{where} column max_concurrency") \
        if row.get("max_concurrency") else None
    if batch["samples_per_step"] is None and batch["prompts_per_step"] and batch["samples_per_prompt"]:
        batch["samples_per_step"] = batch["prompts_per_step"] * batch["samples_per_prompt"]
    return ConfigMeasurement(
        label=label,
        samples_to_target=samples_to_target,
        throughput_samples_per_s=throughput,
        feasible=feasible,
        seeds_reached=0 if censored else None,
        max_concurrency=max_concurrency,
        **batch,
    )


def _parse_positive(text: str, where: str, censor_hint: bool = False) -> float:
    hint = "; write 'censored' if it never reached the target" if censor_hint else ""
    try:
        value = float(text)
    except ValueError:
        raise UserError(where, f"must be a number, got {text!r}", "write a positive number" + hint) from None
    if not (math.isfinite(value) and value > 0):
        raise UserError(where, f"must be a positive finite number, got {text!r}", "write a positive number" + hint)
    return value


def _parse_count(text: str, where: str) -> int:
    value = _parse_positive(text, where)
    if value != int(value):
        raise UserError(where, f"must be a whole number, got {text!r}", "write a positive integer")
    return int(value)


def _parse_bool(text: str, where: str) -> bool:
    word = text.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise UserError(where, f"must be true/false, 1/0 or yes/no, got {text!r}", "write one of those")
