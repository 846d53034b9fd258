"""`batchscale plan`: the decision table, the winner, why it wins, and the regime (the library is `plan.make`).

Two sources: a sweep directory (analysis.json + the runs' logs, see `load_sweep_inputs`) or `--table FILE.csv` with
numbers measured elsewhere (see `load_table`). Prints a table to stdout, or with `--json` only the plan document
(`rundir.PlanDocument`: reference, best, explanation, regime, rows with time_to_target in seconds). Writes no files.
`--predict RUN_DIR` is an alias of `batchscale predict RUN_DIR` (`plan.predict_cli`), kept for the scripts that use it:
it takes the prediction's flags (--training-profile and --batches, hidden here) and says on stderr that it is an alias.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from batchscale.errors import UserError


def plan(
    path: Annotated[Optional[Path], typer.Argument(help="Sweep directory holding analysis.json and runs/.")] = None,
    table: Annotated[
        Optional[Path], typer.Option("--table", help="CSV: label,samples_to_target,throughput[,feasible].")
    ] = None,
    reference: Annotated[
        Optional[str], typer.Option("--reference", help="Reference label (default: analysis.json's, or the first row).")
    ] = None,
    generation_profile: Annotated[
        Optional[Path], typer.Option("--generation-profile", help="JSON of `profile generation --json`, for the regime.")
    ] = None,
    critical_generation_batch: Annotated[
        Optional[float], typer.Option("--critical-generation-batch", help="Generation knee, samples in flight.")
    ] = None,
    critical_training_batch: Annotated[
        Optional[float], typer.Option("--critical-training-batch", help="B_simple, samples per update.")
    ] = None,
    model: Annotated[
        Optional[str], typer.Option("--model", help="With --hardware: mark rows whose decode batch's KV cache does not fit.")
    ] = None,
    hardware: Annotated[Optional[str], typer.Option("--hardware", help="Hardware preset, e.g. H100-SXM.")] = None,
    context: Annotated[int, typer.Option("--context", help="Tokens per sequence for the KV-cache bound.")] = 2048,
    mem_util: Annotated[float, typer.Option("--mem-util", help="Usable fraction of device memory.")] = 0.9,
    max_concurrency: Annotated[
        Optional[int], typer.Option("--max-concurrency", help="Sequences decoding at once per engine (default: run.json).")
    ] = None,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs for rollout: replicas = gpus / tensor-parallel.")] = 1,
    tensor_parallel: Annotated[int, typer.Option("--tensor-parallel", help="GPUs one engine replica spans.")] = 1,
    colocated: Annotated[
        bool, typer.Option("--colocated", help="The trainer shares the GPUs: its weights and Adam state use memory.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print only the JSON result.")] = False,
    allow_mixed: Annotated[
        bool, typer.Option("--allow-mixed", help="Plan over runs of different tasks or models (refused by default).")
    ] = False,
    predict: Annotated[
        Optional[Path], typer.Option("--predict", help="An alias of `batchscale predict RUN_DIR` (see its --help).")
    ] = None,
    training_profile: Annotated[Optional[Path], typer.Option("--training-profile", hidden=True)] = None,  # --predict's
    batches: Annotated[Optional[str], typer.Option("--batches", hidden=True)] = None,  # --predict's
    csv_path: Annotated[
        Optional[Path], typer.Option("--csv", help="Also write the table here: one row per label, units in the "
                                                   "column names (n_star_samples, t_target_s).")
    ] = None,
    parquet_path: Annotated[
        Optional[Path], typer.Option("--parquet", help="The same table as Parquet (needs pyarrow).")
    ] = None,
) -> None:
    """Pick the feasible configuration that reaches the target soonest: T = N*/q, T/T_ref = rN / (q/q_ref).
    To predict from one run before any sweep: `batchscale predict RUN_DIR` (--predict RUN_DIR is its alias)."""
    from batchscale.plan.make import make_plan, plan_document
    from batchscale.plan.memory import compute_memory_limit
    from batchscale.rundir.tables import check_table_format, check_table_outputs, plan_table, write_tables

    if predict is not None and (csv_path is not None or parquet_path is not None):
        raise UserError("--csv/--parquet", "write the plan's table; a prediction prints its own document",
                        "drop them, or save `batchscale predict RUN_DIR --json`")
    check_table_format(csv_path, "--csv")
    check_table_format(parquet_path, "--parquet")
    check_table_outputs({"--csv": csv_path, "--parquet": parquet_path},
                        {"PATH": path, "--table": table, "--generation-profile": generation_profile})
    if predict is not None:
        from batchscale.plan.predict_cli import ALIAS_NOTE, show_prediction

        if path is not None or table is not None:
            raise UserError("--predict", "reads one run, not a sweep directory or --table",
                            "pass either --predict RUN_DIR, or a sweep directory / --table")
        typer.echo(ALIAS_NOTE, err=True)
        show_prediction(predict, batches, generation_profile, training_profile, model, hardware, context, mem_util,
                        json_out)
        return
    if (model is None) != (hardware is None):
        raise UserError("--model/--hardware", "the memory check needs both", "pass both, or neither")
    if training_profile is not None or batches is not None:
        raise UserError("--training-profile/--batches", "apply to --predict only",
                        "use `batchscale predict RUN_DIR` with them, or drop them")
    memory = compute_memory_limit(model, hardware, context, mem_util, gpus=gpus, tensor_parallel=tensor_parallel,
                                  colocated=colocated) if model is not None else None
    decision, explanation, regime, source = make_plan(
        path, table, reference, generation_profile, critical_generation_batch, critical_training_batch, memory,
        max_concurrency,
    )
    if path is not None:
        from batchscale.analysis.runs import check_mixed_runs

        check_mixed_runs(path, allow_mixed)  # runs of different tasks or models: refused, or warned about
    document = plan_document(decision, explanation, regime, source).to_json()
    write_tables(plan_table(document), csv_path, parquet_path)
    if json_out:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        print_plan(decision, explanation, regime, document)


def print_plan(decision, explanation: str, regime, document: dict) -> None:
    """Rich table to stdout, the winner highlighted (and a near-optimal set's other members marked ~), then the
    explanation, the verdict (the report's sentence, from the plan document `--json` prints) and the regime."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from batchscale.markup import console_text, inert
    from batchscale.plan.explain import describe_verdict, format_time_to_target

    console = Console(width=None if sys.stdout.isatty() else 140)
    table = Table(title=f"Decision: T = N*/q, reference {console_text(str(decision.reference))}")
    headers = ("label", "P", "G", "B_train", "N* (samples)", "q (samples/s)", "rN", "q/q_ref", "T", "realized T",
               "T/T_ref", "feasible")
    for name in headers:
        table.add_column(name, justify="left" if name == "label" else "right")
    for r in decision.rows:
        m = r.measurement
        near = r.label in decision.near_optimal and r.label != decision.best
        style = "bold green" if r.label == decision.best else ("green" if near else ("dim" if not r.eligible else None))
        censored = {"censored": "censored", "partly censored": "partly cens."}.get(m.censoring)
        n_star = censored if m.samples_to_target is None else \
            f"{m.samples_to_target:,.0f}" + (" (lb)" if censored else "")
        table.add_row(
            Text(("* " if r.label == decision.best else "~ " if near else "") + inert(m.label)),  # data, never markup
            _fmt(m.prompts_per_step), _fmt(m.samples_per_prompt), _fmt(m.samples_per_step),
            f"stopped: {m.extra['stopped']}" if m.extra.get("stopped") else n_star,
            f"{m.throughput_samples_per_s:,.2f}", _fmt(r.r_n, "{:.2f}"), f"{r.throughput_gain:.2f}x",
            format_time_to_target(r.time_to_target_s), format_time_to_target(m.extra.get("time_to_target_realized")),
            _fmt(r.normalized_time_to_target, "{:.2f}"),
            "yes" if m.feasible else "no",
            style=style,
        )  # fmt: skip
    console.print(table)
    for r in decision.rows:  # the table may wrap a long cell: say each stopped point whole
        if r.measurement.extra.get("stopped"):
            stopped = f"{r.label}: {r.measurement.extra['stopped']}."
            console.print(f"[bold]Stopped:[/bold] {console_text(stopped)}", highlight=False)
    best = f"any of {', '.join(decision.near_optimal)} (fastest: {decision.best})" if decision.near_optimal else \
        decision.best or "none"
    console.print(f"[bold]Best:[/bold] {console_text(f'{best}. {explanation}')}", highlight=False)
    verdict = f"{describe_verdict(document)} Runner-up {decision.runner_up or 'none'}."
    console.print(f"[bold]Verdict:[/bold] {console_text(verdict)}", highlight=False)
    console.print(f"[bold]Regime:[/bold] {console_text(regime.sentence)}", highlight=False)


def _fmt(value, spec: str = "{}") -> str:
    return "-" if value is None else spec.format(value)
