"""File helpers shared by every writer and reader, so that nothing half-written ever looks complete.

- `dumps_strict`: JSON text that other tools can parse: NaN and infinity are refused, never written.
- `write_json_atomic`: write a JSON file under a temporary name, then rename it into place.
- `read_json_object`: read a JSON object, or fail with a UserError naming the file.
- `staged_directory`: build a directory beside its destination and swap it in whole. An earlier directory at the
  destination is replaced only once the new one is complete, and it is put back if anything fails.
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from batchscale.errors import UserError


def dumps_strict(obj, indent: int | None = None) -> str:
    """json.dumps that raises ValueError on NaN or infinity (JSON has neither; `NaN` tokens break other readers)."""
    return json.dumps(obj, indent=indent, allow_nan=False)


def write_json_atomic(path: Path, obj) -> None:
    path = Path(path)
    text = dumps_strict(obj, indent=2) + "\n"  # serialize first: a refused value leaves no temporary file
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_json_object(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as e:  # ValueError: JSONDecodeError and UnicodeDecodeError alike
        raise UserError(f"{path}", f"is not readable JSON ({e})", "regenerate it") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}", "must hold a JSON object", "regenerate it")
    return data


@contextmanager
def staged_directory(out: Path, purpose: str) -> Iterator[Path]:
    """Yield an empty directory beside `out`; when the block succeeds it becomes `out`, else it is removed."""
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.{purpose}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    replaced = None
    try:
        yield staging
        if out.is_dir() and any(out.iterdir()):
            replaced = out.parent / f".{out.name}.replaced-{os.getpid()}"
            out.rename(replaced)
        elif out.is_dir():
            out.rmdir()
        staging.rename(out)
        if replaced is not None:
            shutil.rmtree(replaced)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if replaced is not None and replaced.exists() and not out.exists():
            replaced.rename(out)  # put the earlier directory back
        raise
