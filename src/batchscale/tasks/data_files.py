"""Reading the rows of a user's data file: JSONL, Parquet, or a Hugging Face dataset saved with `save_to_disk`.

Every reader returns plain Python rows (dicts; nested columns as dicts and lists), so tasks.data sees one shape
whatever the file. Nothing in a file is executed; every failure is one UserError naming the file.

A saved Hugging Face dataset is read with pyarrow, not the `datasets` library: `Dataset.save_to_disk` writes a
directory of Arrow IPC *stream* files (data-00000-of-0000N.arrow) listed under `_data_files` in its `state.json`,
beside `dataset_info.json` (datasets 2.x to 5.x, src/datasets/arrow_dataset.py, `save_to_disk`; indices are
flattened before saving). Reading that takes pyarrow, which Parquet needs anyway; `datasets` would add a dozen
packages (fsspec, huggingface_hub, multiprocess, dill, xxhash, ...) to read a directory listing and the same Arrow
files. A `DatasetDict` saved to disk is a directory of split directories named in `dataset_dict.json`: point
`task.path` (and `task.eval_path`) at a split's directory. `state.json` is hostile input like any file: a data file
it names must be a plain file name inside that directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import loads_strict, read_text_utf8

STATE_FILE = "state.json"  # a saved Dataset's own description (datasets: config.DATASET_STATE_JSON_FILENAME)
DICT_FILE = "dataset_dict.json"  # a saved DatasetDict's list of splits (config.DATASETDICT_JSON_FILENAME)
MAX_REASON_CHARS = 200


def _reason(e: Exception) -> str:
    return " ".join(str(e).split())[:MAX_REASON_CHARS]


def import_pyarrow(field: str, what: str):
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401 - loads the submodule
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise UserError(field, f"reading {what} needs pyarrow",
                        "pip install 'batchscale[data]' (or pip install pyarrow), or convert the file to JSONL") from None
    return pyarrow


def read_rows(path: Path, field: str) -> list:
    """The rows of `path`: a .parquet file, a saved Hugging Face dataset's directory, or else JSONL."""
    if path.is_dir():
        return read_saved_dataset(path, field)
    if not path.is_file():
        raise UserError(field, f"no file at {path}",
                        "give the path of a .jsonl or .parquet file, or of a dataset saved with save_to_disk")
    if path.suffix == ".parquet":
        pa = import_pyarrow(field, "Parquet")
        try:
            return pa.parquet.read_table(path).to_pylist()
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid and ArrowIOError derive from these
            raise UserError(field, f"{path} is not a readable Parquet file ({type(e).__name__}: {_reason(e)})",
                            "rewrite it (e.g. pandas.DataFrame.to_parquet) or convert it to JSONL") from None
    rows = []
    for lineno, line in enumerate(read_text_utf8(path, field).splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(loads_strict(line))
        except (ValueError, RecursionError) as e:  # JSONDecodeError, a NaN/Infinity token, or nesting past the stack
            reason = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
            raise UserError(f"{field} ({path}:{lineno})", f"not valid JSON ({reason})", "write one JSON object per line") from None
    return rows


def _read_json(path: Path, field: str):
    try:
        return loads_strict(read_text_utf8(path, field))
    except (ValueError, RecursionError) as e:
        raise UserError(field, f"{path} is not valid JSON ({_reason(e)})",
                        "save the dataset again with save_to_disk") from None


def read_saved_dataset(directory: Path, field: str) -> list:
    """The rows of a dataset saved with `Dataset.save_to_disk` (module docstring)."""
    if not (directory / STATE_FILE).is_file():
        if (directory / DICT_FILE).is_file():
            splits = _read_json(directory / DICT_FILE, field)
            names = splits.get("splits") if isinstance(splits, dict) else None
            names = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
            example = names[0] if names else "train"
            raise UserError(field, f"{directory} is a DatasetDict (splits: {', '.join(names) or 'none named'}), not "
                            "one dataset", f"point {field} at a split's directory, e.g. {directory / example}")
        raise UserError(field, f"{directory} is a directory without {STATE_FILE}, not a dataset saved with save_to_disk",
                        "give a .jsonl or .parquet file, or the directory Dataset.save_to_disk wrote")
    state = _read_json(directory / STATE_FILE, field)
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not files:
        raise UserError(field, f"{directory / STATE_FILE} lists no data files (_data_files)",
                        "save the dataset again with save_to_disk")
    pa = import_pyarrow(field, "a saved Hugging Face dataset")
    tables = []
    for entry in files:
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise UserError(field, f"{directory / STATE_FILE} names the data file {name!r:.80}, which is not a file name "
                            "in that directory", "save the dataset again with save_to_disk")
        file = directory / name
        if not file.is_file():
            raise UserError(field, f"{directory / STATE_FILE} lists {name}, which is missing",
                            "copy the whole saved directory, or save the dataset again")
        try:
            with pa.memory_map(str(file), "r") as source:
                tables.append(pa.ipc.open_stream(source).read_all())
        except (OSError, ValueError) as e:
            raise UserError(field, f"{file} is not a readable Arrow stream ({type(e).__name__}: {_reason(e)})",
                            "save the dataset again with save_to_disk") from None
    try:
        return pa.concat_tables(tables).to_pylist()
    except (OSError, ValueError) as e:  # the files' schemas differ
        raise UserError(field, f"the data files of {directory} do not share one schema ({_reason(e)})",
                        "save the dataset again with save_to_disk") from None
