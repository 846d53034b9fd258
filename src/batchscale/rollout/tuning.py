"""How the engine decodes small steps on this CPU: candidate plans timed on the model's own weights at first use, the
winner cached per CPU and model shape.

The CPU's flags say which native kernels may run (cpu.KERNEL_PATH_FLAGS, weights.kernel_candidates); they cannot say
which walk over the weights reads memory fastest on a chip nobody measured. On the Zen 4 VM of issue 47 the kernels'
column tiles, reading 4 weight rows side by side, pulled memory at half the rate of one row after another, while the
Sapphire Rapids and Zen 5 VMs they were tuned on read both alike (docs/LOG.md). So the first `sync` of a decoder whose
small steps run the fused kernels (decoder.SlotDecoder.fused) calls `choose_plan`, which
1. reads the plan cached in the batchscale cache dir (decode-plans/<digest of the key>.json). The key: the CPU model and
   its kernel flags (BATCHSCALE_CPU_CAPABILITY included), torch's thread count, the kernels' sources, the model's
   shapes and dtypes and the candidate sets. A file that is unreadable, of another schema or another key, or whose
   winner is not a valid plan here, is ignored with a warning and the plans are timed again;
2. else times the candidates on the model's first layers (at least PROBE_BYTES of their matrices, so they stream from
   memory as a whole step's do), in ROUNDS round-robin rounds after a warm-up round, the fastest round per candidate
   (load from other processes only ever adds time, so the minimum is the least disturbed), in three stages:
   a. each kernel allowed here x walk order ("tiles", "rows") x prefetch distance (PREFETCH_BYTES), one sequence;
   b. the winner on one thread, where torch has more than one;
   c. the most sequences a step may hold to use the kernel's one-call layers: ROW_COUNTS in turn, as long as they
      beat the GEMM path at that many;
   then writes the timings and the winner atomically, under a lock, so concurrent first uses (sweep workers) time once.
The timings are of this process at that moment: a busy machine can crown the wrong plan. BATCHSCALE_DECODE_TUNING=retime
times again and replaces the cached plan; "off" takes the defaults (weights.DEFAULT_WALKS and the row counts of
weights.py) and neither times nor caches. BATCHSCALE_CPU_CAPABILITY=avx2 still forces the AVX2 path: it hides the
flags the other kernels need, so they are never candidates.

No walk changes the arithmetic (tests/test_rollout_tuning.py checks every plan bit for bit). The kernel ("f32" or
"f32_avx512": 8 or 16 lanes) and the row count (kernel or GEMM at a given batch) change the summation order only.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from batchscale.cpu import cpu_model, kernel_flags
from batchscale.errors import DataWarning, UserError
from batchscale.files import cache_root, exclusive_lock, read_json_object, write_json_atomic
from batchscale.rollout import native
from batchscale.rollout.native import ORDERS, KernelPlan
from batchscale.rollout.weights import DEFAULT_WALKS, KERNEL_LINEAR

SCHEMA = "batchscale.decode_plan/1"
TUNING_ENV = "BATCHSCALE_DECODE_TUNING"
TUNING_MODES = ("auto", "off", "retime")
PREFETCH_BYTES = (0, 4096)  # none, or about one column tile ahead (what the AVX2 kernels needed on Sapphire Rapids)
ROW_COUNTS = (1, 2, 4, 8, 16, 32, 64)
PROBE_BYTES = 64 << 20  # twice the largest last-level cache of the machines measured: the probe reads memory
ROUNDS = 3
MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class DecodePlan:
    """The kernel small decode steps use (a key of weights.KERNEL_LINEAR), how it walks the weights, and the most
    sequences a step may hold to use it (0: none; larger steps take the GEMM path)."""

    kernel: str
    walk: KernelPlan
    small_batch_rows: int

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "order": self.walk.order, "prefetch_bytes": self.walk.prefetch_bytes,
                "threads": self.walk.threads, "small_batch_rows": self.small_batch_rows}


def tuning_mode() -> str:
    """BATCHSCALE_DECODE_TUNING's value ("auto" when unset or empty)."""
    value = os.environ.get(TUNING_ENV, "").strip().lower() or "auto"
    if value not in TUNING_MODES:
        raise UserError(TUNING_ENV, f"is {value!r}, which is not a tuning mode",
                        f"set it to one of {', '.join(TUNING_MODES)}, or unset it")
    return value


