"""The devices a device-agnostic test runs on: the CPU always; CUDA only where torch sees a GPU.

`DEVICES` parametrizes a test over both. The CUDA case carries `@pytest.mark.gpu` (so `pytest -m gpu` selects exactly
the GPU checks, as benchmarks/gpu_check.sh runs them) and is skipped, with the reason, on a machine without CUDA.
"""

from __future__ import annotations

import pytest
import torch

NO_CUDA = "no CUDA device (torch.cuda.is_available() is False); benchmarks/gpu_check.sh runs these on a GPU"

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=[pytest.mark.gpu, requires_cuda])]
