"""`batchscale plan`: the decision table, the winner, why it wins, and the regime (the library is `plan.make`).

Two sources: a sweep directory (analysis.json + the runs' logs, see `load_sweep_inputs`) or `--table FILE.csv` with
numbers measured elsewhere (see `load_table`). Prints a table to stdout, or with `--json` only the plan document
(`rundir.PlanDocument`: reference, best, explanation, regime, rows with time_to_target in seconds). Writes no files
but the --csv/--parquet tables. The prediction from one run is its own command, `batchscale predict RUN_DIR`
(plan.predict_cli); the memory options both take are declared once (plan.options).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from batchscale.errors import UserError
from batchscale.plan.options import (DEFAULT_CONTEXT, DEFAULT_MEM_UTIL, ContextOption, GenerationProfileOption,
                                     HardwareOption, JsonOption, MemUtilOption, ModelOption)


def plan(
    path: Annotated[Optional[Path], typer.Argument(help="Sweep directory holding analysis.json and runs/.")] = None,
    table: Annotated[
        Optional[Path], typer.Option("--table", help="CSV: label,samples_to_target,throughput[,feasible].")
    ] = None,
    reference: Annotated[
        Optional[str], typer.Option("--reference", help="Reference label (default: analysis.json's, or the first row).")
    ] = None,
    generation_profile: GenerationProfileOption = None,
    critical_generation_batch: Annotated[
        Optional[float], typer.Option("--critical-generation-batch", help="Generation knee, samples in flight.")
    ] = None,
    critical_training_batch: Annotated[
        Optional[float], typer.Option("--critical-training-batch", help="B_simple, samples per update.")
    ] = None,
    model: ModelOption = None,
    hardware: HardwareOption = None,
    context: ContextOption = DEFAULT_CONTEXT,
    mem_util: MemUtilOption = DEFAULT_MEM_UTIL,
    max_concurrency: Annotated[
        Optional[int], typer.Option("--max-concurrency", help="Sequences decoding at once per engine (default: run.json).")
    ] = None,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs for rollout: replicas = gpus / tensor-parallel.")] = 1,
    tensor_parallel: Annotated[int, typer.Option("--tensor-parallel", help="GPUs one engine replica spans.")] = 1,
    colocated: Annotated[
        bool, typer.Option("--colocated", help="The trainer shares the GPUs: its weights and Adam state use memory.")
    ] = False,
    json_out: JsonOption = False,
    allow_mixed: Annotated[
        bool, typer.Option("--allow-mixed", help="Plan over runs of different tasks or models (refused by default).")
    ] = False,
    csv_path: Annotated[
        Optional[Path], typer.Option("--csv", help="Also write the table here: one row per label, units in the "
                                                   "column names (n_star_samples, t_target_s).")
    ] = None,
    parquet_path: Annotated[
        Optional[Path], typer.Option("--parquet", help="The same table as Parquet (needs pyarrow).")
    ] = None,
) -> None:
    """Pick the feasible configuration that reaches the target soonest: T = N*/q, T/T_ref = rN / (q/q_ref).
    To predict from one run before any sweep: `batchscale predict RUN_DIR`."""
    from batchscale.plan.make import make_plan, plan_document
    from batchscale.plan.memory import compute_memory_limit
    from batchscale.rundir.tables import check_table_format, check_table_outputs, plan_table, write_tables

    check_table_format(csv_path, "--csv")
    check_table_format(parquet_path, "--parquet")
    check_table_outputs({"--csv": csv_path, "--parquet": parquet_path},
                        {"PATH": path, "--table": table, "--generation-profile": generation_profile})
    if (model is None) != (hardware is None):
        raise UserError("--model/--hardware", "the memory check needs both", "pass both, or neither")
    memory = compute_memory_limit(model, hardware, context, mem_util, gpus=gpus, tensor_parallel=tensor_parallel,
                                  colocated=colocated) if model is not None else None
    if path is not None and table is None and Path(path).is_dir():
        from batchscale.analysis.runs import check_mixed_runs

        check_mixed_runs(path, allow_mixed)  # runs of different tasks or models: refused before any plan is made
    made = make_plan(path, table, reference, generation_profile, critical_generation_batch, critical_training_batch,
                     memory, max_concurrency)
    document = plan_document(made).to_json()
    write_tables(plan_table(document), csv_path, parquet_path)
    if json_out:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        print_plan(made.decision, made.explanation, made.regime, document)
    if path is not None:  # measurements to doubt (issue 45): on stderr, after the table they qualify
        from batchscale.plan.doubts import echo_doubts, sweep_doubts

        echo_doubts(sweep_doubts(path, [r.measurement for r in made.decision.rows], generation_profile))


def print_plan(decision, explanation: str, regime, document: dict) -> None:
    """Rich table to stdout, its rows marked and coloured by the kind of answer (plan/answer.py: a resolved winner
    green and starred, a tie's members blue, a near-optimal set's yellow, an unresolved best estimate "?" with no
    colour), the kind's heading, then the explanation, the verdict (the report's sentence, from the plan document
    `--json` prints) and the regime."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from batchscale.markup import console_text, inert
    from batchscale.plan.answer import CONSOLE_STYLES, classify_answer
    from batchscale.plan.explain import describe_verdict, format_time_to_target

    console = Console(width=None if sys.stdout.isatty() else 140)
    table = Table(title=f"Decision: T = N*/q, reference {console_text(str(decision.reference))}")
    headers = ("label", "P", "G", "B_train", "N* (samples)", "q (samples/s)", "rN", "q/q_ref", "T", "realized T",
               "T/T_ref", "budget/N*_ref", "feasible")
    for name in headers:
        table.add_column(name, justify="left" if name == "label" else "right", no_wrap=name == "label")  # its mark too
    rows_json = {row["label"]: row for row in document["rows"]}
    answer = classify_answer(document)
    mark, marked_style, heading_style = CONSOLE_STYLES[answer.kind]
    for r in decision.rows:
        m = r.measurement
        marked = r.label in answer.marked
        style = marked_style if marked else ("dim" if not r.eligible else None)
        censored = {"censored": "censored", "partly censored": "partly cens."}.get(m.censoring)
        n_star = censored if m.samples_to_target is None else \
            f"{m.samples_to_target:,.0f}" + (" (lb)" if censored else "")
        table.add_row(
            Text((mark if marked else "") + inert(m.label)),  # data, never markup
            _fmt(m.prompts_per_step), _fmt(m.samples_per_prompt), _fmt(m.samples_per_step),
            f"stopped: {m.extra['stopped']}" if m.extra.get("stopped") else n_star,
            f"{m.throughput_samples_per_s:,.2f}", _fmt(r.r_n, "{:.2f}"), f"{r.throughput_gain:.2f}x",
            format_time_to_target(r.time_to_target_s), format_time_to_target(m.extra.get("time_to_target_realized")),
            _fmt(r.normalized_time_to_target, "{:.2f}"),
            _fmt(rows_json[m.label]["budget_over_reference_n_star"], "{:.2f}")
            + (" (cut)" if rows_json[m.label]["budget_cut"] else ""),
            "yes" if m.feasible else "no",
            style=style,
        )  # fmt: skip
    console.print(table)
    for r in decision.rows:  # the table may wrap a long cell: say each stopped point whole
        if r.measurement.extra.get("stopped"):
            stopped = f"{r.label}: {r.measurement.extra['stopped']}."
            console.print(f"[bold]Stopped:[/bold] {console_text(stopped)}", highlight=False)
    for label in decision.not_run:
        console.print(f"[bold]Not run:[/bold] {console_text(label)} (the time budget ended before any seed of it ran).",
                      highlight=False)
    heading = answer.heading if answer.badge.lower() in answer.heading.lower() else \
        f"{answer.heading} ({answer.badge.lower()})"
    console.print(f"[{heading_style}]{console_text(heading)}.[/]", highlight=False)
    console.print(console_text(answer.legend(console=True)), style="dim", highlight=False)
    best = f"any of {', '.join(decision.near_optimal)} (fastest: {decision.best})" if decision.near_optimal else \
        decision.best or "none"
    best_is = "Best" if answer.recommends else "Best estimate"
    console.print(f"[bold]{best_is}:[/bold] {console_text(f'{best}. {explanation}')}", highlight=False)
    verdict = f"{describe_verdict(document)} Runner-up {decision.runner_up or 'none'}."
    console.print(f"[bold]Verdict:[/bold] {console_text(verdict)}", highlight=False)
    console.print(f"[bold]Regime:[/bold] {console_text(regime.sentence)}", highlight=False)
    if document.get("generation_source"):
        also = "; it also gives the generation side of q (see throughput_method in --json)" \
            if document.get("generation_backend") == "openai" else ""
        generation = f"knee from {document['generation_source']}{also}"
        console.print(f"[bold]Generation:[/bold] {console_text(generation)}", highlight=False)


def _fmt(value, spec: str = "{}") -> str:
    return "-" if value is None else spec.format(value)