def default_plan(kernels: list[tuple[str, int]]) -> DecodePlan:
    """The plan without timing: the first allowed kernel, its default walk and row count."""
    kernel, rows = kernels[0]
    return DecodePlan(kernel, DEFAULT_WALKS[kernel], rows)


def plan_key(decoder) -> dict:
    """What a timed plan depends on: the CPU, the threads, the kernels' sources, the model's shapes, the candidates."""
    layer = decoder.packed.layers[0]
    kernels = [kernel for kernel, _ in decoder.kernels]
    return {"cpu_model": cpu_model(), "cpu_flags": kernel_flags(), "threads": torch.get_num_threads(),
            "kernels": kernels,
            "kernel_sources": sorted({native.source_digest(KERNEL_LINEAR[k][0]) for k in kernels}),
            "model": {"hidden": decoder.body.embed_tokens.weight.shape[1], "heads": decoder.num_heads,
                      "kv_heads": decoder.num_kv_heads, "head_dim": decoder.head_dim, "ffn": layer.down.shape[1],
                      "layers": len(decoder.packed.layers), "vocab": decoder.packed.lm_head.shape[0],
                      "weights_dtype": str(decoder.body.embed_tokens.weight.dtype).removeprefix("torch."),
                      "compute_dtype": str(decoder.dtype).removeprefix("torch.")},
            "candidates": {"orders": list(ORDERS), "prefetch_bytes": list(PREFETCH_BYTES),
                           "row_counts": list(ROW_COUNTS)}}


def plan_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_root() / "decode-plans" / f"{digest}.json"


def choose_plan(decoder) -> DecodePlan:
    """The plan for `decoder` (packed already, fused, with at least one kernel): cached, timed, or the default."""
    mode = tuning_mode()
    if mode == "off":
        return default_plan(decoder.kernels)
    key = plan_key(decoder)
    path = plan_path(key)
    try:
        with exclusive_lock(path.parent / f".{path.name}.lock"):
            plan = read_plan(path, key, decoder.kernels) if mode == "auto" else None
            if plan is None:
                record = time_plans(decoder)
                plan = record["winner_plan"]
                del record["winner_plan"]
                write_plan(path, {"schema": SCHEMA, "key": key, **record})
            return plan
    except UserError as e:  # the lock could not be opened: time without caching
        warnings.warn(f"the decode plan is not cached ({e})", DataWarning, stacklevel=2)
        return time_plans(decoder)["winner_plan"]


def read_plan(path: Path, key: dict, kernels: list[tuple[str, int]]) -> DecodePlan | None:
    """The cached winner at `path`, or None (no file; or a warning, for one that cannot be trusted)."""
    if not path.is_file():
        return None
    why = None
    try:
        data = read_json_object(path, MAX_FILE_BYTES)
    except UserError as e:
        data, why = {}, str(e)
    if why is None and data.get("schema") != SCHEMA:
        why = f"its schema is {str(data.get('schema'))[:40]!r}, not {SCHEMA!r}"
    elif why is None and data.get("key") != key:
        why = "it was timed for another CPU, model shape, thread count or kernel build"
    plan = None
    if why is None:
        plan, why = parse_plan(data.get("winner"), [kernel for kernel, _ in kernels])
    if why is not None:
        warnings.warn(f"ignoring the cached decode plan {path}: {why}; timing the plans again", DataWarning,
                      stacklevel=3)
    return plan


def parse_plan(winner, kernels: list[str]) -> tuple[DecodePlan | None, str | None]:
    """(plan, None) for a valid `winner` object, else (None, why)."""
    if not isinstance(winner, dict):
        return None, "it has no winner object"

    def integer(name: str, low: int, high: int) -> int | None:
        value = winner.get(name)
        return value if type(value) is int and low <= value <= high else None

    kernel, order = winner.get("kernel"), winner.get("order")
    prefetch = integer("prefetch_bytes", 0, 1 << 20)
    threads = integer("threads", 0, torch.get_num_threads())
    rows = integer("small_batch_rows", 0, max(ROW_COUNTS))
    if kernel not in kernels or order not in ORDERS or None in (prefetch, threads, rows):
        return None, f"its winner {json.dumps(winner)[:200]} is not a plan of {', '.join(kernels)} here"
    return DecodePlan(kernel, KernelPlan(order, prefetch, threads), rows), None


