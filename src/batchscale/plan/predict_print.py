"""The table `batchscale predict` prints (the numbers come from `plan.predict`, as its --json prints them)."""

from __future__ import annotations

import sys

from batchscale.analysis.prediction import describe_noise_scale
from batchscale.rundir import PredictionDocument


def print_prediction(document: PredictionDocument) -> None:
    """Rich table to stdout, the predicted best batch highlighted, then B_noise and how q was modelled."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 140)
    ref, best, b_noise = document.reference, document.best, document.b_noise
    table = Table(title=f"Predicted from one run: {document.label} (B_ref = {ref.samples_per_step} samples/step)")
    for name in ("B_train", "rN predicted", "q (samples/s)", "q/q_ref", "T/T_ref", "feasible"):
        table.add_column(name, justify="right")
    for r in document.rows:
        style = "bold green" if r.samples_per_step == best.samples_per_step else ("dim" if not r.feasible else None)
        table.add_row(("* " if r.samples_per_step == best.samples_per_step else "") + str(r.samples_per_step),
                      f"{r.r_n_predicted:.2f}", f"{r.throughput_samples_per_s:,.2f}", f"{r.throughput_gain:.2f}x",
                      f"{r.time_to_target_normalized:.2f}", "yes" if r.feasible else "no", style=style)
    console.print(table)
    unresolved = (f", {document.b_noise_unresolved_steps} of them unresolved" if document.b_noise_unresolved_steps
                  else "")
    console.print(f"[bold]B_noise:[/bold] {describe_noise_scale(b_noise.model_dump())}, from "
                  f"{document.b_noise_steps} steps of the run's second half{unresolved}", highlight=False)
    if document.why_unresolved:
        console.print(f"[bold]Best:[/bold] not named: {document.why_unresolved}.", highlight=False)
    elif best.samples_per_step is None:
        console.print("[bold]Best:[/bold] none: no candidate batch is feasible.", highlight=False)
    else:
        console.print(f"[bold]Predicted best:[/bold] B_train = {best.samples_per_step} (from {best.low} to {best.high} "
                      "over B_noise's interval). rN = (1 + B/B_noise) / (1 + B_ref/B_noise); T/T_ref = rN / (q/q_ref).",
                      highlight=False)
    console.print(f"[bold]Throughput:[/bold] {document.throughput_method}", highlight=False)
    console.print(f"[bold]LR family:[/bold] {lr_family_text(document.lr_rule)}", highlight=False)


def lr_family_text(lr_rule: str | None) -> str:
    """What the predicted rN assume about each batch's learning rate (`plan.predict`'s docstring), as console markup."""
    from rich.markup import escape

    rule = escape(lr_rule) if lr_rule else "unknown"
    text = (f"each batch at the run's lr rule ({rule}), retuned from the run's lr as B changes; a batch at a fixed LR "
            "(or another rule) is not a point this prediction speaks for")
    if str(lr_rule).strip().lower() in ("none", "fixed", "constant", "0", "a=0"):
        text += ("; this run's own rule keeps the LR fixed, so the prediction holds only where that LR is near the "
                 "optimal step size at every batch")
    return text + "."

