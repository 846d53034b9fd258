"""`batchscale report SWEEP_DIR`: analyse (when analysis.json is missing), plan, and write report.html + report.md.

Prints the report's path; with `--json` only `{"report_html", "report_md", "figures", **the plan document}` (the plan
document is `batchscale plan --json`'s: reference, best, explanation, regime, rows, ...). Never imports the training stack.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer

from batchscale.errors import DataWarning, UserError


def report(
    sweep_dir: Annotated[Path, typer.Argument(help="Sweep directory holding runs/ (and analysis.json, if analysed).")],
    generation_profile: Annotated[
        Optional[Path], typer.Option("--generation-profile", help="JSON of `profile generation --json`.")
    ] = None,
    training_profile: Annotated[
        Optional[Path], typer.Option("--training-profile", help="JSON of `profile training --json`.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print only the JSON result.")] = False,
    allow_mixed: Annotated[
        bool, typer.Option("--allow-mixed", help="Report on runs of different tasks or models (refused by default).")
    ] = False,
) -> None:
    """One offline HTML page (and Markdown): the decision, its table, the curves, throughput and how it was measured.

    A report that fails removes what it wrote, the analysis.json it created included, so a rerun starts clean."""
    from batchscale.analysis.analyze import analysis_outputs
    from batchscale.files import removing_created
    from batchscale.report.build import REPORT_OUTPUTS, write_report
    from batchscale.rundir import ANALYSIS_FILE, GenerationProfile, TrainingProfile, read_document
    from batchscale.rundir.ownership import check_may_write_outputs

    if not sweep_dir.is_dir():
        raise UserError(f"sweep directory {sweep_dir}", "does not exist", "give the directory `batchscale sweep` wrote")
    for option, path, kind in (("--generation-profile", generation_profile, GenerationProfile),
                               ("--training-profile", training_profile, TrainingProfile)):
        if path is not None:  # read whole before analysis writes anything
            read_document(path, kind, option)
    outputs = (*analysis_outputs(), *REPORT_OUTPUTS)
    check_may_write_outputs(sweep_dir, outputs, "SWEEP_DIR")  # never over a user's own report.html or report.md
    with removing_created(sweep_dir, outputs):
        if not (sweep_dir / ANALYSIS_FILE).is_file():
            from batchscale.analysis.analyze import analyze

            typer.echo(f"no analysis.json in {sweep_dir}: analysing the runs first", err=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", DataWarning)
                analyze(sweep_dir, allow_mixed=allow_mixed)
            for message in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, DataWarning)):
                typer.echo(f"warning: {message}", err=True)
        written = write_report(sweep_dir, generation_profile, training_profile, allow_mixed=allow_mixed)
    if json_out:
        document = {"report_html": str(written["report_html"]), "report_md": str(written["report_md"]),
                    "figures": [str(p) for p in written["figures"]], **written["plan"]}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        best = written["plan"].get("best") or "none"
        typer.echo(f"best: {best}. {written['plan']['explanation']}", err=True)
        typer.echo(str(written["report_html"]))
