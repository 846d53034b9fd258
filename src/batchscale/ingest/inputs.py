"""Reading an imported file as hostile input: what kind of file it may be, and how much of it is read.

A regular file is read whole, up to MAX_INPUT_BYTES and MAX_INPUT_LINES. A pipe (a FIFO: `<(cat log)`, `/dev/stdin`
from a pipe) is a stream: it is read once, up to the same caps, so the text formats (verl, OpenRLHF console, TRL
state, W&B CSV) accept it. Anything else (a character device such as /dev/zero, a block device, a socket) is refused
before a byte is read, since it may never end. Directories are the readers' business (a TensorBoard run, a TRL
checkpoint). Text is decoded as UTF-8 with a leading byte-order mark dropped and undecodable bytes replaced.
"""

from __future__ import annotations

import stat
from pathlib import Path

from batchscale.errors import UserError

MAX_INPUT_BYTES = 512 * 2**20
MAX_INPUT_LINES = 10_000_000
READ_CHUNK_BYTES = 2**20
KIND_NAMES = {stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket",
              stat.S_ISDIR: "a directory"}


def input_kind(path: Path) -> str:
    """'file', 'stream' (a pipe) or 'directory'; UserError for anything else (named), or a path that is missing."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise UserError(str(path), f"cannot be read ({e.strerror or e})", "pass the log file or directory") from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISFIFO(mode):
        return "stream"
    if stat.S_ISDIR(mode):
        return "directory"
    kind = next((name for test, name in KIND_NAMES.items() if test(mode)), "not a regular file")
    raise UserError(str(path), f"is {kind}, not a regular file or a pipe",
                    "pass the log file (a pipe such as <(cat log) is read as a stream)")


def read_input_bytes(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file or a pipe, at most `max_bytes` (MAX_INPUT_BYTES; UserError beyond, naming it)."""
    max_bytes = MAX_INPUT_BYTES if max_bytes is None else max_bytes
    if input_kind(path) == "directory":
        raise UserError(str(path), "is a directory", "pass the log file itself")
    chunks, size = [], 0
    with open(path, "rb") as stream:
        while True:
            chunk = stream.read(min(READ_CHUNK_BYTES, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise UserError(str(path), f"is larger than {max_bytes} bytes, more than any log this reads",
                                "cut the log to the run's lines (e.g. grep the step lines) and import that")
    return b"".join(chunks)


def read_input_text(path: Path, max_bytes: int | None = None) -> str:
    """The text of a regular file or a pipe (see module docstring), capped in bytes and MAX_INPUT_LINES lines."""
    data = read_input_bytes(path, max_bytes)
    max_lines = MAX_INPUT_LINES
    lines = data.count(b"\n")
    if lines > max_lines:
        raise UserError(str(path), f"has {lines} lines, more than the {max_lines} this reads",
                        "cut the log to the run's lines (e.g. grep the step lines) and import that")
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")
