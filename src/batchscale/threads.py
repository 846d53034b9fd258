"""How many threads a process computes on: the CPUs it may actually use, and what the work gains from more.

`available_cpus` counts the CPUs this process may run on (`os.sched_getaffinity`, e.g. `taskset`, a Slurm or
Kubernetes cpuset) and caps them by the CPU quota of its cgroup (v2 `cpu.max`, v1 `cpu.cfs_quota_us` /
`cpu.cfs_period_us`, every level from the process's cgroup up to the mount's root), rounded down: a container
granted 1.5 CPUs on a 64-core host gets 1 thread, not 64 threads that the kernel throttles in turn.

`choose_threads` then picks torch's intra-op threads: what the user set (`run.threads`, `--threads`), else one for
a model listed in ONE_THREAD_MODELS (a model measured to gain nothing from a second thread; none is, so far), else
the process's share of the available CPUs (a sweep's W workers get C // W each).

Torch's OpenMP threads spin while they wait for work, so two of them on a busy core pair stall each other at every
operation: that, not the thread count, is what collapsed the tiny model's training under load (issue 45: a GRPO step
of ~57 s with two spinning threads against 0.46-1.0 s with two passive ones, load 13-23, one core kept busy;
docs/LOG.md, 2026-12-03). `wait_passively` sets OMP_WAIT_POLICY=PASSIVE (GNU and LLVM OpenMP) and KMP_BLOCKTIME=0
(Intel's) where the user has not set them; OpenMP reads them once, when its runtime starts, so the CLI calls it before
anything imports torch (batchscale.cli.main). Waiting passively, the tiny model's step ran 2.1-5.3x faster on two
threads than on one under that load (each thread gets its share of a contended core), and 1.1-1.4x on an idle pair
(demo.py), so it gets one thread per CPU like any model.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
PASSIVE_WAIT = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
# Models measured to gain nothing from a second thread, -> why (the threads line says it). The tiny model is not one:
# with OpenMP waiting passively it gains 1.1-1.4x on an idle pair and 2.1-5.3x under load (docs/LOG.md, 2026-12-03).
ONE_THREAD_MODELS: dict[str, str] = {}

_passive_set: set[str] = set()  # the variables wait_passively set in this process (the threads line says so)


def wait_passively(environ: dict | None = None) -> tuple[str, ...]:
    """Set OMP_WAIT_POLICY=PASSIVE and KMP_BLOCKTIME=0 in `environ` (default: this process's) where unset; returns
    the names it set. Call before torch is imported: OpenMP reads them when its runtime starts."""
    env = os.environ if environ is None else environ
    added = tuple(name for name in PASSIVE_WAIT if name not in env)
    for name in added:
        env[name] = PASSIVE_WAIT[name]
    if environ is None:
        _passive_set.update(added)
    return added


def passive_note() -> str:
    """What wait_passively did, for the threads line: "" when the user set both variables themselves."""
    if not _passive_set:
        return ""
    names = [n for n in PASSIVE_WAIT if n in _passive_set]
    return f"; OpenMP waits passively ({', '.join(f'{n}={PASSIVE_WAIT[n]}' for n in names)} set, as you had not)"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _quota_v2(directory: Path) -> float | None:
    """CPUs granted by a cgroup v2 directory's cpu.max ("max 100000": no limit; "150000 100000": 1.5 CPUs)."""
    text = _read(directory / "cpu.max")
    parts = text.split() if text else []
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(directory: Path) -> float | None:
    """CPUs granted by a cgroup v1 cpu directory (cpu.cfs_quota_us of -1: no limit)."""
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    try:
        quota_us, period_us = int(quota or ""), int(period or "")
    except ValueError:
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def _levels(mount: Path, path: str) -> list[Path]:
    """`mount`/`path` and each directory above it up to `mount` (a limit anywhere on the way applies)."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    return [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The smallest CPU quota on this process's cgroup path, in CPUs (may be fractional); None when there is none."""
    limits: list[float] = []
    text = _read(proc_cgroup) or "0::/"
    for line in text.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":  # cgroup v2 (unified), at the root or under unified/ (hybrid)
            for mount in (root, root / "unified"):
                limits += [q for d in _levels(mount, path) if (q := _quota_v2(d)) is not None]
        elif "cpu" in controllers.split(","):
            for name in (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"):
                mount = root / name
                if mount.is_dir():
                    limits += [q for d in _levels(mount, path) if (q := _quota_v1(d)) is not None]
                    break
    return min(limits) if limits else None


@dataclass(frozen=True)
class CpuCount:
    cpus: int  # whole CPUs this process may keep busy
    affinity: int  # CPUs it may run on
    quota: float | None  # its cgroup's CPU quota, None when unlimited

    def describe(self) -> str:
        text = f"{self.cpus} CPU{'s' if self.cpus != 1 else ''} available"
        if self.quota is not None and self.quota < self.affinity:
            text += f": a cgroup quota of {self.quota:g} of {self.affinity}"
        return text


def available_cpus(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP, affinity: int | None = None) -> CpuCount:
    """The CPUs this process may actually keep busy: its affinity, capped by its cgroup's quota (rounded down,
    at least 1)."""
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_limit(root, proc_cgroup)
    cpus = affinity if quota is None else max(1, min(affinity, math.floor(quota)))
    return CpuCount(cpus, affinity, quota)


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    available: CpuCount
    why: str  # why this many
    override: str  # how to choose another: "run.threads", "--threads"

    def line(self) -> str:
        """"threads: 2 (2 CPUs available; one per CPU: run.threads to override)"."""
        how = "" if self.why.startswith("set by") else f": {self.override} to override"
        return f"threads: {self.threads} ({self.available.describe()}; {self.why}{how}){passive_note()}"


def choose_threads(model_name: str | None, requested: int | None = None, workers: int = 1,
                   override: str = "run.threads", available: CpuCount | None = None) -> ThreadChoice:
    """torch's intra-op threads for one process of `workers` running side by side on this machine's CPUs."""
    available = available or available_cpus()
    if requested is not None:
        return ThreadChoice(requested, available, f"set by {override}", override)
    share = max(1, available.cpus // max(1, workers))
    if model_name in ONE_THREAD_MODELS:
        return ThreadChoice(1, available, ONE_THREAD_MODELS[model_name], override)
    why = "one per CPU" if workers <= 1 else f"an equal share for each of {workers} workers"
    return ThreadChoice(share, available, why, override)
