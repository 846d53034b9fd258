"""Phase timers that synchronize the device before reading the clock.

CUDA kernels run asynchronously: without a synchronize, a timer around a phase measures only the kernel launches. On
CPU the synchronize is a no-op. Nothing else (gc, sleeps, logging) runs inside a timed region.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch


def synchronize(device: torch.device | str | None = None) -> None:
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        torch.cuda.synchronize(device)


class PhaseTimer:
    """Accumulates seconds per named phase within one step: `with timer.phase("generate"): ...`."""

    def __init__(self, device: torch.device | str | None = None):
        self.device = device
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        synchronize(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            synchronize(self.device)
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def reset(self) -> dict[str, float]:
        out, self.seconds = self.seconds, {}
        return out
