"""File helpers shared by every writer and reader, so that nothing half-written ever looks complete and no file a user
hands in ends in a traceback.

- `dumps_strict`: JSON text that other tools can parse: NaN and infinity are refused, never written.
- `loads_strict`: JSON text in, refusing the non-standard tokens NaN, Infinity and -Infinity that Python accepts.
- `read_text_utf8`: a file's text, or a UserError naming the file and the byte offset where it stops being UTF-8.
- `read_bytes_capped`, `iter_lines_capped`: a file read whole, or streamed line by line, never past a cap (a sparse
  8 GiB file, /dev/zero or one endless line is refused before it fills memory): TooLarge, a ValueError, beyond it.
  `iter_json_lines`: the one reading policy of batchscale's JSON-lines files (metrics.jsonl, samples.jsonl), streamed.
- `write_json_atomic`: write a JSON file under a temporary name, then rename it into place.
- `append_whole`: one line appended and fsynced whole, or cut back off (a full disk never leaves half a line).
- `write_error`: an OSError from a write (a full disk above all) as a UserError naming the path and the bytes needed;
  `os_error_of` finds the OSError inside a library's own exception (safetensors raises a SafetensorError whose text
  ends in "(os error 28)"), and `writing` removes what a failed write left and says why in that one line.
- `read_json_object`: read a JSON object, or fail with a UserError naming the file.
- `staged_directory`: build a directory beside its destination and swap it in whole. An earlier directory at the
  destination is replaced only once the new one is complete, and it is put back if anything fails.
- `removing_created`: a block whose failure removes exactly the named entries it created in a directory, never any
  other (a file another process put there meanwhile stays).
- `resolve_out`: an output path made absolute, a symbolic link followed to its target (the link is kept).
- `cache_root`, `exclusive_lock`, `build_once`: a cached build (the tiny model, a converted checkpoint) made once by one
  process while concurrent first uses wait, and renamed into place only when complete.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from batchscale.errors import UserError

FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
MAX_TEXT_BYTES = 2**30  # a config, a task's data file: text a person or a script wrote
MAX_DOCUMENT_BYTES = 256 * 2**20  # a JSON document batchscale wrote (analysis.json, run.json, ...): a few MB at most
READ_BLOCK_BYTES = 2**20
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how Rust's std::io::Error names the errno (safetensors)


class TooLarge(ValueError):
    """A file larger than its reader's cap (raised before the excess is read)."""


def dumps_strict(obj, indent: int | None = None) -> str:
    """json.dumps that raises ValueError on NaN or infinity (JSON has neither; `NaN` tokens break other readers)."""
    return json.dumps(obj, indent=indent, allow_nan=False)


def _refuse_constant(token: str):
    raise ValueError(f"{token} is not a JSON value (JSON has no NaN or infinity)")


def loads_strict(text: str | bytes):
    """json.loads that raises ValueError on the tokens NaN, Infinity and -Infinity (Python's json accepts them)."""
    return json.loads(text, parse_constant=_refuse_constant)


def decode_error(path: Path, error: UnicodeDecodeError, what: str | None = None, base_offset: int = 0) -> UserError:
    """A UnicodeDecodeError as a one-line UserError naming the file and the first bad byte's offset in it
    (`base_offset`: where the decoded chunk starts in the file)."""
    bad = error.object[error.start:error.start + 1]
    byte = f"byte 0x{bad.hex()}" if bad else "a byte"
    offset = base_offset + error.start
    subject = f"{path} is" if what else "is"
    return UserError(what or str(path), f"{subject} not UTF-8 text ({byte} at offset {offset}: {error.reason})",
                     "give a UTF-8 text file (is this a binary file, or another encoding?)")


def read_bytes_capped(path: Path, max_bytes: int) -> bytes:
    """The bytes of `path`, at most `max_bytes`: a regular file whose size is over it is refused before a byte is
    read, and anything else (a pipe, /dev/zero) once it passes it. Raises TooLarge (a ValueError) or OSError."""
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
            raise TooLarge(f"holds {info.st_size:,} bytes, more than the {max_bytes:,} this reads")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(f"holds more than the {max_bytes:,} bytes this reads")
    return data


def iter_lines_capped(path: Path, max_bytes: int, max_line_bytes: int) -> Iterator[tuple[int, int, bytes, bool]]:
    """(line index, byte offset, line without its newline, whether a newline ended it) for each line of `path`,
    streamed: only one line is ever held. A file over `max_bytes` (by its size, before a byte is read) or a line
    over `max_line_bytes` raises TooLarge naming the line, so a sparse 8 GiB file never fills memory."""
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
            raise TooLarge(f"holds {info.st_size:,} bytes, more than the {max_bytes:,} this reads")
        offset, index = 0, 0
        while True:
            line = f.readline(max_line_bytes + 1)
            if not line:
                return
            ended = line.endswith(b"\n")
            if len(line) > max_line_bytes and not (ended and len(line) == max_line_bytes + 1):
                raise TooLarge(f"line {index + 1} is longer than the {max_line_bytes:,} bytes this reads")
            if offset + len(line) > max_bytes:
                raise TooLarge(f"holds more than the {max_bytes:,} bytes this reads")
            yield index, offset, line[:-1] if ended else line, ended
            offset, index = offset + len(line), index + 1


