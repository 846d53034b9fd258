"""`batchscale export FORMAT SWEEP.toml --out DIR`: the command-line face of batchscale.export."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from batchscale.export.formats import FORMATS


def export_launchers(
    format: Annotated[str, typer.Argument(help=f"Engine: {', '.join(FORMATS)}.", show_default=False)],
    sweep_file: Annotated[Path, typer.Argument(help="Sweep TOML, as for `batchscale sweep`.")],
    out: Annotated[Path, typer.Option("--out", help="Directory to create: scripts, README.md, sweep.json.")],
    set_: Annotated[list[str], typer.Option("--set", help="Override a key of every point.")] = [],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an earlier export in --out.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the manifest (sweep.json) as JSON.")] = False,
) -> None:
    """Write launch scripts that run a sweep on verl or OpenRLHF and import their logs back as runs."""
    from batchscale.export.launchers import export_sweep

    result = export_sweep(format, sweep_file, out, set_, overwrite)
    if json_out:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    typer.echo(f"{len(result['points'])} {format} launchers in {result['out']} (see README.md there); "
               f"after the runs: batchscale analyze {result['out']}")
