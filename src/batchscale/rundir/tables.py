"""The analysis and plan tables as files a user loads into pandas or a spreadsheet: `analyze --csv/--parquet PATH`
and `plan --csv/--parquet PATH`. One row per label, every column of the printed table (and the document's other
per-label numbers), flattened to scalars, with units in the column names: `n_star_samples`, `t_target_s`,
`throughput_samples_per_s`. The values are the document's own (analysis.json's `configs`, plan.json's `rows`), never
the rounded text the console shows; a missing value is an empty CSV cell (a Parquet null).

Outputs never replace inputs or special files (`check_table_outputs`, before any compute): a path that is, or links
to, a directory, a device, a FIFO or socket, or anything under /dev or /proc (`/dev/stdout`, `/proc/self/fd/1`) is
refused; so is a file the same command reads (an input given as a file, or an existing JSON/JSONL file inside an
input directory: a run's metrics.jsonl, the analysis.json plan reads), a file the command itself writes (analyze's
analysis.json and report.md), and one path given to both --csv and --parquet. A link to a regular file is followed:
its target is replaced and the link kept (as --out does).

Written atomically: a temporary file beside the target, then renamed over it. CSV with the csv module; Parquet with
pyarrow, an optional dependency (`check_table_format` refuses it, before any compute, where pyarrow is absent).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import resolve_out, write_error

# analysis.json configs[label] keys -> column names (units where the key has none); samples_to_target is flattened
ANALYSIS_RENAMES = {"time_to_target_realized": "t_target_realized_s"}
# plan.json rows[] keys -> column names
PLAN_RENAMES = {"samples_to_target": "n_star_samples", "time_to_target": "t_target_s",
                "time_to_target_realized": "t_target_realized_s", "normalized_time_to_target": "t_target_normalized",
                "normalized_time_to_target_low": "t_target_normalized_ci_low",
                "normalized_time_to_target_high": "t_target_normalized_ci_high",
                "normalized_time_to_target_at_least": "t_target_normalized_at_least",
                "score": "speedup_over_reference"}
SAMPLES_TO_TARGET_COLUMNS = {"mean": "n_star_samples", "ci_low": "n_star_ci_low_samples",
                             "ci_high": "n_star_ci_high_samples", "reached": "seeds_reached",
                             "censored": "seeds_censored", "log_mean": "n_star_log_mean", "log_sd": "n_star_log_sd",
                             "interval": "n_star_interval"}


def _scalar(value):
    """A cell: numbers, strings, booleans and None as they are; a list (the seeds) as its items joined by ';'."""
    if isinstance(value, (list, tuple)):
        return ";".join(str(v) for v in value)
    if isinstance(value, dict):
        raise TypeError("a table cell cannot hold a table")  # a new nested key must get its own columns here
    return value


def analysis_table(document: dict) -> list[dict]:
    """One row per label of an analysis.json document, in the document's order."""
    rows = []
    for label, config in document["configs"].items():
        row = {"label": label, "is_reference": label == document["reference"], "target_score": document["target"]}
        for key, value in config.items():
            if key == "samples_to_target":
                row.update({column: value.get(part) for part, column in SAMPLES_TO_TARGET_COLUMNS.items()})
            elif key == "seeds":
                row["seeds"] = _scalar(value)
                row["seed_count"] = len(value)
            else:
                row[ANALYSIS_RENAMES.get(key, key)] = _scalar(value)
        rows.append(row)
    return rows


def plan_table(document: dict) -> list[dict]:
    """One row per label of a plan document (plan.json, `plan --json`), in the document's order."""
    near = set(document.get("near_optimal") or [])
    rows = []
    for entry in document["rows"]:
        label = entry["label"]
        row = {"label": label, "is_reference": label == document["reference"], "is_best": label == document["best"],
               "is_near_optimal": label in near}
        row.update({PLAN_RENAMES.get(key, key): _scalar(value) for key, value in entry.items() if key != "label"})
        rows.append(row)
    return rows


def _parquet_module():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        return None
    return pyarrow