def iter_json_lines(path: Path, max_bytes: int, max_line_bytes: int, fix: str) -> Iterator[tuple[int, object]]:
    """(line index, value) of each non-blank line of a JSON-lines file, streamed under the caps of
    iter_lines_capped. The one policy of every such file batchscale writes: a final line without its newline that is
    not JSON (a crash mid-write) is dropped with a DataWarning; any other line that is not strict JSON is a
    UserError naming the file and line (and the byte, for bad UTF-8), `fix` its fix; so are a file or line over its
    cap and a file that cannot be read."""
    import warnings

    from batchscale.errors import DataWarning

    try:
        for index, offset, line, ended in iter_lines_capped(path, max_bytes, max_line_bytes):
            if not line.strip():
                continue
            try:
                value = loads_strict(line)  # NaN and Infinity are no JSON: never written, so refused when read
            except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, a NaN token, a 5,000-digit integer
                if not ended:
                    warnings.warn(f"{path}: dropping the truncated last line {index + 1} (the run was interrupted "
                                  "while writing it)", DataWarning, stacklevel=3)
                    continue
                if isinstance(e, UnicodeDecodeError):
                    raise decode_error(path, e, f"{path} line {index + 1}", offset) from None
                raise UserError(f"{path} line {index + 1}", f"is not valid JSON ({e})", fix) from None
            yield index, value
    except TooLarge as e:
        raise too_large(path, e) from None
    except OSError as e:
        raise UserError(str(path), f"cannot be read ({e.strerror or e})",
                        "check the file and its permissions") from None


def too_large(path: Path, error: TooLarge, what: str | None = None) -> UserError:
    return UserError(what or str(path), f"{'' if what is None else f'{path} '}{error}",
                     "is it the right file? batchscale never writes one this large; cut it or point at another")


