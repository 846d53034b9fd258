"""`batchscale plan`: the decision table, the winner, why it wins, and the regime.

Two sources: a sweep directory (analysis.json + the runs' logs, see `load_sweep`) or `--table FILE.csv` with numbers measured
elsewhere (see `load_table`). Prints a table to stdout, or with `--json` only the JSON document
`{"reference", "best", "explanation", "regime", "rows": [{"label", "r_n", "throughput_gain", "time_to_target",
"normalized_time_to_target", "feasible", ...}], ...}` with time_to_target in seconds. Writes no files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from batchscale.errors import UserError
from batchscale.plan.decide import Plan, PlanRow, compute_plan
from batchscale.plan.explain import Regime, classify_regime, explain_decision, format_duration
from batchscale.plan.load_sweep import THROUGHPUT_METHOD, load_sweep
from batchscale.plan.load_table import load_table
from batchscale.plan.memory import MemoryLimit, apply_memory_limit, compute_memory_limit


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
        Optional[float], typer.Option("--critical-training-batch", help="B_simple, samples per step.")
    ] = None,
    model: Annotated[
        Optional[str], typer.Option("--model", help="With --hardware: mark rows whose P*G KV cache does not fit.")
    ] = None,
    hardware: Annotated[Optional[str], typer.Option("--hardware", help="Hardware preset, e.g. H100-SXM.")] = None,
    context: Annotated[int, typer.Option("--context", help="Tokens per sequence for the KV-cache bound.")] = 2048,
    mem_util: Annotated[float, typer.Option("--mem-util", help="Usable fraction of device memory.")] = 0.9,
    json_out: Annotated[bool, typer.Option("--json", help="Print only the JSON result.")] = False,
) -> None:
    """Pick the feasible configuration that reaches the target soonest: T = N*/q, T/T_ref = rN / (q/q_ref)."""
    if (model is None) != (hardware is None):
        raise UserError("--model/--hardware", "the memory check needs both", "pass both, or neither")
    memory = compute_memory_limit(model, hardware, context, mem_util) if model is not None else None
    decision, explanation, regime, source = make_plan(
        path, table, reference, generation_profile, critical_generation_batch, critical_training_batch, memory
    )
    if json_out:
        sys.stdout.write(json.dumps(plan_to_json(decision, explanation, regime, source), indent=2) + "\n")
    else:
        print_plan(decision, explanation, regime)


def make_plan(
    path: Path | None = None,
    table: Path | None = None,
    reference: str | None = None,
    generation_profile: Path | None = None,
    critical_generation_batch: float | None = None,
    critical_training_batch: float | None = None,
    memory: MemoryLimit | None = None,
) -> tuple[Plan, str, Regime, dict]:
    """The decision, its explanation, the regime and where the numbers came from (for `plan_to_json`); the `plan`
    command and the report both call this, so they cannot disagree."""
    if (path is None) == (table is None):
        raise UserError("plan input", "needs exactly one of a sweep directory or --table", "give one of them")
    if table is not None:
        measurements = load_table(table)
        reference = reference if reference is not None else measurements[0].label
        source = {"source": "table", "table": str(table), "throughput_method": "as given in the table"}
        gen_knee, b_simple = None, None
    else:
        sweep = load_sweep(path, reference, generation_profile)
        measurements, reference = sweep.measurements, sweep.reference
        source = {
            "source": "sweep", "sweep": str(path), "analysis": str(sweep.analysis_path), "target": sweep.target,
            "throughput_method": THROUGHPUT_METHOD, "generation_profile": str(sweep.profile_path or "") or None,
        }
        gen_knee, b_simple = sweep.critical_generation_batch_samples, sweep.critical_training_batch_samples
    for name, value in (("--critical-generation-batch", critical_generation_batch),
                        ("--critical-training-batch", critical_training_batch)):  # fmt: skip
        if value is not None and not value > 0:
            raise UserError(name, f"must be a positive number of samples, got {value}", "pass a positive number")
    if memory is not None:
        measurements = apply_memory_limit(measurements, memory)
        source["memory"] = {"model": memory.model, "hardware": memory.hardware, "context": memory.context,
                            "kv_max_batch": memory.kv_max_batch}
    decision = compute_plan(measurements, reference)
    regime = classify_regime(
        critical_generation_batch if critical_generation_batch is not None else gen_knee,
        critical_training_batch if critical_training_batch is not None else b_simple,
    )
    return decision, explain_decision(decision), regime, source


def plan_to_json(decision: Plan, explanation: str, regime: Regime, source: dict) -> dict:
    """The machine-readable plan; times in seconds, throughput in samples/s."""
    return {
        "reference": decision.reference,
        "best": decision.best,
        "explanation": explanation,
        "regime": {
            "name": regime.name,
            "sentence": regime.sentence,
            "critical_generation_batch": regime.critical_generation_batch_samples,
            "critical_training_batch": regime.critical_training_batch_samples,
        },
        **source,
        "rows": [_row_to_json(r) for r in decision.rows],
    }


def _row_to_json(r: PlanRow) -> dict:
    m = r.measurement
    return {
        "label": m.label,
        "prompts_per_step": m.prompts_per_step,
        "samples_per_prompt": m.samples_per_prompt,
        "samples_per_step": m.samples_per_step,
        "samples_to_target": m.samples_to_target,
        "throughput_samples_per_s": m.throughput_samples_per_s,
        "r_n": r.r_n,
        "throughput_gain": r.throughput_gain,
        "time_to_target": r.time_to_target_s,
        "normalized_time_to_target": r.normalized_time_to_target,
        "score": r.score,
        "feasible": m.feasible,
        "censoring": m.censoring,
        "eligible": r.eligible,
        **m.extra,
    }


def print_plan(decision: Plan, explanation: str, regime: Regime) -> None:
    """Rich table to stdout, the winner highlighted, then the explanation and the regime."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 140)
    table = Table(title=f"Decision: T = N*/q, reference {decision.reference}")
    headers = ("label", "P", "G", "B_train", "N* (samples)", "q (samples/s)", "rN", "q/q_ref", "T", "T/T_ref", "feasible")
    for name in headers:
        table.add_column(name, justify="left" if name == "label" else "right")
    for r in decision.rows:
        m = r.measurement
        style = "bold green" if r.label == decision.best else ("dim" if not r.eligible else None)
        censored = {"censored": "censored", "partly censored": "partly cens."}.get(m.censoring)
        table.add_row(
            ("* " if r.label == decision.best else "") + m.label,
            _fmt(m.prompts_per_step), _fmt(m.samples_per_prompt), _fmt(m.samples_per_step),
            censored if m.samples_to_target is None else f"{m.samples_to_target:,.0f}" + (" (lb)" if censored else ""),
            f"{m.throughput_samples_per_s:,.2f}", _fmt(r.r_n, "{:.2f}"), f"{r.throughput_gain:.2f}x",
            format_duration(r.time_to_target_s), _fmt(r.normalized_time_to_target, "{:.2f}"),
            "yes" if m.feasible else "no",
            style=style,
        )  # fmt: skip
    console.print(table)
    console.print(f"[bold]Best:[/bold] {decision.best or 'none'}. {explanation}", highlight=False)
    console.print(f"[bold]Regime:[/bold] {regime.sentence}", highlight=False)


def _fmt(value, spec: str = "{}") -> str:
    return "-" if value is None else spec.format(value)
