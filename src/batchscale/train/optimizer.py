"""The optimizer of the actor and the critic: Adam or AdamW with `optim`'s settings at an already scaled learning rate.

The learning rate comes scaled by its rule (`config.BatchPlan.lr`, `config.CriticPlan.lr`), never scaled here.
The step runs torch's fused kernel (one pass over each parameter, its gradient and both moments) wherever torch has
one for the parameters' device and dtype: on a 135M-parameter model it takes 0.11 s a step against the default
multi-tensor path's 0.59 s (one AVX2 core; docs/LOG.md, 2026-12-07). The update is Adam's either way; the two paths
differ in float rounding only (tests/test_optimizer.py).

torch's fused CPU kernel writes the parameters without bumping their version counters, which is how the rollout
engine sees that weights changed (rollout.weights) and so re-packs them: left alone, generation would go on sampling
from the weights it packed first. A step post-hook bumps every parameter's counter after each step.
"""

from __future__ import annotations

import torch
from torch.autograd.graph import increment_version

FUSED_DEVICES = ("cpu", "cuda")


def build_optimizer(params, optim_cfg, lr: float) -> torch.optim.Optimizer:
    """Adam or AdamW (`optim.name`) over `params` at `lr`, with `optim`'s betas, eps and weight decay."""
    params = list(params)
    cls = torch.optim.AdamW if optim_cfg.name == "adamw" else torch.optim.Adam
    fused = fused_supported(params)
    optimizer = cls(params, lr=lr, betas=tuple(optim_cfg.betas), eps=optim_cfg.eps,
                    weight_decay=optim_cfg.weight_decay, fused=fused or None)
    if fused:
        optimizer.register_step_post_hook(lambda opt, args, kwargs: increment_version(params))
    return optimizer


def fused_supported(params: list[torch.Tensor]) -> bool:
    """Whether torch's fused Adam kernel takes every parameter: floating point, all on one CPU or CUDA device."""
    devices = {p.device for p in params}
    return (len(devices) == 1 and next(iter(devices)).type in FUSED_DEVICES
            and all(p.is_floating_point() for p in params))