def read_text_utf8(path: Path, what: str | None = None, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The text of `path`; an unreadable, oversized (`max_bytes`) or non-UTF-8 file is a UserError naming it
    (`what`: the option it came from)."""
    path = Path(path)
    try:
        data = read_bytes_capped(path, max_bytes)
    except TooLarge as e:
        raise too_large(path, e, what) from None
    except OSError as e:
        raise UserError(what or str(path), f"cannot read {path} ({e.strerror or e})", "check the path and its "
                        "permissions") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise decode_error(path, e, what) from None


def write_error(path: Path, error: OSError, needed_bytes: int | None = None) -> UserError:
    """An OSError raised while writing `path` as a one-line UserError: a full disk names the path and the bytes the
    write needed (when known); anything else names the path and the system's reason."""
    if error.errno in FULL_DISK_ERRNOS:
        needed = f" (the write needed {needed_bytes:,} bytes)" if needed_bytes else ""
        return UserError(str(path), f"cannot be written: no space left on the device{needed}",
                         "free space on that file system or write somewhere else")
    return UserError(str(path), f"cannot be written ({error.strerror or error})",
                     "check that the directory exists and is writable")


def append_whole(handle, data: bytes) -> None:
    """Append `data` to an unbuffered binary file (`open(path, "ab", buffering=0)`) and fsync it; if the write fails
    (a full disk), cut the file back to its length before, so no half line is ever left for a reader."""
    before = os.fstat(handle.fileno()).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[handle.write(view):]
        os.fsync(handle.fileno())
    except OSError:
        try:
            os.ftruncate(handle.fileno(), before)
        except OSError:
            pass
        raise


def os_error_of(error: BaseException) -> OSError | None:
    """The OSError behind `error`: itself, one it was raised from, or, for a library that raises its own type (a
    SafetensorError "... (os error 28)"), one rebuilt from the errno its text names; None when there is none."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, OSError) and error.errno is not None:
            return error
        if not isinstance(error, OSError) and (match := RUST_OS_ERROR.search(str(error))):
            number = int(match.group(1))
            return OSError(number, os.strerror(number))
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


@contextmanager
def writing(path: Path, remove: tuple[Path, ...] | list[Path] = ()) -> Iterator[None]:
    """A block that writes `path` (with a library's writer): if it fails, each of `remove` (what the block was
    writing) is removed, and a failure with an OSError behind it (a full disk, whatever type the library raised)
    becomes write_error's one line naming `path`."""
    try:
        yield
    except BaseException as e:
        for target in remove:
            target = Path(target)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            elif os.path.lexists(target):
                target.unlink()
        if isinstance(e, UserError) or not isinstance(e, Exception):
            raise
        if (cause := os_error_of(e)) is not None:
            raise write_error(path, cause) from None
        raise


def write_json_atomic(path: Path, obj) -> None:
    path = Path(path)
    text = dumps_strict(obj, indent=2) + "\n"  # serialize first: a refused value leaves no temporary file
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(path, e, len(text.encode())) from None


def read_json_object(path: Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> dict:
    path = Path(path)
    try:
        data = loads_strict(read_bytes_capped(path, max_bytes).decode("utf-8"))  # JSON is UTF-8 (RFC 8259)
    except UnicodeDecodeError as e:
        raise decode_error(path, e) from None
    except TooLarge as e:
        raise too_large(path, e) from None
    except (OSError, ValueError) as e:  # ValueError: JSONDecodeError, or a NaN/Infinity token
        raise UserError(f"{path}", f"is not readable JSON ({e})", "regenerate it") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}", "must hold a JSON object", "regenerate it")
    return data


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unique_suffix() -> str:
    """A name part no other process (on any host sharing the directory) will pick: pid plus a random token."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


@contextmanager
def staged_directory(out: Path, purpose: str, follow_link: bool = True) -> Iterator[Path]:
    """Yield an empty directory beside `out`; when the block succeeds it becomes `out`, else it is removed.
    `follow_link` False (a path inside a directory batchscale owns, such as a run's policy/): a link at `out` is
    refused, never followed out of that directory, before anything is written."""
    if not follow_link and Path(out).is_symlink():
        raise UserError(str(out), f"is a symbolic link (to {os.readlink(out)}), where batchscale writes a directory "
                        "of its own; it never writes or deletes through a link", f"remove the link {out} and rerun")
    out = resolve_out(out)  # a link to the destination stays a link: its target is replaced
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.{purpose}-{unique_suffix()}"
    staging.mkdir()
    replaced = None
    try:
        yield staging
        if out.is_dir() and any(out.iterdir()):
            replaced = out.parent / f".{out.name}.replaced-{unique_suffix()}"
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


@contextmanager
def removing_created(directory: Path, names: tuple[str, ...] | list[str]) -> Iterator[None]:
    """If the block fails, remove each of `names` (entries directly under `directory`) that did not exist before it,
    and `directory` itself if the block created it and it is left empty: exactly what the block created, by name.
    An OSError the block raises without naming a file (a full disk inside a library's write) becomes a UserError
    naming `directory`."""
    directory = Path(directory)
    existed = directory.is_dir()
    before = {name for name in names if os.path.lexists(directory / name)} if existed else set()
    try:
        yield
    except BaseException as e:
        for name in dict.fromkeys(names):
            path = directory / name
            if name in before or not os.path.lexists(path):
                continue
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink()
        if not existed and directory.is_dir():
            try:
                directory.rmdir()  # only if empty
            except OSError:
                pass
        if isinstance(e, OSError) and e.errno is not None:
            raise write_error(Path(e.filename) if e.filename else directory, e) from None
        raise


def resolve_out(path: Path) -> Path:
    """`path` made absolute, a symbolic link followed to its target: the target is what a writer checks and
    replaces, and the link itself is kept."""
    path = Path(path).absolute()
    return Path(os.path.realpath(path)) if path.is_symlink() else path


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created if missing) for the block; a second process waits. The kernel
    releases it when the holder dies, however it dies, so a crashed holder never blocks the next one."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # never through a link, never truncating: the file's content is not used
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise UserError(str(path), f"cannot be opened as a lock file ({e.strerror or e}; a link is never followed)",
                        f"move {path} away (it is not batchscale's) and rerun") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def cache_root() -> Path:
    """Where cached builds live: $BATCHSCALE_CACHE, else ~/.cache/batchscale."""
    return Path(os.environ.get("BATCHSCALE_CACHE", Path.home() / ".cache" / "batchscale"))


def remove_stale_builds(target: Path) -> list[Path]:
    """Remove the staging directories an earlier build of `target` left (`.NAME.building-PID-TOKEN`, and an earlier
    one it was replacing): call while holding the build lock, which no live builder holds, so every one is a dead
    builder's (killed with SIGKILL, or a power cut)."""
    removed = []
    for pattern in (f".{target.name}.building-*", f".{target.name}.replaced-*"):
        for path in target.parent.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def build_once(target: Path, build: Callable[[Path], None], log: Callable[[str], None], what: str,
               replace: Callable[[Path], bool] | None = None) -> Path:
    """`target`, built on first use by `build(staging_dir)` and renamed into place complete. Concurrent first uses
    (several sweep workers) build it once: the others wait on a lock beside it, then find it built. A built target
    for which `replace(target)` is true is built again and swapped in the same way."""
    target = Path(target)

    def built() -> bool:
        return (target / "config.json").is_file() and not (replace is not None and replace(target))

    if built():
        return target
    with exclusive_lock(target.parent / f".{target.name}.lock"):
        if built():  # another process built it while this one waited
            return target
        remove_stale_builds(target)
        log(f"{what} (once, cached in {target})")
        with staged_directory(target, "building") as staging:
            build(staging)
    return target
