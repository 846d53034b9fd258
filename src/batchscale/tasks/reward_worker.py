"""The user-reward worker's entry point: `python -m batchscale.tasks.reward_worker FD PARENT_PID` (rewards.UserReward
starts it; FD is its end of a socket pair). The work itself is `rewards.serve_reward`."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from batchscale.tasks.rewards import serve_reward

if __name__ == "__main__":
    serve_reward(Connection(int(sys.argv[1])), int(sys.argv[2]))
