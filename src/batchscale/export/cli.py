"""`batchscale export FORMAT SWEEP.toml --out DIR`: the command-line face of batchscale.export."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from batchscale.export.formats import ENGINE_FORMATS, ENGINES, LAUNCHERS


def export_launchers(
    format: Annotated[str, typer.Argument(help=f"An engine ({', '.join(ENGINE_FORMATS)}, batchscale) or a launcher "
                                               f"({', '.join(LAUNCHERS)}).", show_default=False)],
    sweep_file: Annotated[Path, typer.Argument(help="Sweep TOML, as for `batchscale sweep`.")],
    out: Annotated[Path, typer.Option("--out", help="Directory to create: scripts, job files, README.md, "
                                                    "sweep.json.")],
    engine: Annotated[Optional[str], typer.Option(help=f"Launchers: the engine each job runs ({', '.join(ENGINES)}; "
                                                       "default verl).", show_default=False)] = None,
    accelerators: Annotated[Optional[str], typer.Option(help="Launchers: GPUs per node, NAME:COUNT for skypilot "
                                                             "(default H100:8, batchscale H100:1), [TYPE:]COUNT for "
                                                             "slurm (default 8, batchscale 1).",
                                                        show_default=False)] = None,
    num_nodes: Annotated[Optional[int], typer.Option(help="Launchers: nodes per job (default 1; several: one Ray "
                                                          "cluster over them).", show_default=False)] = None,
    output_bucket: Annotated[Optional[str], typer.Option(help="skypilot: a bucket (s3://..., gs://...) each job "
                                                              "copies its runs/<point> to.", show_default=False)] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a key of every point.")] = [],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier export in --out.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the manifest (sweep.json) as JSON.")] = False,
) -> None:
    """Write launch scripts that run a sweep on verl, OpenRLHF or batchscale (and SkyPilot tasks or a Slurm array job
    around them); their runs come back as run directories."""
    from batchscale.export.launchers import export_sweep, resolve_launch

    launch = resolve_launch(format, engine, accelerators, num_nodes, output_bucket)
    result = export_sweep(format, sweep_file, out, set_, overwrite, launch)
    if json_out:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    what = f"{format} jobs ({launch.engine})" if launch.launcher else f"{format} launchers"
    typer.echo(f"{len(result['points'])} {what} in {result['out']} (see README.md there); "
               f"after the runs: batchscale analyze {result['out']}")
