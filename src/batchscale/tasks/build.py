"""Build the task a `TaskConfig` names: the built-in arithmetic task, the user's own {prompt, answer} data, or a
reasoning-gym dataset."""

from __future__ import annotations

from batchscale.errors import UserError
from batchscale.tasks.base import Task


def build_task(cfg) -> Task:
    """Build the task named by a `TaskConfig`."""
    if cfg.name == "arithmetic":
        from batchscale.tasks.arithmetic import ArithmeticTask

        return ArithmeticTask(cfg.digits, cfg.operations, cfg.template, cfg.split_seed, cfg.eval_size, cfg.reward,
                              cfg.reward_timeout_s)
    if cfg.name == "reasoning_gym":
        from batchscale.tasks.reasoning_gym_task import ReasoningGymTask

        defaults = type(cfg).model_fields
        if cfg.reward != defaults["reward"].default:
            raise UserError("task.reward", f"a reasoning-gym task is scored by its dataset's own score_answer, but "
                            f"task.reward = {cfg.reward!r}", "drop task.reward, or use task.name = 'data'")
        template = None if cfg.template == defaults["template"].default else cfg.template  # the arithmetic default
        return ReasoningGymTask(cfg.dataset, cfg.params, template, cfg.split_seed, cfg.eval_size)
    from batchscale.tasks.data import DataTask

    return DataTask(cfg.path, cfg.eval_path, cfg.eval_size, cfg.reward, cfg.reward_timeout_s)
