"""Build the task a `TaskConfig` names: the built-in arithmetic task or the user's own {prompt, answer} data."""

from __future__ import annotations

from batchscale.tasks.base import Task


def build_task(cfg) -> Task:
    """Build the task named by a `TaskConfig`."""
    if cfg.name == "arithmetic":
        from batchscale.tasks.arithmetic import ArithmeticTask

        return ArithmeticTask(cfg.digits, cfg.operations, cfg.template, cfg.split_seed, cfg.eval_size, cfg.reward,
                              cfg.reward_timeout_s)
    from batchscale.tasks.data import DataTask

    return DataTask(cfg.path, cfg.eval_path, cfg.eval_size, cfg.reward, cfg.reward_timeout_s)
