"""`batchscale setup`: build what first use needs, apart from any work (issue 45, Deliver 3).

Stages, each with its own progress line ("title..." then "title: done in 12s", or "cached" when there is nothing to
do), all into the batchscale cache (`files.cache_root`):
1. the tiny model (`policy.tiny.build_tiny` for the built-in task): a copy of the warm-started model pinned in
   policy/shipped/ (seconds), or with BATCHSCALE_TINY_BUILD=1 the warm start from its recipe (~2.5 min on 2 cores);
2. with `--model smollm2-135m`, the SmolLM2 GGUF de-quantized into a float checkpoint (`policy.load.smollm2_dir`);
3. the engine's native kernels for this CPU (`rollout.native`, ~1 s each with the system C compiler); a CPU or a
   machine without them is said, not an error (the engine then uses torch alone).

Any command that needs one of these builds it itself on first use, saying so in one line with the expected time;
`setup` (and `make demo`'s first stage) only takes that time out of the command a user is waiting for.

An interrupted build restarts cleanly, from zero: every build writes into a staging directory that is renamed into
the cache only when complete (`files.build_once`), and the next build removes a dead process's staging directory.
The warm start is not checkpointed: both of its phases stop on a measured accuracy reached from one seeded
trajectory, and a resumed trajectory would have to restore the optimizer, both random generators and the check
history exactly to land on the same model; for 2.5 minutes that happen only with BATCHSCALE_TINY_BUILD=1 (the default
installs the pinned copy in seconds), a clean restart is the honest trade.
"""

from __future__ import annotations

import time
from typing import Callable

SETUP_MODELS = ("tiny", "smollm2-135m")


def run_setup(models: list[str], kernels: bool = True, log: Callable[[str], None] = print) -> dict:
    """Build each of `models` (SETUP_MODELS) and, with `kernels`, this CPU's native kernels; returns
    {"models": {name: path}, "kernels": {path: "built"/"cached"/reason}, "seconds": {stage: s}}."""
    from batchscale.errors import UserError

    unknown = [m for m in models if m not in SETUP_MODELS]
    if unknown:
        raise UserError("--model", f"setup builds {', '.join(SETUP_MODELS)}, not {', '.join(map(repr, unknown))}",
                        "a model directory of your own needs no set-up: pass it as model.name")
    from batchscale.console import long_phase

    result: dict = {"models": {}, "kernels": {}, "seconds": {}}
    for model in dict.fromkeys(models):
        began = time.perf_counter()
        with long_phase(f"setup: the {model} model") as phase:
            result["models"][model] = str(_build_model(model, phase.relay(log)))
        result["seconds"][model] = round(time.perf_counter() - began, 1)
    if kernels:
        began = time.perf_counter()
        with long_phase("setup: the native kernels") as phase:
            result["kernels"] = build_kernels(phase.relay(log))
        result["seconds"]["kernels"] = round(time.perf_counter() - began, 1)
    return result


def _build_model(model: str, log):
    if model == "tiny":
        from batchscale.config.schema import TaskConfig
        from batchscale.policy.tiny import build_tiny

        return build_tiny(TaskConfig(), log)
    from batchscale.policy.load import smollm2_dir

    return smollm2_dir(log)


def build_kernels(log) -> dict[str, str]:
    """Compile (or find cached) each native kernel library this CPU can run: path -> "ready", or why not."""
    from batchscale.cpu import has_kernel_path
    from batchscale.rollout.native import KERNELS, bf16_linear_kernel, unavailable_reason

    states = {}
    for path in KERNELS:
        if not has_kernel_path(path):
            states[path] = "not for this CPU (it lacks the flags)"
        elif bf16_linear_kernel(path) is None:
            states[path] = f"unavailable: {unavailable_reason(path)}"
        else:
            states[path] = "ready"
        log(f"kernels {path}: {states[path]}")
    return states
