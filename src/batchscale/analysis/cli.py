"""`batchscale analyze DIR`: samples-to-target, rN, invariance and gradient noise from run directories.

Writes analysis.json, four PNGs and report.md into DIR (or --out). Prints a table to stdout and warnings to stderr; with
`--json` prints only the analysis.json document to stdout. Never imports the training stack.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer

from batchscale.errors import DataWarning


def analyze(
    path: Annotated[Path, typer.Argument(help="A run directory, a directory of run directories, or a sweep directory.")],
    target: Annotated[
        Optional[float], typer.Option("--target", help="Target eval score (default: 80% of the reference's rise).")
    ] = None,
    reference: Annotated[
        Optional[str], typer.Option("--reference", help="Reference label (default: smallest sqrt-LR batch).")
    ] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Output directory (default: PATH).")] = None,
    smooth_window: Annotated[
        int, typer.Option("--smooth-window", help="Centred moving average over this many evals (odd; 1: raw evals).")
    ] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print only the analysis.json document.")] = False,
    allow_mixed: Annotated[
        bool, typer.Option("--allow-mixed", help="Compare runs of different tasks or models (refused by default).")
    ] = False,
    score: Annotated[
        str, typer.Option("--score", help="Curve: eval (the eval score) or train-reward (reward/mean of the steps, "
                                          "for runs without evals).")
    ] = "eval",
    csv_path: Annotated[
        Optional[Path], typer.Option("--csv", help="Also write the table here: one row per label, units in the "
                                                   "column names (n_star_samples, t_target_realized_s).")
    ] = None,
    parquet_path: Annotated[
        Optional[Path], typer.Option("--parquet", help="The same table as Parquet (needs pyarrow).")
    ] = None,
) -> None:
    """Compare runs at equal cumulative samples: N* per label with t-intervals on log N*, rN, alignment, B_simple."""
    from batchscale.analysis.analyze import analysis_outputs
    from batchscale.analysis.analyze import analyze as run_analysis
    from batchscale.files import removing_created
    from batchscale.rundir.tables import analysis_table, check_table_format, check_table_outputs, write_tables

    check_table_format(csv_path, "--csv")
    check_table_format(parquet_path, "--parquet")

    out_dir = out if out is not None else path
    check_table_outputs({"--csv": csv_path, "--parquet": parquet_path}, {"PATH": path},
                        [Path(out_dir) / name for name in analysis_outputs()])
    with warnings.catch_warnings(record=True) as caught, removing_created(out_dir, analysis_outputs()):
        warnings.simplefilter("always", DataWarning)  # a failure (a full disk) removes what it wrote, names the path
        result = run_analysis(path, target=target, reference=reference, out=out, smooth_window=smooth_window,
                              allow_mixed=allow_mixed, score=score)
        write_tables(analysis_table(result), csv_path, parquet_path)  # inside: a failed write removes the analysis too
    for message in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, DataWarning)):
        typer.echo(f"warning: {message}", err=True)
    if json_out:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    print_table(result, out if out is not None else path)


def print_table(result: dict, out_dir: Path) -> None:
    """Rich table of the per-label results, then the summary lines."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from batchscale.analysis.plots import ordered_labels
    from batchscale.markup import console_text, inert
    from batchscale.analysis.report import format_number, format_samples_to_target, format_target, rollout_cell

    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"Learning side: reference {console_text(result['reference'])}, target {format_target(result)}")
    for name in ("label", "B", "lr", "rollout", "N* [95% CI] (reached)", "realized T (s)", "rN", "updates",
                 "update ratio", "aligned", "|g| actor"):
        table.add_column(name, justify="left" if name == "label" else "right")
    for label in ordered_labels(result):
        config = result["configs"][label]
        table.add_row(
            Text(inert(label) + (" (ref)" if label == result["reference"] else "")),  # a label is data, never markup
            format_number(config["samples_per_step"]), format_number(config["lr"]), rollout_cell(config),
            format_samples_to_target(config["samples_to_target"]),
            format_number(config["time_to_target_realized"]), format_number(config["r_n"]), format_number(config["updates_to_target"], 4),
            format_number(config["update_ratio"]), format_number(config["aligned"]),
            format_number(config["grad_norm_actor"]),
            style="bold" if label == result["reference"] else None,
        )
    console.print(table)
    if not result["learning_signal"]:
        console.print(f"No learning signal: no verdict. {result['why_no_signal']}.", markup=False, highlight=False)
    console.print(
        f"actor grad-norm slope {format_number(result['grad_norm_slope'])}, "
        f"B_simple {format_number(result['b_simple'])}. Report: {Path(out_dir) / 'report.md'}",
        markup=False, highlight=False,
    )
