"""Values the profilers take (levels, batches, micro-batch) and the policy they measure; torch-free at import."""

from __future__ import annotations

import math

from batchscale.errors import UserError


def parse_positive_ints(text: str, option: str, example: str) -> list[int]:
    """'16,32,64' -> [16, 32, 64]: sorted, unique, every value an integer >= 1; else a UserError naming `option`."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UserError(option, f"not a comma list of integers: {text!r}", f"pass e.g. --{option} {example}") from None
    if not values or values[0] < 1:
        raise UserError(option, f"every value must be an integer >= 1, got {text!r}", f"pass e.g. --{option} {example}")
    return values


def default_concurrencies(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... up to max_concurrency (which is included even when it is not a power of two)."""
    if max_concurrency < 1:
        raise UserError("max_concurrency", f"must be >= 1, got {max_concurrency}", "pass e.g. --max-concurrency 64")
    levels = [2**i for i in range(int(math.log2(max_concurrency)) + 1)]
    return levels if levels[-1] == max_concurrency else levels + [max_concurrency]


def parse_concurrencies(text: str) -> list[int]:
    return parse_positive_ints(text, "concurrency", "1,4,16")


DEFAULT_BATCHES = "8,16,32,64,128"


def parse_profile_batches(text: str) -> list[int]:
    """'16,32,64' -> [16, 32, 64] (sorted, unique); every batch must be an integer >= 1."""
    return parse_positive_ints(text, "batches", "16,32,64")


def validate_micro_batch(batches: list[int], micro_batch_size: int | None) -> None:
    """None means one micro-batch per update; an explicit size must divide every batch (whole micro-batches)."""
    if micro_batch_size is None:
        return
    if micro_batch_size < 1:
        raise UserError("micro_batch_size", f"must be >= 1, got {micro_batch_size}", "pass e.g. --micro-batch-size 16")
    bad = [b for b in batches if b % micro_batch_size]
    if bad:
        raise UserError("micro_batch_size", f"{micro_batch_size} does not divide batch {bad[0]} (updates take whole "
                        "micro-batches)", "pick a divisor of every batch, or omit it for one micro-batch per update")


def load_profiled_policy(model_cfg, device: str, log=print):
    """The policy a profiler measures, on `device` (spelled as `run.device`: "auto" is CUDA when present), with the
    built-in task for its prompts. Returns (policy, task, device)."""
    from batchscale.config import TaskConfig
    from batchscale.device import resolve_device
    from batchscale.policy.load import load_policy
    from batchscale.tasks import build_task

    device = str(resolve_device(device, "--device"))
    task_cfg = TaskConfig()
    policy = load_policy(model_cfg, task_cfg, log, device)
    return policy, build_task(task_cfg), device


def named_hardware(hardware: str | None):
    """An explicit --hardware preset (checked before any compute), else None."""
    from batchscale.systems.hardware import get_hardware

    return None if hardware is None else get_hardware(hardware)


def device_hardware(preset, device: str, log=print):
    """The preset a profile compares with: the named one; else on a CUDA device the detected GPU's (none, said once,
    when its name matches no preset); else none, so a CPU profile stays as it was."""
    if preset is not None or not device.startswith("cuda"):
        return preset
    from batchscale.systems.hardware import detect_gpu

    try:
        return detect_gpu(device)
    except UserError as e:
        log(f"note: {e.args[0] if e.args else e}; pass --hardware PRESET for roofline fractions")
        return None
