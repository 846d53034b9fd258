"""Where a run computes: `run.device` ("auto", "cpu", "cuda", "cuda:N") resolved to a torch device before any compute.

"auto" is the first CUDA device when torch sees one, else the CPU. Asking for CUDA on a machine without it (or for a
device index it does not have) is a one-line UserError naming the field, so a run fails before it loads a model, never
halfway through a step. The profilers resolve their `--device` here too, so every command follows one rule.

`native_bf16` says whether a kind of device computes bf16 matmuls in hardware (what "auto" dtypes choose by).
"""

from __future__ import annotations

import torch

from batchscale.config import check_device_name
from batchscale.cpu import native_bf16_cpu
from batchscale.errors import UserError


def resolve_device(name: str, field: str = "run.device") -> torch.device:
    """The torch device `name` means on this machine; a UserError when it asks for a GPU that is not there."""
    check_device_name(name, field)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise UserError(field, f"{name!r} asks for a CUDA GPU, but torch {torch.__version__} sees none on this machine "
                        f"(CUDA build: {torch.version.cuda or 'none'})",
                        f"set {field} = 'cpu' (or 'auto'), or run on a machine with a GPU and a CUDA build of torch")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise UserError(field, f"{name!r} asks for GPU {device.index}, but this machine has {count} (0..{count - 1})",
                        f"set {field} = 'cuda:0' ... 'cuda:{count - 1}', or 'cuda'")
    return device


def native_bf16(device_type: str) -> bool:
    """Whether bf16 matmuls run in hardware on this kind of device (here, not emulated)."""
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device_type == "cpu" and native_bf16_cpu()
