"""Locks: one process at a time writes a sweep directory, or a run.

    <sweep>/sweep.lock    {"pid", "host", "started"} of the process holding the sweep
    <parent>/.<run>.lock  the same, of the process training (or resuming) the run <parent>/<run>

`SweepLock(sweep_dir)` is held for the whole sweep, `RunLock(run_dir)` for the whole of a `train` or `train
--resume` (beside the run directory, so a failed start still leaves nothing inside it). Taking it is atomic: an exclusive `flock` on the lock file, which
the kernel releases when its holder dies however it dies (kill -9 included), so a second sweep on the same directory
can never start while the first lives. The file's content names the holder, for the message the second one prints.

A stale lock (its holder died) is taken over: the flock is free, and the pid it names is no longer alive on this host.
A lock naming another host is never taken over, because this host cannot see whether that process lives (a shared file
system whose locks do not span hosts would otherwise let two sweeps in); nor is one whose pid still lives on this host
although its flock is free (a file system without working locks): both are refused with the fix of removing the file
by hand once the named process is gone. The holder removes the file when it releases the lock.

The lock file is batchscale's own or it is refused, never written through: it is opened without following a link
(O_NOFOLLOW), created only where nothing is (O_EXCL), and an existing one is truncated only when it is a regular file
of one name whose content is a lock's (empty, or a JSON holder). A link, a directory, a device, a FIFO, a hard link
or a file with other content at the lock's path is a UserError naming it, and the file is left as it is.

What a killed writer of a run left beside it (SIGKILL during `train --overwrite` or `import`: its staging directory
`.<run>.training-PID-TOKEN` or `.<run>.writing-PID-TOKEN`, files.staged_directory) is removed by the next process that
takes the run's lock (`RunLock.acquire`, `clear_dead_stagings`): holding the lock, no live writer of this run exists,
and each one removed names a pid that is no longer alive on this host. An earlier run a kill caught mid-swap
(`.<run>.replaced-PID-TOKEN` with no `<run>`) is put back in place, never removed.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import socket
import stat
import time
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import resolve_out, write_error

LOCK_FILE = "sweep.lock"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (a zombie counts as dead: it runs nothing)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def describe_holder(holder: dict) -> str:
    started = holder.get("started")
    since = f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}" if isinstance(started, (int, float)) else ""
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}{since}"


class SweepLock:
    """An exclusive lock on a sweep directory, held from `acquire` (or `with`) to `release`."""

    what = "sweep"

    def __init__(self, sweep_dir: Path):
        self.path = Path(sweep_dir) / LOCK_FILE
        self.target = Path(sweep_dir)
        self._fd: int | None = None

    def __enter__(self) -> "SweepLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, taking over a stale one; a live holder is a UserError naming it."""
        for _ in range(10):  # the file may be replaced under us by a holder releasing it: then try again
            fd = self._open()
            if fd is None:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._read_holder(fd, wait_s=1.0)  # the holder may not have written its name yet
                os.close(fd)
                raise self._busy(holder) from None
            except OSError:  # no locks on this file system: fall back on the pid alone
                pass
            if not self._is_current_file(fd):
                os.close(fd)
                continue
            holder = self._read_holder(fd)
            if holder and not self._is_stale(holder):
                os.close(fd)
                raise self._busy(holder, free_flock=True)
            if not holder and os.fstat(fd).st_size > 0:  # not a lock's content: never truncated
                os.close(fd)
                raise self._not_a_lock("holds something other than a batchscale lock")
            try:
                self._write_holder(fd)
            except OSError as e:  # a full disk: no lock file is left behind
                os.close(fd)
                self.path.unlink(missing_ok=True)
                raise write_error(self.path, e) from None
            self._fd = fd
            return
        raise UserError(str(self.path), f"kept changing while this {self.what} tried to lock it", "try again")

    def _open(self) -> int | None:
        """The lock file, opened without following a link: an existing one only if it is a regular file of one
        name (a hard link's other names could be a user's file), else created afresh (O_EXCL); None: it changed
        between the two, try again."""
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            before = os.lstat(self.path)
        except FileNotFoundError:
            try:
                return os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return None
            except OSError as e:
                raise write_error(self.path, e) from None
        except OSError as e:
            raise write_error(self.path, e) from None
        if stat.S_ISLNK(before.st_mode):
            raise self._not_a_lock("is a symbolic link")
        if not stat.S_ISREG(before.st_mode):  # a device or a FIFO is never even opened
            raise self._not_a_lock("is not a regular file")
        if before.st_nlink != 1:
            raise self._not_a_lock(f"is a file with {before.st_nlink} names (a hard link)")
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                return None  # replaced by a link meanwhile: the next try refuses it
            raise write_error(self.path, e) from None
        if not os.path.samestat(os.fstat(fd), before):
            os.close(fd)
            return None
        return fd

    def _not_a_lock(self, why: str) -> UserError:
        return UserError(str(self.path), f"{why}, not a lock file batchscale wrote; batchscale never writes "
                         "through it", f"move {self.path} away (it is not batchscale's) and rerun")

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            if self._is_current_file(self._fd):  # never a file put in its place since
                self.path.unlink(missing_ok=True)  # before unlocking: a newcomer then locks a fresh file, never this one
        finally:
            os.close(self._fd)  # closing releases the flock
            self._fd = None

    def _is_current_file(self, fd: int) -> bool:
        """The file we locked is still the one at the path (a releasing holder unlinks it)."""
        try:
            return os.path.samestat(os.fstat(fd), os.lstat(self.path))
        except FileNotFoundError:
            return False

    @staticmethod
    def _read_holder(fd: int, wait_s: float = 0.0) -> dict:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                holder = {}
            if holder or time.monotonic() >= deadline:
                return holder if isinstance(holder, dict) else {}
            time.sleep(0.05)

    @staticmethod
    def _is_stale(holder: dict) -> bool:
        """A holder that is gone: it named this host and its pid is no longer alive here (we hold the flock)."""
        pid = holder.get("pid")
        if holder.get("host") != socket.gethostname() or not isinstance(pid, int):
            return False
        return pid == os.getpid() or not pid_alive(pid)

    def _write_holder(self, fd: int) -> None:
        text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
        os.fsync(fd)

    def _busy(self, holder: dict, free_flock: bool = False) -> UserError:
        who = describe_holder(holder) if holder else "another process"
        if free_flock:  # a lock we cannot prove stale
            return UserError(str(self.target), f"is locked by a {self.what} ({who}) that this host cannot show to be "
                             "gone", f"if that {self.what} is no longer running, remove {self.path} and rerun")
        return UserError(str(self.target), f"is in use by another {self.what} ({who})",
                         f"wait for that {self.what} to finish (or stop it), or choose another --out")