def write_plan(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, data)
    except (OSError, UserError) as e:
        warnings.warn(f"the decode plan could not be cached at {path} ({e}); it will be timed again next time",
                      DataWarning, stacklevel=3)


def probe_layers(decoder) -> int:
    """How many layers a probe runs: enough that their matrices stream from memory (PROBE_BYTES), at most all."""
    per_layer = sum(getattr(decoder.packed.layers[0], n).nbytes for n in ("qkv", "o", "gate_up", "down"))
    return min(len(decoder.packed.layers), max(1, -(-PROBE_BYTES // per_layer)))


def _round_robin(runs: list, rounds: int = ROUNDS) -> list[float]:
    """The fastest seconds of each of `runs` (callables), timed in turn `rounds` times after one warm-up round, so
    load from other processes falls on all of them alike."""
    times = [[] for _ in runs]
    for round_index in range(rounds + 1):
        for run, spent in zip(runs, times):
            start = time.perf_counter()
            run()
            if round_index:
                spent.append(time.perf_counter() - start)
    return [min(t) for t in times]


def time_plans(decoder) -> dict:
    """Time the candidates (the module docstring's stages a-c); returns the record to cache, with the winner as
    `winner` (JSON) and `winner_plan` (a DecodePlan)."""
    started = time.perf_counter()
    try:
        return _time_stages(decoder, started)
    finally:
        decoder.drop_cache()


def _time_stages(decoder, started: float) -> dict:
    packed, layer_count = decoder.packed, probe_layers(decoder)

    def probe(kernel: str, walk: KernelPlan, batch: int, small: bool = True):
        def run():
            packed.use(kernel, walk, max(ROW_COUNTS))
            decoder.probe_step(batch, small, layer_count, head=False)
        return run

    walks = [(kernel, KernelPlan(order, prefetch)) for kernel, _ in decoder.kernels for order in ORDERS
             for prefetch in PREFETCH_BYTES]
    walk_ms = [s * 1e3 for s in _round_robin([probe(kernel, walk, 1) for kernel, walk in walks])]
    kernel, walk = walks[min(range(len(walks)), key=walk_ms.__getitem__)]
    candidates = [{"stage": "walk", "kernel": k, "order": w.order, "prefetch_bytes": w.prefetch_bytes,
                   "threads": w.threads, "step_ms": round(ms, 4)} for (k, w), ms in zip(walks, walk_ms)]
    if torch.get_num_threads() > 1:
        one = replace(walk, threads=1)
        all_ms, one_ms = (s * 1e3 for s in _round_robin([probe(kernel, walk, 1), probe(kernel, one, 1)]))
        for w, ms in ((walk, all_ms), (one, one_ms)):
            candidates.append({"stage": "threads", "kernel": kernel, "order": w.order,
                               "prefetch_bytes": w.prefetch_bytes, "threads": w.threads, "step_ms": round(ms, 4)})
        walk = one if one_ms < all_ms else walk
    rows, row_ms = 0, []
    for batch in ROW_COUNTS:
        kernel_s, gemm_s = _round_robin([probe(kernel, walk, batch), probe(kernel, walk, batch, small=False)])
        row_ms.append({"rows": batch, "kernel_ms": round(kernel_s * 1e3, 4), "gemm_ms": round(gemm_s * 1e3, 4)})
        if kernel_s > gemm_s:
            break
        rows = batch
    plan = DecodePlan(kernel, walk, rows)
    packed.use(kernel, walk, rows)
    return {"winner": plan.to_json(), "winner_plan": plan, "candidates": candidates, "rows": row_ms,
            "probe": {"layers": layer_count, "lm_head": False, "rounds": ROUNDS, "statistic": "min"},
            "huge_page_bytes": packed.huge_page_bytes, "tuning_s": round(time.perf_counter() - started, 3),
            "timed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
