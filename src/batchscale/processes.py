"""Child processes that never outlive their parent: a killed sweep or trainer leaves no worker behind.

`die_with_parent(parent_pid)` is the first thing a batchscale child process does (sweep pool workers, user-reward
workers). On Linux it asks the kernel for SIGKILL when the parent dies (prctl PR_SET_PDEATHSIG, through ctypes), which
holds even when the parent is killed with SIGKILL and cannot clean up. Two gaps remain and are closed here: a parent
that died before the call (checked at once), and systems without prctl (a daemon thread polls the parent pid once a
second). Note that PR_SET_PDEATHSIG fires when the parent *thread* that started the child exits; batchscale starts
its children from threads that live as long as the children are used (the main thread, or the pool's own thread).

`terminate_gracefully()` (the command line's, for its whole run) turns SIGTERM into `Terminated`, an exception, so
the cleanup a Ctrl-C runs (staging and building directories removed, locks released, children stopped) runs on a
SIGTERM too; without it Python dies at once and leaves them behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_S = 1.0


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(POLL_S)
        if os.getppid() != parent_pid:
            _kill_self()


def request_parent_death_signal() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int) -> None:
    """Make this process die when `parent_pid` (its parent) does (see the module docstring), and leave Ctrl-C to the
    parent: the terminal sends SIGINT to the whole foreground group, and a child that took it would print its own
    KeyboardInterrupt traceback; the parent stops its children as it exits (or they die with it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    armed = request_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        _kill_self()
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent_pid,), name="batchscale-parent-watch", daemon=True).start()


class Terminated(BaseException):
    """SIGTERM, raised where the process was (a BaseException, like KeyboardInterrupt: no `except Exception` eats it)."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


@contextmanager
def terminate_gracefully():
    """For the block, SIGTERM raises `Terminated` in the main thread (elsewhere: nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
