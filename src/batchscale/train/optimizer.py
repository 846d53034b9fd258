"""The optimizer of the actor and the critic: Adam or AdamW with `optim`'s settings at an already scaled learning rate.

The learning rate comes scaled by its rule (`config.BatchPlan.lr`, `config.CriticPlan.lr`), never scaled here.
"""

from __future__ import annotations

import torch


def build_optimizer(params, optim_cfg, lr: float) -> torch.optim.Optimizer:
    """Adam or AdamW (`optim.name`) over `params` at `lr`, with `optim`'s betas, eps and weight decay."""
    cls = torch.optim.AdamW if optim_cfg.name == "adamw" else torch.optim.Adam
    return cls(params, lr=lr, betas=tuple(optim_cfg.betas), eps=optim_cfg.eps, weight_decay=optim_cfg.weight_decay)
