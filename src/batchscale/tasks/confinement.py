"""Confinement of a process that runs code it did not choose (a scorer that evaluates a model's answer), with what
Linux gives an unprivileged process, through ctypes (no package wraps these well enough to earn a dependency):

- Landlock (Linux 5.13+, enabled in the kernel's LSM list): after `restrict_filesystem(readable)` the process and
  every child it forks may only read (and execute) files beneath `readable` (the Python installation's libraries);
  it can create, write, truncate, remove, rename or link nothing anywhere, and read nothing else: not the run, not
  the user's home. Landlock ABI 4+ also refuses TCP bind/connect, ABI 6+ signals to processes outside the domain (the
  trainer) and abstract unix sockets. A restriction cannot be lifted, even by root. Requires no_new_privs (set here).
- A network namespace (`isolate_network`): unshare(CLONE_NEWUSER | CLONE_NEWNET) leaves only a loopback device that
  is down, so no socket reaches anything. Needs unprivileged user namespaces (or root); many hosts refuse them
  (Ubuntu 24.04's AppArmor default, Docker's default seccomp profile), so it is a second layer, not a requirement. In
  the new user namespace root's capabilities no longer reach outside it: a limit set below cannot be raised again.
- Resource limits (`limit_resources`): address space, CPU seconds, open files, no file bytes (RLIMIT_FSIZE 0) and no
  new processes (RLIMIT_NPROC 0, not enforced for root outside a user namespace).

What is not confined: the process may still read the Python library and compute as long as the caller lets it; with
Landlock ABI < 6, it may signal processes of the same user (stopping the trainer, which then fails: no data lost); a
compromised scorer can lie about its score (nothing can prevent that). Without Landlock none of the file-system
guarantees hold, and callers refuse to evaluate text there (tasks.reasoning_gym_task).
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys

SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446  # every Linux arch
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
# <linux/landlock.h> LANDLOCK_ACCESS_FS_*: the rights each ABI version handles (a right not handled is not denied)
FS_EXECUTE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 2, 1 << 3
FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4+
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6+


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel's header
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers; 0 where it has none (not Linux, too old, or disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _libc().syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def landlock_missing_reason() -> str | None:
    """Why this machine cannot confine a process's file access (None: it can)."""
    if not sys.platform.startswith("linux"):
        return f"Landlock is Linux's, and this is {sys.platform}"
    if landlock_abi() == 0:
        return (f"this Linux kernel ({os.uname().release}) offers no Landlock (it needs 5.13+ with landlock in its "
                "LSM list)")
    return None


def restrict_filesystem(readable: list[str]) -> dict:
    """Confine this process and its future children with Landlock (module docstring): read-only access beneath each
    directory of `readable`, nothing else; TCP and outside signals refused where the ABI can. Returns what was applied;
    raises OSError where it cannot be."""
    abi = landlock_abi()
    if abi == 0:
        raise OSError(landlock_missing_reason())
    libc = _libc()
    fs_rights = FS_RIGHTS_BY_ABI.get(abi, FS_RIGHTS_BY_ABI[5])
    attr = _RulesetAttr(fs_rights, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # the kernel reads only the fields its ABI knows
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for path in dict.fromkeys(readable):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
            except OSError:
                continue  # a library directory that does not exist has nothing to read
            try:
                rule = _PathBeneathAttr(FS_EXECUTE | FS_READ_FILE | FS_READ_DIR, fd)
                if libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule),
                                ctypes.c_uint32(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return {"landlock_abi": abi, "tcp_refused": abi >= 4, "outside_signals_refused": abi >= 6}


def isolate_network() -> bool:
    """Move this (single-threaded) process into a new user and network namespace; False where the host refuses."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _libc().unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        return False


def limit_resources(address_space_bytes: int, cpu_s: int, open_files: int) -> None:
    """Lower soft and hard limits together (module docstring); a limit already lower stays."""
    for which, value in ((resource.RLIMIT_AS, address_space_bytes), (resource.RLIMIT_CPU, cpu_s),
                         (resource.RLIMIT_NOFILE, open_files), (resource.RLIMIT_FSIZE, 0),
                         (resource.RLIMIT_NPROC, 0), (resource.RLIMIT_CORE, 0)):
        soft, hard = resource.getrlimit(which)
        new = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (new, new))


def address_space_bytes() -> int:
    """This process's current virtual size (what an address-space limit must leave room above)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
