"""`batchscale roofline`: analytical decode and training bounds for a model on a hardware preset, with KV capacity.

A thin front end over systems.roofline (formulas in its docstring). Registered on the main app by one line at the end of
batchscale/cli.py. Results go to stdout (a rich table, or one JSON document with --json); progress (the cpu
micro-benchmark) to stderr; bad input raises UserError, which batchscale.cli.main turns into exit code 2.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from batchscale.errors import UserError

DEFAULT_BATCHES = "1,2,4,8,16,32,64,128,256"
DEFAULT_CONTEXT = 2048


def parse_roofline_batches(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; anything that is not a comma list of integers is a UserError."""
    try:
        batches = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError("batches", f"not a comma list of integers: {text!r}", "pass e.g. --batches 1,2,4,8") from None
    return batches


def _format_s(time_s: float) -> str:
    if time_s >= 1:
        return f"{time_s:.3g} s"
    if time_s >= 1e-3:
        return f"{time_s * 1e3:.3g} ms"
    return f"{time_s * 1e6:.3g} us"


def print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    spec = result["hardware_spec"]
    title = (
        f"{result['model']} on {result['hardware']}, context {result['context']}: "
        f"{result['params'] / 1e9:.3g}B params, weights {result['weights_bytes'] / 1e9:.3g} GB, "
        f"ridge {result['ridge_flops_per_byte']:.0f} FLOP/byte, KV max batch {result['kv_max_batch']}"
    )
    table = Table(title=title, caption=f"hardware: {spec['source']}")
    for column in ["batch", "decode step", "decode tok/s", "decode bound", "train step", "train tok/s", "train bound",
                   "KV fits"]:
        table.add_column(column, justify="right")
    for row in result["rows"]:
        decode, train = row["decode"], row["train"]
        table.add_row(
            str(row["batch"]), _format_s(decode["model_s"]), f"{decode['tokens_per_s']:.4g}", decode["bound"],
            _format_s(train["model_s"]), f"{train['tokens_per_s']:.4g}", train["bound"],
            "yes" if row["kv_fits"] else "no",
        )
    Console(width=160).print(table)


def roofline(
    model: Annotated[str, typer.Argument(help="Preset (Qwen2.5-0.5B, Qwen2.5-1.5B, Qwen2.5-7B, Llama-3.1-8B, "
                                              "Qwen3-8B, tiny) or a path to an HF config.json.")],
    hardware: Annotated[str, typer.Argument(help="A100-80GB, H100-SXM, H200, or cpu (measured here, ~2 s).")],
    context: Annotated[Optional[int], typer.Option(help="Context length L in tokens (KV length for decode, sequence "
                                                        "length for training). Default: 2048, or the model's max "
                                                        "positions if smaller.")] = None,
    batches: Annotated[str, typer.Option(help="Comma list of batch sizes (active decode batch = local training "
                                              "batch).")] = DEFAULT_BATCHES,
    dtype_bytes: Annotated[int, typer.Option(help="Bytes per weight/KV element (bf16 = 2).")] = 2,
    mem_util: Annotated[float, typer.Option(help="Fraction of device memory usable for weights + KV cache.")] = 0.9,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")] = False,
) -> None:
    """Roofline bounds for decode and training per batch, bound type, ridge point and KV-cache capacity."""
    from batchscale.systems.hardware import get_hardware
    from batchscale.systems.model_shapes import get_model_shape
    from batchscale.systems.roofline import build_roofline, validate_roofline_inputs

    shape = get_model_shape(model)
    if context is None:
        context = min(DEFAULT_CONTEXT, shape.max_positions)
    batch_list = parse_roofline_batches(batches)
    validate_roofline_inputs(shape, context, batch_list, dtype_bytes, mem_util)  # before the cpu benchmark
    if hardware.lower() == "cpu":
        typer.echo("measuring cpu copy bandwidth and matmul rate ...", err=True)
    result = build_roofline(shape, get_hardware(hardware), context, batch_list, dtype_bytes, mem_util)
    if json_out:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        print_table(result)
