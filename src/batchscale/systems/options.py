"""Command-line values shared by the profilers."""

from __future__ import annotations

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


def load_profiled_policy(model_cfg, device: str, log=print):
    """The policy a profiler measures, on `device` ("auto": CUDA when present), with the built-in task for its
    prompts. Returns (policy, task, device)."""
    import torch

    from batchscale.config import TaskConfig
    from batchscale.policy.load import load_policy
    from batchscale.tasks import build_task

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    task_cfg = TaskConfig()
    policy = load_policy(model_cfg, task_cfg, log)
    policy.model.to(device)
    return policy, build_task(task_cfg), device
