"""`batchscale import FORMAT PATH --out RUN_DIR`: the command-line face of batchscale.ingest.

Tolerated problems (a truncated last line, unmapped keys, keys the framework does not log) go to stderr and into
the run descriptor's `import` block; the result goes to stdout (one JSON document with --json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from batchscale.ingest.common import FORMATS

UNKNOWN_KEYS_SHOWN = 8


def import_run(
    format: Annotated[str, typer.Argument(help=f"Log format: {', '.join(FORMATS)}.", show_default=False)],
    path: Annotated[Path, typer.Argument(help="The log: a file, or a directory (TensorBoard run, TRL checkpoint).")],
    out: Annotated[Path, typer.Option("--out", help="Run directory to create.")],
    label: Annotated[Optional[str], typer.Option(help="Label shared by seeds (default: SOURCE-pP-gG).")] = None,
    prompts_per_step: Annotated[Optional[int], typer.Option(min=1, help="P (else from the config).")] = None,
    samples_per_prompt: Annotated[Optional[int], typer.Option(min=1, help="G (else from the config).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed of this run (default: the config's, else 0).")] = None,
    config: Annotated[Optional[Path], typer.Option(help="Framework config, YAML/JSON (verl's is found).")] = None,
    lr_rule: Annotated[
        Optional[str], typer.Option(help="LR rule of the label: sqrt, linear, none, a=X (else unknown).")
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a run already in --out.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Import a verl, OpenRLHF (TensorBoard) or TRL run, or a W&B history CSV, as a batchscale run directory."""
    from batchscale.ingest.importer import import_log

    result = import_log(format, path, out, label=label, prompts_per_step=prompts_per_step,
                        samples_per_prompt=samples_per_prompt, seed=seed, overwrite=overwrite, config_path=config,
                        lr_rule=lr_rule)
    runs = result.get("runs", [result])  # a W&B chart export may hold several runs
    for one in runs:
        report_problems(one["run"]["import"])
    if json_out:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    for one in runs:
        run, summary = one["run"], one["summary"]
        typer.echo(
            f"imported {run['source']} run -> {one['run_dir']}: {summary['steps']} step records to step "
            f"{summary['last_step']}, {summary['samples']} samples "
            f"(P={run['prompts_per_step']}, G={run['samples_per_prompt']}), label {run['label']}, seed {run['seed']}"
        )


def report_problems(block: dict) -> None:
    """Warnings on stderr for everything the import tolerated."""
    for problem in block["problems"]:
        typer.echo(f"warning: {problem}", err=True)
    unknown = block["unknown_keys"]
    if unknown:
        shown = ", ".join(unknown[:UNKNOWN_KEYS_SHOWN]) + (", ..." if len(unknown) > UNKNOWN_KEYS_SHOWN else "")
        typer.echo(f"note: {len(unknown)} unmapped key(s) not imported ({shown}); see the run descriptor's import.unknown_keys",
                   err=True)
    if block["not_provided"]:
        typer.echo(f"note: missing from the log: {'; '.join(block['not_provided'])}", err=True)
    if block["wall_s_from"].startswith("unavailable"):
        typer.echo(f"note: wall_s {block['wall_s_from']}", err=True)
