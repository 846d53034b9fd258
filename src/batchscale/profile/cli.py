"""The `batchscale profile` sub-app: throughput measured on this machine.

`profile generation`: rollout tokens/s vs concurrency and the knee (library: profile/generation.py); `profile
training`: seconds per update vs batch, the cost law and matmul utilization (library: profile/training.py). With
--json each prints its document (`rundir.GenerationProfile`, `rundir.TrainingProfile`), which `plan` and `report`
read. Registered on the main app by one line at the end of batchscale/cli.py; torch is imported inside the commands.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from batchscale.errors import UserError
from batchscale.profile.options import (DEFAULT_BATCHES, default_concurrencies, parse_profile_batches, parse_concurrencies,
                                        validate_micro_batch)

ThreadsOption = Annotated[Optional[int], typer.Option(help="torch intra-op threads (default: torch's)")]
DeviceOption = Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N")]
HardwareOption = Annotated[Optional[str], typer.Option(help="compare with a preset (H100-SXM, H200, A100-80GB, cpu; "
                                                             "cuda: the detected GPU's, the default on a GPU)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print one JSON document instead of a table")]

profile_app = typer.Typer(help="Measure throughput on this machine (generation vs concurrency, training vs batch).",
                          no_args_is_help=True)


def set_threads(threads: int | None) -> None:
    """torch's intra-op threads for the measurement (None keeps torch's default)."""
    if threads is None:
        return
    if threads < 1:
        raise UserError("threads", f"must be >= 1, got {threads}", "pass --threads 1 or more")
    import torch

    torch.set_num_threads(threads)


def show(result, json_out: bool, print_table) -> None:
    """The profile as its JSON document on stdout, or as a table."""
    if json_out:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        print_table(result.to_json())


def print_generation_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    knee = result["knee"]
    caption = "knee: need 2+ levels" if knee is None else (
        f"q(B) = {knee['q_max']:.4g} * B / (B + {knee['b_half']:.3g}) tok/s, R^2 {knee['r2']:.3f}; "
        f"B_90 = {knee['b_90']:.3g}{' (extrapolated)' if knee['extrapolated'] else ''}; "
        f"doubling knee ({knee['doubling_threshold']:.0%}): {knee['doubling_knee']}")
    roofline = result.get("roofline")
    if roofline and roofline["bandwidth_fraction_at_1"] is not None:
        caption += (f"; concurrency 1 realizes {roofline['bandwidth_fraction_at_1']:.1%} of {roofline['hardware']}'s "
                    f"HBM bandwidth")
    computes = "" if result["compute_dtype"] == result["dtype"] else f", computed in {result['compute_dtype']}"
    table = Table(title=f"generation: {result['model']} ({result['dtype']}{computes}, {result['backend']}) on "
                        f"{result['device']}, {result['threads']} threads", caption=caption)
    for column in ["concurrency", "tok/s", "resp/s", "active mean", "resp len", "median s", "peak RSS MB"]:
        table.add_column(column, justify="right")
    for row in result["rows"]:
        table.add_row(str(row["concurrency"]), f"{row['tokens_per_s']:.1f}", f"{row['responses_per_s']:.1f}",
                      f"{row['active_mean']:.1f}", f"{row['response_length_mean']:.2f}", f"{row['time_s']:.3f}",
                      f"{row['peak_rss_mb']:.0f}")
    Console(width=140).print(table)


def print_training_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    fit = result["fit"]
    caption = "fit: need 2+ distinct token counts" if fit is None else (
        f"time = {fit['seconds_fixed']:.3g} s + {fit['seconds_per_token']:.3g} s/token * tokens (R^2 {fit['r2']:.3f}); " + (
            "slope <= 0: timings too noisy, add --repeats" if fit["tokens_per_s"] is None else
            f"asymptotic {fit['tokens_per_s']:.4g} tok/s = {fit['utilization_asymptotic']:.1%} of peak"))
    if result.get("roofline"):
        roofline = result["roofline"]
        caption += f"; best update {roofline['utilization_best']:.1%} of {roofline['hardware']}'s dense bf16 peak"
    title = (f"training: {result['model']} ({result['params'] / 1e6:.2f}M params, {result['dtype']} weights, "
             f"{result['compute_dtype']} arithmetic) on "
             f"{result['device']}, {result['threads']} threads; matmul peak {result['peak_flops_per_s'] / 1e9:.1f} "
             f"GFLOP/s")
    if result.get("synthetic_lengths"):
        title += "; random tokens: " + ", ".join(f"{k} {v}" for k, v in result["synthetic_lengths"].items() if v)
    table = Table(title=title, caption=caption)
    for column in ["batch", "tokens", "median s", "tok/s", "samples/s", "GFLOP/s", "utilization"]:
        table.add_column(column, justify="right")
    for row in result["rows"]:
        table.add_row(str(row["samples_per_update"]), str(row["tokens"]), f"{row['seconds']:.4f}", f"{row['tokens_per_s']:.0f}",
                      f"{row['samples_per_s']:.1f}", f"{row['flops_per_s'] / 1e9:.2f}", f"{row['utilization']:.1%}")
    Console(width=140).print(table)


@profile_app.command("generation")
def generation(
    model: Annotated[str, typer.Option(help="tiny, smollm2-135m, or a local Hugging Face model directory")] = "tiny",
    dtype: Annotated[str, typer.Option(help="float32 or bfloat16")] = "float32",
    max_concurrency: Annotated[int, typer.Option(help="profile 1, 2, 4, ... up to this")] = 64,
    concurrency: Annotated[Optional[str], typer.Option(help="explicit comma list of levels (overrides "
                                                            "--max-concurrency)")] = None,
    backend: Annotated[str, typer.Option(help="engine or hf")] = "engine",
    samples_per_prompt: Annotated[int, typer.Option(help="G: responses per prompt, as a rollout draws them")] = 8,
    max_new_tokens: Annotated[int, typer.Option(help="cap on response length")] = 8,
    temperature: Annotated[float, typer.Option()] = 1.0,
    top_p: Annotated[float, typer.Option()] = 1.0,
    repeats: Annotated[int, typer.Option(help="timed repeats per level (median reported)")] = 3,
    waves: Annotated[int, typer.Option(help="responses per level = waves * concurrency ...")] = 4,
    min_responses: Annotated[int, typer.Option(help="... but at least this many")] = 16,
    threads: ThreadsOption = None,
    device: DeviceOption = "auto",
    hardware: HardwareOption = None,
    seed: Annotated[int, typer.Option()] = 0,
    json_out: JsonOption = False,
) -> None:
    """Tokens/s and responses/s vs rollout concurrency, and the critical generation batch (the knee)."""
    levels = parse_concurrencies(concurrency) if concurrency else default_concurrencies(max_concurrency)
    set_threads(threads)
    from batchscale.profile.generation import profile_generation

    result = profile_generation(model, dtype, levels, backend, samples_per_prompt, max_new_tokens, temperature,
                                top_p, repeats, waves, min_responses, seed, device,
                                log=lambda message: typer.echo(message, err=True), hardware=hardware)
    show(result, json_out, print_generation_table)


@profile_app.command("training")
def training(
    model: Annotated[str, typer.Option(help="tiny, smollm2-135m, or a local Hugging Face model directory")] = "tiny",
    batches: Annotated[str, typer.Option(help="comma list of batch sizes (sequences per update)")] = DEFAULT_BATCHES,
    micro_batch_size: Annotated[Optional[int], typer.Option(help="sequences per forward/backward; must divide "
                                                                 "every batch (default: the whole batch)")] = None,
    repeats: Annotated[int, typer.Option(help="timed updates per batch (median reported)")] = 3,
    prompt_tokens: Annotated[Optional[int], typer.Option(help="random prompts of this many tokens (default: the "
                                                              "task's, a few)")] = None,
    response_tokens: Annotated[Optional[int], typer.Option(help="random responses of this many tokens, <eos> last "
                                                                "(default: the task's answers, a few)")] = None,
    dtype: Annotated[str, typer.Option(help="weights: float32 or bfloat16")] = "float32",
    compute_dtype: Annotated[str, typer.Option(help="arithmetic: auto (bf16 autocast where bf16 is native), float32 "
                                                    "or bfloat16 (autocast over float32 weights)")] = "auto",
    threads: ThreadsOption = None,
    device: DeviceOption = "auto",
    hardware: HardwareOption = None,
    seed: Annotated[int, typer.Option()] = 0,
    json_out: JsonOption = False,
) -> None:
    """Seconds per policy update vs batch size, the fit time = a + b * tokens, and utilization of the matmul peak."""
    levels = parse_profile_batches(batches)
    validate_micro_batch(levels, micro_batch_size)
    set_threads(threads)
    from batchscale.profile.training import profile_training

    result = profile_training(model, dtype, levels, micro_batch_size, repeats, seed, device,
                              log=lambda message: typer.echo(message, err=True), compute_dtype=compute_dtype,
                              hardware=hardware, prompt_tokens=prompt_tokens, response_tokens=response_tokens)
    show(result, json_out, print_training_table)
