"""Build the task a `TaskConfig` names: the built-in arithmetic task, the user's own data (tasks.data), or a
reasoning-gym dataset; and refuse chat-message prompts for a policy without its chat template."""

from __future__ import annotations

from batchscale.errors import UserError
from batchscale.tasks.base import Task


def build_task(cfg, chat_template: bool | None = None) -> Task:
    """Build the task named by a `TaskConfig`. `chat_template`: the run's model.chat_template; False refuses a task
    whose prompts are chat messages (None: not checked, for callers that format no prompts)."""
    task = _build(cfg)
    if chat_template is False and task.chat_prompts:
        task.close()
        raise UserError("model.chat_template", f"the prompts of {cfg.path} are chat messages, which only a chat "
                        "template turns into text, but model.chat_template = false",
                        "set model.chat_template = true (a model with a chat template), or give prompts as text")
    return task


def _build(cfg) -> Task:
    if cfg.name != "data" and (cfg.columns.prompt or cfg.columns.answer):
        raise UserError("task.columns", f"columns are read from data files, but task.name = {cfg.name!r}",
                        "drop task.columns, or set task.name = 'data' and task.path")
    if cfg.name == "arithmetic":
        from batchscale.tasks.arithmetic import ArithmeticTask

        return ArithmeticTask(cfg.digits, cfg.operations, cfg.template, cfg.split_seed, cfg.eval_size, cfg.reward,
                              cfg.reward_timeout_s, cfg.answer_format)
    if cfg.name == "reasoning_gym":
        from batchscale.tasks.reasoning_gym_task import ReasoningGymTask

        defaults = type(cfg).model_fields
        if cfg.reward != defaults["reward"].default:
            raise UserError("task.reward", f"a reasoning-gym task is scored by its dataset's own score_answer, but "
                            f"task.reward = {cfg.reward!r}", "drop task.reward, or use task.name = 'data'")
        template = None if cfg.template == defaults["template"].default else cfg.template  # the arithmetic default
        return ReasoningGymTask(cfg.dataset, cfg.params, template, cfg.split_seed, cfg.eval_size, cfg.answer_format)
    from batchscale.tasks.data import DataTask

    return DataTask(cfg.path, cfg.eval_path, cfg.eval_size, cfg.reward, cfg.reward_timeout_s, cfg.answer_format,
                    cfg.columns.prompt, cfg.columns.answer)
