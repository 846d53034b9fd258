"""Memory feasibility: can a configuration's rollout batch be held in flight on the target hardware?

A synchronous rollout decodes B_gen = P * G responses together, so its KV cache must hold B_gen sequences of length
`context` beside the weights: the roofline's KV-cache capacity (systems/roofline.py, compute_kv_max_batch). A row whose
B_train = P * G exceeds that capacity is infeasible: it would have to decode in waves, so its measured throughput does
not transfer. The bound is analytical (weights + KV cache; activations and fragmentation ignored, hence mem_util < 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from batchscale.plan.decide import ConfigMeasurement


@dataclass(frozen=True)
class MemoryLimit:
    model: str
    hardware: str
    context: int
    kv_max_batch: int  # the largest active batch whose KV cache fits

    def describe(self) -> str:
        return f"{self.model} on {self.hardware} holds at most {self.kv_max_batch} sequences of {self.context} tokens"


def compute_memory_limit(model: str, hardware: str, context: int, mem_util: float = 0.9, dtype_bytes: int = 2) -> MemoryLimit:
    from batchscale.systems.hardware import get_hardware
    from batchscale.systems.models import get_model_shape
    from batchscale.systems.roofline import compute_kv_max_batch, validate_roofline_inputs

    shape, device = get_model_shape(model), get_hardware(hardware)
    validate_roofline_inputs(shape, context, [1], dtype_bytes, mem_util)
    return MemoryLimit(model, hardware, context, compute_kv_max_batch(shape, device, context, dtype_bytes, mem_util))


def apply_memory_limit(measurements: list[ConfigMeasurement], limit: MemoryLimit) -> list[ConfigMeasurement]:
    """Mark rows whose rollout batch exceeds the KV capacity infeasible, saying why; rows of unknown size are kept."""
    out = []
    for m in measurements:
        if m.samples_per_step is not None and m.samples_per_step > limit.kv_max_batch:
            why = f"B_train {m.samples_per_step} > KV capacity {limit.kv_max_batch} ({limit.describe()})"
            m = replace(m, feasible=False, extra={**m.extra, "infeasible_because": why})
        out.append(m)
    return out