def check_table_format(path: Path | None, option: str) -> None:
    """Before any compute: the table's directory exists, the path is not a directory, and Parquet has pyarrow."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise UserError(option, f"{path} is a directory", f"give {option} a file path, e.g. {path / 'table'}"
                        f"{'.parquet' if option == '--parquet' else '.csv'}")
    if not path.absolute().parent.is_dir():
        raise UserError(option, f"the directory of {path} does not exist", "create it first, or choose another path")
    if option == "--parquet" and _parquet_module() is None:
        raise UserError("--parquet", "writing Parquet needs pyarrow, which is not installed",
                        "pip install pyarrow, or write --csv PATH instead")


INPUT_SUFFIXES = (".json", ".jsonl")  # what batchscale reads inside an input directory
SPECIAL_ROOTS = ("/dev", "/proc", "/sys")


def check_table_outputs(outputs: dict[str, Path | None], inputs: dict[str, Path | None],
                        written: tuple[Path, ...] | list[Path] = ()) -> None:
    """Before any compute: refuse an output (option -> path) that would replace an input (name -> file or directory),
    a file this command writes (`written`), a special file, or another output (the module docstring)."""
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        target = os.path.realpath(Path(path).absolute())
        shown = f"{path}" + (f" (a link to {target})" if Path(path).is_symlink() else "")
        if any(_special(hop) for hop in _link_chain(Path(path).absolute())) or \
                (os.path.exists(target) and not os.path.isfile(target)):
            raise UserError(option, f"{shown} is not a regular file (a directory, a device, a file descriptor or a "
                            f"pipe); {option} writes a regular file in its place", f"give {option} a file path")
        if target in seen:
            raise UserError(option, f"{path} is also the {seen[target]} path: one would replace the other",
                            f"give {option} and {seen[target]} different paths")
        seen[target] = option
        for name, source in inputs.items():
            if source is None:
                continue
            real = os.path.realpath(Path(source).absolute())
            inside = target.startswith(real.rstrip("/") + "/") and target.endswith(INPUT_SUFFIXES)
            if target == real or (inside and os.path.lexists(target)):
                raise UserError(option, f"{shown} is an input of this command ({name} {source}); writing the table "
                                "there would replace it", f"write {option} outside the inputs, e.g. ./table"
                                f"{'.parquet' if option == '--parquet' else '.csv'}")
        if target in {os.path.realpath(Path(p).absolute()) for p in written}:
            raise UserError(option, f"{shown} is a file this command writes itself", f"give {option} another path")


def _special(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in SPECIAL_ROOTS)


def _link_chain(path: Path, hops: int = 40) -> list[str]:
    """`path` and every path its links lead through, each with its directory resolved: a table written through
    /dev/stdout or a link to /proc/self/fd/1 passes through /dev or /proc whatever the descriptor is now."""
    chain = []
    for _ in range(hops):
        path = Path(os.path.realpath(path.parent)) / path.name
        chain.append(str(path))
        if not path.is_symlink():
            break
        path = path.parent / os.readlink(path)
    return chain


def _columns(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(column for row in rows for column in row))  # first-seen order, every row's keys


def write_table(path: Path, rows: list[dict], fmt: str) -> None:
    """Write `rows` as CSV or Parquet at `path`, atomically; an OSError becomes a one-line UserError naming it."""
    path = resolve_out(path)  # a link to a regular file: its target is replaced, the link kept
    columns = _columns(rows)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if fmt == "csv":
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=columns, restval="", lineterminator="\n")
            writer.writeheader()
            writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)
            tmp.write_text(text.getvalue(), encoding="utf-8")
        else:
            pyarrow = _parquet_module()
            table = pyarrow.Table.from_pylist([{c: row.get(c) for c in columns} for row in rows])
            pyarrow.parquet.write_table(table, tmp)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(path, e) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_tables(rows: list[dict], csv_path: Path | None, parquet_path: Path | None) -> None:
    """The --csv and --parquet files a command was asked for."""
    for path, fmt in ((csv_path, "csv"), (parquet_path, "parquet")):
        if path is not None:
            write_table(path, rows, fmt)
