"""The `batchscale profile` sub-app: throughput measured on this machine.

`profile generation` (rollout tokens/s vs concurrency, the knee) lives in profile_generation.py; `profile training`
(seconds per update vs batch, the cost law, matmul utilization) in profile_training.py. Registered on the main app by
one line at the end of batchscale/cli.py. Both modules import torch only inside their commands.
"""

from __future__ import annotations

import typer

from batchscale.systems.profile_generation import generation
from batchscale.systems.profile_training import training

profile_app = typer.Typer(help="Measure throughput on this machine (generation vs concurrency, training vs batch).",
                          no_args_is_help=True)
profile_app.command("generation")(generation)
profile_app.command("training")(training)
