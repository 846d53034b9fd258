"""Executors: where sweep points run. Both take the same (points, threads) and yield summaries as runs finish.

- local: a pool of spawned worker processes (spawn, not fork: torch's thread pools do not survive fork).
- ray: each point a Ray task reserving `threads` CPUs; `ray.init()` starts a local cluster unless an address is given.
Progress events (start / record / done) travel over a queue each executor provides.
"""

from __future__ import annotations

from typing import Callable, Iterator

from batchscale.errors import UserError
from batchscale.sweep.runner import run_point
from batchscale.sweep.spec import Point

EXECUTORS = ("local", "ray")


def _drain(events) -> list:
    out = []
    while True:
        try:
            out.append(events.get_nowait())
        except Exception as e:  # queue.Empty, or ray's own Empty
            if type(e).__name__ != "Empty":
                raise
            return out


def run_local(points: list[Point], sweep_dir: str, workers: int, threads: int, on_events: Callable[[list], None]) -> Iterator[dict]:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        events = manager.Queue()
        pending = {pool.submit(run_point, p.config_data, sweep_dir, p.name, threads, events) for p in points}
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            on_events(_drain(events))
            for future in done:
                yield future.result()  # a failed run raises here, after finished runs were kept
        on_events(_drain(events))


def run_ray(points: list[Point], sweep_dir: str, threads: int, address: str | None, on_events: Callable[[list], None]) -> Iterator[dict]:
    try:
        import ray
        from ray.util.queue import Queue
    except ImportError:
        raise UserError("--executor", "ray is not installed", "pip install 'batchscale[ray]' or use --executor local") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    events = Queue()
    task = ray.remote(num_cpus=threads)(run_point)
    pending = [task.remote(p.config_data, sweep_dir, p.name, threads, events) for p in points]
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
        on_events(_drain(events))
        for ref in done:
            yield ray.get(ref)
    on_events(_drain(events))
