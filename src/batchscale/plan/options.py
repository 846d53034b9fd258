"""The command-line options `batchscale plan` and `batchscale predict` share, declared once: where the numbers come
from besides the runs (the generation profile) and the memory model (a model's shapes on a hardware preset)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

GenerationProfileOption = Annotated[
    Optional[Path], typer.Option("--generation-profile", help="JSON of `profile generation --json`: its knee gives the "
                                                              "regime (plan) and carries generation time (predict); a "
                                                              "server's (--backend openai) also the generation side "
                                                              "of q.")
]
ModelOption = Annotated[
    Optional[str], typer.Option("--model", help="With --hardware: the roofline and the KV-cache check (what does not "
                                                "fit is marked).")
]
HardwareOption = Annotated[Optional[str], typer.Option("--hardware", help="Hardware preset, e.g. H100-SXM.")]
ContextOption = Annotated[int, typer.Option("--context", help="Tokens per sequence for the roofline and KV cache.")]
MemUtilOption = Annotated[float, typer.Option("--mem-util", help="Usable fraction of device memory.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print only the JSON result.")]

DEFAULT_CONTEXT = 2048
DEFAULT_MEM_UTIL = 0.9
