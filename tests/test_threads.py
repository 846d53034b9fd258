"""Thread defaults that survive a busy machine (issue 45): the CPUs a process may use (affinity, cgroup v1 and v2
quotas, read from fake trees), the choice per model and workers, the overrides, the line that says it, and OpenMP's
passive wait set before torch starts its runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchscale import threads
from batchscale.threads import available_cpus, cgroup_cpu_limit, choose_threads

SRC = Path(__file__).resolve().parents[1] / "src"


def cgroup_tree(tmp_path: Path, files: dict[str, str], proc: str) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (tmp_path / "proc_cgroup").write_text(proc)
    return root, tmp_path / "proc_cgroup"


def test_cgroup_v2_quota_is_read_along_the_process_path_and_the_smallest_wins(tmp_path):
    root, proc = cgroup_tree(tmp_path, {"cpu.max": "max 100000\n", "job/cpu.max": "300000 100000\n",
                                        "job/step/cpu.max": "150000 100000\n"}, "0::/job/step\n")
    assert cgroup_cpu_limit(root, proc) == 1.5
    assert available_cpus(root, proc, affinity=8).cpus == 1  # rounded down: 1.5 CPUs keep one thread busy
    assert "a cgroup quota of 1.5 of 8" in available_cpus(root, proc, affinity=8).describe()


def test_cgroup_v1_quota_and_no_limit(tmp_path):
    root, proc = cgroup_tree(tmp_path, {"cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
                                        "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
                                        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "200000\n",
                                        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"},
                             "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n")
    assert cgroup_cpu_limit(root, proc) == 2.0
    assert available_cpus(root, proc, affinity=16).cpus == 2
    root, proc = cgroup_tree(tmp_path / "none", {"cpu.max": "max 100000\n"}, "0::/\n")
    assert cgroup_cpu_limit(root, proc) is None
    assert available_cpus(root, proc, affinity=3).cpus == 3


def test_a_quota_above_the_affinity_and_unreadable_files_change_nothing(tmp_path):
    root, proc = cgroup_tree(tmp_path, {"cpu.max": "800000 100000\n", "odd/cpu.max": "garbage\n"}, "0::/odd\n")
    count = available_cpus(root, proc, affinity=2)
    assert (count.cpus, count.quota) == (2, 8.0) and count.describe() == "2 CPUs available"
    assert available_cpus(tmp_path / "missing", tmp_path / "missing-proc", affinity=4).cpus == 4
    root, proc = cgroup_tree(tmp_path / "tiny", {"cpu.max": "20000 100000\n"}, "0::/\n")
    assert available_cpus(root, proc, affinity=4).cpus == 1  # a fifth of a CPU still runs one thread


def test_the_real_machine_counts_at_least_one_cpu_within_its_affinity():
    count = available_cpus()
    assert 1 <= count.cpus <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize("model, requested, workers, cpus, expected, why", [
    ("tiny", None, 1, 2, 2, "one per CPU"),  # waiting passively, a second thread gains under load too (LOG.md)
    ("tiny", None, 2, 2, 1, "an equal share for each of 2 workers"),
    ("smollm2-135m", None, 1, 2, 2, "one per CPU"),
    ("smollm2-135m", None, 2, 8, 4, "an equal share for each of 2 workers"),
    ("smollm2-135m", None, 4, 2, 1, "an equal share for each of 4 workers"),
    ("tiny", 2, 1, 2, 2, "set by run.threads"),
    ("/models/llama", 3, 2, 2, 3, "set by run.threads"),  # the user's number stands, even past the CPUs
])
def test_the_choice_follows_the_work_the_workers_and_the_override(model, requested, workers, cpus, expected, why):
    choice = choose_threads(model, requested, workers, available=threads.CpuCount(cpus, cpus, None))
    assert (choice.threads, choice.why) == (expected, why)


def test_the_line_says_the_choice_the_cpus_the_reason_and_the_override(monkeypatch):
    monkeypatch.setattr(threads, "_passive_set", set())
    line = choose_threads("tiny", override="--threads", available=threads.CpuCount(2, 2, None)).line()
    assert line == "threads: 2 (2 CPUs available; one per CPU: --threads to override)"
    monkeypatch.setitem(threads.ONE_THREAD_MODELS, "toy", "the toy model gains nothing from a second")
    assert choose_threads("toy", available=threads.CpuCount(2, 2, None)).line() == (
        "threads: 1 (2 CPUs available; the toy model gains nothing from a second: run.threads to override)")
    monkeypatch.setattr(threads, "_passive_set", {"OMP_WAIT_POLICY"})
    assert choose_threads("tiny", available=threads.CpuCount(2, 2, None)).line().endswith(
        "; OpenMP waits passively (OMP_WAIT_POLICY=PASSIVE set, as you had not)")


def test_wait_passively_sets_only_what_the_user_left_unset():
    env = {"KMP_BLOCKTIME": "200"}
    assert threads.wait_passively(env) == ("OMP_WAIT_POLICY",)
    assert env == {"KMP_BLOCKTIME": "200", "OMP_WAIT_POLICY": "PASSIVE"}
    assert threads.wait_passively(env) == ()


PROBE = """
import importlib.abc, json, os, sys
class Stop(Exception):
    pass
class Watch(importlib.abc.MetaPathFinder):  # at the first import of torch: note OpenMP's variables, then stop
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise Stop(json.dumps({k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "KMP_BLOCKTIME")}))
        return None
sys.meta_path.insert(0, Watch())
from batchscale.cli import main
assert "torch" not in sys.modules, "importing the CLI imported torch"
try:
    main(["profile", "generation", "--model", "tiny", "--threads", "1"])  # imports torch to set its threads
except Stop as seen:
    print(seen)
"""


@pytest.mark.parametrize("user_env, expected", [
    ({}, {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "ACTIVE", "KMP_BLOCKTIME": "0"}),
])
def test_the_cli_sets_passive_waiting_before_torch_is_imported_unless_the_user_did(user_env, expected):
    env = {k: v for k, v in os.environ.items() if k not in threads.PASSIVE_WAIT}
    env.update(user_env, PYTHONPATH=str(SRC))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected, out.stderr
