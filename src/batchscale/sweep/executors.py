"""Executors: where sweep points run. Both take the same jobs (a point, its staging directory, whether to resume the
unfinished run there: sweep.resume) and yield, as each run ends, the job and its summary (or the exception it
raised); the sweep moves finished runs into place itself.

- local: a pool of spawned worker processes (spawn, not fork: torch's thread pools do not survive fork). Each worker
  dies with the sweep (`runner.init_worker`: parent-death signal); a sweep that stops early (an error, Ctrl-C) kills
  its workers rather than waiting for them.
- ray: each point a Ray task reserving `threads` CPUs; `ray.init()` starts a local cluster unless an address is given.
  A sweep that stops early cancels its pending tasks (force: their workers are killed); a driver killed outright is
  cleaned up by Ray itself, which ends a dead driver's tasks.
Both take jobs one at a time (`submit`) and return outcomes as runs end (`next_outcome`): a plain sweep submits all
of them at once (`run_jobs`), a racing sweep (sweep/adaptive.py) each after deciding on the last outcome. Progress
events (start / record / done) travel over a queue each executor provides.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from batchscale.errors import UserError
from batchscale.sweep.runner import init_worker, run_point
from batchscale.sweep.spec import Point

EXECUTORS = ("local", "ray")


class RunJob(NamedTuple):
    """One run to submit: a point, where it trains, and whether it continues an interrupted one there."""

    point: Point
    staging: Path  # the staging directory the sweep named for it, or claimed from an interrupted sweep
    resume: bool = False  # continue the unfinished run in `staging` from its newest checkpoint


Outcome = tuple[RunJob, "dict | BaseException"]


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


class LocalExecutor:
    """A pool of `workers` spawned processes; jobs are submitted one at a time (a racing sweep decides each after the
    last finished), outcomes come back as runs end."""

    def __init__(self, workers: int, threads: int, on_events: Callable[[list], None]):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        ctx = mp.get_context("spawn")
        self.events, self.threads, self.on_events = ctx.Queue(), threads, on_events
        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=init_worker,
                                        initargs=(self.events, os.getpid()))
        self.pending: dict = {}  # future -> job

    def submit(self, job: RunJob, stop=None) -> None:
        self.pending[self.pool.submit(run_point, job.point.config_data, str(job.staging), job.point.name,
                                      self.threads, stop=stop, resume=job.resume)] = job

    def next_outcome(self) -> Outcome:
        """Block until a submitted run ends; progress events are handed on while waiting."""
        from concurrent.futures import FIRST_COMPLETED, wait

        while True:
            done, _ = wait(list(self.pending), timeout=0.5, return_when=FIRST_COMPLETED)
            self.on_events(_drain(self.events))
            if done:
                future = next(iter(done))
                job, error = self.pending.pop(future), future.exception()
                return job, (error if error is not None else future.result())

    def close(self) -> None:
        self.on_events(_drain(self.events))
        if self.pending:  # stopped early: the runs still going are abandoned, not awaited
            _kill_workers(self.pool)
        self.pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor:
    """Each run a Ray task reserving `threads` CPUs, submitted one at a time like LocalExecutor's."""

    def __init__(self, threads: int, address: str | None, on_events: Callable[[list], None]):
        try:
            import ray
            from ray.util.queue import Queue
        except ImportError:
            raise UserError("--executor", "ray is not installed",
                            "pip install 'batchscale[ray]' or use --executor local") from None
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        self.ray, self.events, self.threads, self.on_events = ray, Queue(), threads, on_events
        self.task = ray.remote(num_cpus=threads)(run_point)
        self.pending: dict = {}  # object ref -> job

    def submit(self, job: RunJob, stop=None) -> None:
        ref = self.task.remote(job.point.config_data, str(job.staging), job.point.name, self.threads, self.events,
                               stop=stop, resume=job.resume)
        self.pending[ref] = job

    def next_outcome(self) -> Outcome:
        while True:
            done, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=0.5)
            self.on_events(_drain(self.events))
            if done:
                job = self.pending.pop(done[0])
                try:
                    return job, self.ray.get(done[0])
                except Exception as e:  # RayTaskError wraps what the task raised
                    return job, getattr(e, "cause", None) or e

    def close(self) -> None:
        self.on_events(_drain(self.events))
        for ref in self.pending:  # stopped early: end the tasks still running, do not leave them training
            self.ray.cancel(ref, force=True)


def open_executor(executor: str, workers: int, threads: int, address: str | None,
                  on_events: Callable[[list], None]) -> LocalExecutor | RayExecutor:
    if executor == "local":
        return LocalExecutor(workers, threads, on_events)
    return RayExecutor(threads, address, on_events)


def run_jobs(executor, jobs: list[RunJob]) -> Iterator[Outcome]:
    """Submit every job at once and yield outcomes as runs end; leaving early (an error, Ctrl-C) stops the rest."""
    try:
        for job in jobs:
            executor.submit(job)
        while executor.pending:
            yield executor.next_outcome()
    finally:
        executor.close()
