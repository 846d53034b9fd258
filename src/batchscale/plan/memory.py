"""Memory feasibility on the *active* decode batch: what the engine decodes at once, not the whole rollout batch.

A rollout of generation_batch responses (run.json; = B_train = P*G when synchronous) is served by `replicas` engines,
each decoding at most max_concurrency sequences at once (run.json, a `max_concurrency` table column, or
`plan --max-concurrency`) and the rest in waves; the paper itself ran P = 4096 x G = 8. Per replica:

    decode batch = min(ceil(generation_batch / replicas), max_concurrency)
    KV capacity  = floor((T * memory * mem_util - s * params - trainer bytes) / kv_bytes_per_seq)

with T = `--tensor-parallel` GPUs per replica, replicas = `--gpus` / T, kv_bytes_per_seq from the roofline
(systems/roofline.py: 2 * n_layers * context * d_kv * s) and, with `--colocated`, the trainer's share of the replica's
GPUs: mixed-precision Adam holds `TRAINER_BYTES_PER_PARAM` = 16 bytes per parameter (fp32 master weights, fp32 gradients,
two fp32 moments) sharded over all `--gpus` (FSDP/ZeRO-3), so T * 16 * params / gpus per replica.

A row is infeasible only when one sequence's KV cache does not fit (capacity 0) or an explicitly capped decode batch
(max_concurrency known) is larger than the capacity. A decode batch above the capacity with no cap known runs at the
capacity; whenever the per-replica rollout exceeds what decodes at once, the row is feasible, its rollout runs in waves,
and it says "throughput capped at N sequences" (N over all replicas). The bound is analytical: activations, the
runtime's workspace and fragmentation are left to (1 - mem_util).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from batchscale.errors import UserError
from batchscale.plan.rows import ConfigMeasurement

TRAINER_BYTES_PER_PARAM = 16


@dataclass(frozen=True)
class MemoryLimit:
    model: str
    hardware: str
    context: int
    kv_max_batch: int  # the largest active batch whose KV cache fits in one replica
    gpus: int = 1
    tensor_parallel: int = 1
    colocated: bool = False

    @property
    def replicas(self) -> int:
        return self.gpus // self.tensor_parallel

    def describe(self) -> str:
        layout = f" per replica ({self.replicas} x TP{self.tensor_parallel})" if self.gpus > 1 else ""
        trainer = ", beside a colocated trainer" if self.colocated else ""
        return (f"{self.model} on {self.hardware} holds at most {self.kv_max_batch} sequences of {self.context} "
                f"tokens{layout}{trainer}")

    def to_json(self) -> dict:
        return {"model": self.model, "hardware": self.hardware, "context": self.context,
                "kv_max_batch": self.kv_max_batch, "gpus": self.gpus, "tensor_parallel": self.tensor_parallel,
                "replicas": self.replicas, "colocated": self.colocated}


def check_parallelism(gpus: int, tensor_parallel: int, max_concurrency: int | None = None) -> None:
    """UserError for a layout the formulas cannot honour, before computing anything."""
    for name, value in (("--gpus", gpus), ("--tensor-parallel", tensor_parallel), ("--max-concurrency", max_concurrency)):
        if value is not None and value < 1:
            raise UserError(name, f"must be >= 1, got {value}", f"pass a positive whole number to {name}")
    if gpus % tensor_parallel:
        raise UserError("--tensor-parallel", f"{tensor_parallel} does not divide --gpus {gpus}",
                        "pass a tensor-parallel degree that divides the GPU count (replicas = gpus / TP)")


def compute_memory_limit(model: str, hardware: str, context: int, mem_util: float = 0.9, dtype_bytes: int = 2,
                         gpus: int = 1, tensor_parallel: int = 1, colocated: bool = False) -> MemoryLimit:
    from batchscale.systems.hardware import get_hardware
    from batchscale.systems.model_shapes import get_model_shape
    from batchscale.systems.roofline import count_kv_bytes_per_sequence, validate_roofline_inputs

    check_parallelism(gpus, tensor_parallel)
    shape, device = get_model_shape(model), get_hardware(hardware)
    validate_roofline_inputs(shape, context, [1], dtype_bytes, mem_util)
    trainer_bytes = TRAINER_BYTES_PER_PARAM * shape.params * tensor_parallel / gpus if colocated else 0.0
    free_bytes = tensor_parallel * device.memory_bytes * mem_util - dtype_bytes * shape.params - trainer_bytes
    capacity = int(free_bytes // count_kv_bytes_per_sequence(shape, context, dtype_bytes)) if free_bytes > 0 else 0
    return MemoryLimit(model, hardware, context, capacity, gpus, tensor_parallel, colocated)


def apply_memory_limit(measurements: list[ConfigMeasurement], limit: MemoryLimit) -> list[ConfigMeasurement]:
    """Mark rows whose active decode batch does not fit infeasible, saying why; note the waves of the others. Rows of
    unknown size are kept as they are."""
    return [_check_row(m, limit) if m.samples_per_step is not None else m for m in measurements]


def _check_row(m: ConfigMeasurement, limit: MemoryLimit) -> ConfigMeasurement:
    per_replica = math.ceil((m.generation_batch or m.samples_per_step) / limit.replicas)
    wanted = min(per_replica, m.max_concurrency) if m.max_concurrency is not None else per_replica
    if limit.kv_max_batch == 0:
        why = f"not even one sequence's KV cache fits ({limit.describe()})"
        return replace(m, feasible=False, extra={**m.extra, "infeasible_because": why})
    if m.max_concurrency is not None and wanted > limit.kv_max_batch:
        why = f"decode batch {wanted} > KV capacity {limit.kv_max_batch} ({limit.describe()})"
        return replace(m, feasible=False, extra={**m.extra, "infeasible_because": why, "decode_batch": wanted})
    decode_batch = min(wanted, limit.kv_max_batch)
    extra = {**m.extra, "decode_batch": decode_batch}
    if per_replica > decode_batch:
        extra["throughput_capped_at"] = decode_batch * limit.replicas
    return replace(m, extra=extra)


def describe_waves(m: ConfigMeasurement) -> str | None:
    """'throughput capped at N sequences' for a row whose rollout decodes in waves, else None."""
    capped = m.extra.get("throughput_capped_at")
    return None if capped is None else (f"B_train {m.samples_per_step} decodes in waves: throughput capped at {capped} "
                                        "sequences")
