"""Verifiable-reward tasks: the built-in arithmetic task, the user's own {prompt, answer} data, reasoning-gym datasets.

    base        Example, Task: what a task gives the loop (train sampling, the held-out eval set, scoring)
    arithmetic  the built-in task; data: JSONL/Parquet rows; rewards: built-in reward functions and user ones
    reasoning_gym_task  a reasoning-gym dataset scored by its own score_answer (the optional extra reasoning-gym)
    build       build_task(TaskConfig)
"""

from batchscale.tasks.base import Example, Task
from batchscale.tasks.build import build_task

__all__ = ["Example", "Task", "build_task"]
