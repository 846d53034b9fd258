"""The machine a run ran on, for its summary.json (its flat descriptor, run.json, is `config.run_descriptor`)."""

from __future__ import annotations

import platform

import torch

from batchscale import __version__
from batchscale.cpu import cpu_model, kernel_flags


def machine_facts(state) -> dict:
    """Where the run of `state` (train.state.TrainingState) ran, for the summary: results must say which CPU (and kernel
    flags), and GPU, produced them."""
    policy = state.policy
    return {
        "cpu": cpu_model(),
        "cpu_flags": kernel_flags(),
        "machine": platform.machine(),
        "device": str(policy.model.device),
        **({"gpu": torch.cuda.get_device_name(policy.model.device)} if policy.model.device.type == "cuda" else {}),
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "batchscale_version": __version__,
        "model_params": policy.num_params,
        "train_compute_dtype": str(state.actor.compute_dtype).removeprefix("torch."),
    }