def run_lock_path(run_dir: Path) -> Path:
    """The lock file of the run `run_dir`: its hidden sibling `.<name>.lock`."""
    run_dir = resolve_out(run_dir)  # a link and its target share one lock
    return run_dir.parent / f".{run_dir.name}.lock"


class RunLock(SweepLock):
    """An exclusive lock on one run directory (which need not exist yet): its file is the hidden sibling
    `.<name>.lock` (`run_lock_path`)."""

    what = "run"

    def __init__(self, run_dir: Path):
        run_dir = resolve_out(run_dir)
        try:
            run_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a parent that is a file, or not writable
            raise write_error(run_dir.parent, e) from None
        self.path = run_lock_path(run_dir)
        self.target = run_dir
        self._fd = None
        self.cleared: list[Path] = []  # what a killed writer of the run had left, removed on acquire

    def acquire(self) -> None:
        super().acquire()
        self.cleared = clear_dead_stagings(self.target)


DEAD_STAGING = r"\.{name}\.(?P<purpose>training|writing|replaced)-(?P<pid>\d{{1,9}})-[0-9a-f]{{8}}"  # unique_suffix


def clear_dead_stagings(run_dir: Path) -> list[Path]:
    """Remove the staging directories a killed writer of `run_dir` left beside it, and put back an earlier run a kill
    caught between the two renames of its swap (see the module docstring); call while holding the run's lock.
    Returns what was removed or put back."""
    pattern = re.compile(DEAD_STAGING.format(name=re.escape(run_dir.name)))
    found = []
    for path in sorted(run_dir.parent.iterdir()) if run_dir.parent.is_dir() else []:
        match = pattern.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink() and not pid_alive(int(match["pid"])):
            found.append((match["purpose"], path))
    cleared = []
    for purpose, path in found:
        if purpose == "replaced" and not os.path.lexists(run_dir):
            path.rename(run_dir)  # the earlier run, whose replacement never took its place
        else:
            shutil.rmtree(path, ignore_errors=True)
        cleared.append(path)
    return cleared
