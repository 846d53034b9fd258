"""Executors: where sweep points run. Both take the same (point, staging directory) jobs and yield, as each run ends,
the job and its summary (or the exception it raised); the sweep moves finished runs into place itself.

- local: a pool of spawned worker processes (spawn, not fork: torch's thread pools do not survive fork). Each worker
  dies with the sweep (`runner.init_worker`: parent-death signal); a sweep that stops early (an error, Ctrl-C) kills
  its workers rather than waiting for them.
- ray: each point a Ray task reserving `threads` CPUs; `ray.init()` starts a local cluster unless an address is given.
  A sweep that stops early cancels its pending tasks (force: their workers are killed); a driver killed outright is
  cleaned up by Ray itself, which ends a dead driver's tasks.
Progress events (start / record / done) travel over a queue each executor provides.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

from batchscale.errors import UserError
from batchscale.sweep.runner import init_worker, run_point
from batchscale.sweep.spec import Point

EXECUTORS = ("local", "ray")

Job = tuple[Point, Path]  # a point and the staging directory the sweep named for it
Outcome = tuple[Job, "dict | BaseException"]


def _drain(events) -> list:
    out = []
    while True:
        try:
            out.append(events.get_nowait())
        except Exception as e:  # queue.Empty, or ray's own Empty
            if type(e).__name__ != "Empty":
                raise
            return out


def _kill_workers(pool) -> None:
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.kill()


def run_local(jobs: list[Job], workers: int, threads: int, on_events: Callable[[list], None]) -> Iterator[Outcome]:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=init_worker,
                               initargs=(events, os.getpid()))
    futures = {pool.submit(run_point, point.config_data, str(staging), point.name, threads): (point, staging)
               for point, staging in jobs}
    pending = set(futures)
    try:
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            on_events(_drain(events))
            for future in done:
                error = future.exception()
                yield futures[future], (error if error is not None else future.result())
        on_events(_drain(events))
    finally:
        if pending:  # stopped early: the runs still going are abandoned, not awaited
            _kill_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)


def run_ray(jobs: list[Job], threads: int, address: str | None, on_events: Callable[[list], None]) -> Iterator[Outcome]:
    try:
        import ray
        from ray.util.queue import Queue
    except ImportError:
        raise UserError("--executor", "ray is not installed", "pip install 'batchscale[ray]' or use --executor local") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    events = Queue()
    task = ray.remote(num_cpus=threads)(run_point)
    refs = {task.remote(point.config_data, str(staging), point.name, threads, events): (point, staging)
            for point, staging in jobs}
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
            on_events(_drain(events))
            for ref in done:
                try:
                    yield refs[ref], ray.get(ref)
                except Exception as e:  # RayTaskError wraps what the task raised
                    yield refs[ref], getattr(e, "cause", None) or e
        on_events(_drain(events))
    finally:
        for ref in pending:  # stopped early: end the tasks still running, do not leave them training
            ray.cancel(ref, force=True)
