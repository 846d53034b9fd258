"""Tensors in transparent huge pages: one 2 MiB-aligned anonymous mapping, madvise(MADV_HUGEPAGE) before first touch.

A decode step at a few sequences streams every weight once from memory. With 4 KiB pages the hardware prefetchers stop
at every page boundary and every page costs a TLB miss; with 2 MiB pages they run on. On the Zen 4 VM of issue 47 one
core read a 256 MiB bf16 matrix at 9.8 GB/s from 4 KiB pages and 17.7 GB/s from 2 MiB pages (a plain read loop, load
average ~8; docs/LOG.md), and the kernels' walk over the weights gained alike. Torch's allocator asks for huge pages
only under THP_MEM_ALLOC_ENABLE, read once when torch starts, so the pack asks for them itself.

Linux only, and only where transparent huge pages are "madvise" or "always"; elsewhere `HugePageArena.available()` is
False and the pack keeps ordinary tensors. The values are the same either way: only the page size differs.
"""

from __future__ import annotations

import mmap
import re
from pathlib import Path

import torch

HUGE_PAGE_BYTES = 2 << 20
ALIGN_BYTES = 64  # each tensor starts on a cache line
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str | None:
    """The bracketed choice of /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise", "never"), or None."""
    try:
        match = re.search(r"\[(\w+)\]", THP_SETTING.read_text())
    except OSError:
        return None
    return match.group(1) if match else None


class HugePageArena:
    """`nbytes` of memory on huge pages where the OS gives them; `take` carves tensors from it in order. The tensors
    keep the mapping alive (torch.frombuffer holds a reference to it)."""

    def __init__(self, nbytes: int):
        size = -(-max(nbytes, 1) // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
        self.map = mmap.mmap(-1, size + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)
        self.start = -self.bytes.data_ptr() % HUGE_PAGE_BYTES  # a multiple of the base page size: mmap aligns to it
        self.end, self.size = self.start, size
        self.map.madvise(mmap.MADV_HUGEPAGE, self.start, size)  # before any page is touched

    def reuse(self, nbytes: int) -> bool:
        """Whether `nbytes` fit from the start again; if so, the next `take` overwrites the arena from its start (the
        tensors taken before share its memory: their values change with it). A re-pack of the same model reuses its
        arena, so it pays the page faults of 2 MiB pages once, not at every policy update."""
        if nbytes > self.size:
            return False
        self.end = self.start
        return True

    @staticmethod
    def available() -> bool:
        return hasattr(mmap, "MADV_HUGEPAGE") and thp_mode() in ("always", "madvise")

    def take(self, like: torch.Tensor) -> torch.Tensor:
        """A copy of `like` (contiguous, same dtype and shape) in the arena."""
        nbytes = like.numel() * like.element_size()
        begin = -(-self.end // ALIGN_BYTES) * ALIGN_BYTES
        if begin + nbytes > self.start + self.size:
            raise ValueError(f"the arena holds {self.size} bytes; {like.dtype} {tuple(like.shape)} does not fit")
        self.end = begin + nbytes
        out = self.bytes[begin: self.end].view(like.dtype).view(like.shape)
        out.copy_(like)
        return out

    def huge_bytes(self) -> int:
        """How many bytes of the mapping the kernel backs with huge pages now (/proc/self/smaps; 0 where unreadable)."""
        base, end = self.bytes.data_ptr(), self.bytes.data_ptr() + self.bytes.numel()
        try:
            text = Path("/proc/self/smaps").read_text()
        except OSError:
            return 0
        inside, total = False, 0
        for line in text.splitlines():  # madvise split the mapping: sum over every piece of it
            head = line.split(" ", 1)[0]
            if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head):
                low, high = (int(part, 16) for part in head.split("-"))
                inside = low < end and base < high
            elif inside and line.startswith("AnonHugePages:"):
                total += int(line.split()[1]) * 1024
        return total


def arena_bytes(tensors) -> int:
    """The bytes an arena needs for `tensors` (None entries skipped), each aligned as `take` aligns it."""
    return sum(-(-t.numel() * t.element_size() // ALIGN_BYTES) * ALIGN_BYTES for t in tensors if t is not None)
