"""Verifiable-reward tasks: the built-in arithmetic task and the user's own {prompt, answer} data.

    base        Example, Task: what a task gives the loop (train sampling, the held-out eval set, scoring)
    arithmetic  the built-in task; data: JSONL/Parquet rows; rewards: built-in reward functions and user ones
    build       build_task(TaskConfig)
"""

from batchscale.tasks.base import Example, Task
from batchscale.tasks.build import build_task

__all__ = ["Example", "Task", "build_task"]
