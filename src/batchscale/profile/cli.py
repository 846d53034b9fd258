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
from batchscale.markup import console_text
from batchscale.profile.options import (DEFAULT_BATCHES, default_concurrencies, parse_profile_batches, parse_concurrencies,
                                        validate_micro_batch)

ThreadsOption = Annotated[Optional[int], typer.Option(help="torch intra-op threads (default: 1 for the tiny model, "
                                                           "else one per CPU available)")]
DeviceOption = Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N")]
HardwareOption = Annotated[Optional[str], typer.Option(help="compare with a preset (H100-SXM, H200, A100-80GB, cpu; "
                                                             "cuda: the detected GPU's, the default on a GPU)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print one JSON document instead of a table")]

profile_app = typer.Typer(help="Measure throughput on this machine (generation vs concurrency, training vs batch).",
                          no_args_is_help=True)


def set_threads(model: str, threads: int | None) -> None:
    """torch's intra-op threads for the measurement: --threads, else chosen from the CPUs available and the model
    (batchscale.threads); the choice is printed once."""
    if threads is not None and threads < 1:
        raise UserError("--threads", f"must be >= 1, got {threads}", "pass --threads 1 or more")
    import torch

    from batchscale.threads import choose_threads

    choice = choose_threads(model, threads, override="--threads")
    torch.set_num_threads(choice.threads)
    typer.echo(choice.line(), err=True)


def show(result, json_out: bool, print_table) -> None:
    """The profile as its JSON document on stdout, or as a table."""
    if json_out:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        print_table(result.to_json())
    from batchscale.plan.doubts import echo_doubts, fit_doubts  # a poor fit is printed, and doubted (issue 45)

    echo_doubts(fit_doubts("this profile", generation_knee=getattr(result, "knee", None),
                           training_fit=getattr(result, "fit", None)))


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
    server = result.get("server")
    where = f"{result['device']}, {result['threads']} threads"
    if server is not None:
        threads = "" if result["threads"] is None else f", {result['threads']} threads"
        where = f"{server['url']} ({server['version'] or server['server_header'] or 'version unknown'}{threads})"
        caption += (f"; ignore_eos {server['ignore_eos']}; tokens from {server['tokens_from']}; endpoint "
                    f"/v1/{'chat/' if server['endpoint'] == 'chat' else ''}completions")
    table = Table(title=console_text(f"generation: {result['model']} ({result['dtype']}{computes}, "
                                     f"{result['backend']}) on {where}"), caption=console_text(caption))
    columns = ["concurrency", "tok/s", "resp/s", "active mean", "resp len", "median s"]
    columns += ["TTFT ms", "ITL ms"] if server is not None else ["peak RSS MB"]
    for column in columns:
        table.add_column(column, justify="right")
    for row in result["rows"]:
        cells = [str(row["concurrency"]), f"{row['tokens_per_s']:.1f}", f"{row['responses_per_s']:.1f}",
                 f"{row['active_mean']:.1f}", f"{row['response_length_mean']:.2f}", f"{row['time_s']:.3f}"]
        if server is not None:
            cells += [_ms(row["ttft_s_median"]), _ms(row["itl_s_median"])]
        else:
            cells.append(f"{row['peak_rss_mb']:.0f}")
        table.add_row(*cells)
    Console(width=140).print(table)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


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
    model: Annotated[Optional[str], typer.Option(help="tiny (default), smollm2-135m, or a local Hugging Face model "
                                                      "directory; with --backend openai the name the server serves")
                     ] = None,
    dtype: Annotated[Optional[str], typer.Option(help="float32 (default) or bfloat16; with --backend openai what the "
                                                      "server computes in (recorded; the roofline needs it)")] = None,
    max_concurrency: Annotated[int, typer.Option(help="profile 1, 2, 4, ... up to this")] = 64,
    concurrency: Annotated[Optional[str], typer.Option(help="explicit comma list of levels (overrides "
                                                            "--max-concurrency)")] = None,
    backend: Annotated[str, typer.Option(help="engine, hf, or openai (any OpenAI-compatible server at "
                                              "--base-url)")] = "engine",
    base_url: Annotated[Optional[str], typer.Option(help="openai: the server, e.g. http://127.0.0.1:8000/v1")] = None,
    api_key_env: Annotated[Optional[str], typer.Option(help="openai: the NAME of the environment variable holding "
                                                            "the API key (never the key)")] = None,
    endpoint: Annotated[str, typer.Option(help="openai: completions, chat, or auto (completions; chat where the "
                                               "server lacks it)")] = "auto",
    ignore_eos: Annotated[bool, typer.Option(help="openai: ask the server to ignore EOS so every response is "
                                                  "--max-new-tokens long (refused: measured with EOS, and said)")
                          ] = True,
    connect_timeout_s: Annotated[float, typer.Option(help="openai: seconds to connect")] = 10.0,
    read_timeout_s: Annotated[float, typer.Option(help="openai: the longest silence within a response, s")] = 60.0,
    level_timeout_s: Annotated[float, typer.Option(help="openai: a whole level (warm-up and repeats), s")] = 600.0,
    shape: Annotated[Optional[str], typer.Option(help="openai with --hardware: the served model's shape, a preset or "
                                                      "config.json (default: --model where it names one)")] = None,
    samples_per_prompt: Annotated[int, typer.Option(help="G: responses per prompt, as a rollout draws them")] = 8,
    max_new_tokens: Annotated[int, typer.Option(help="cap on response length")] = 8,
    temperature: Annotated[float, typer.Option()] = 1.0,
    top_p: Annotated[float, typer.Option()] = 1.0,
    repeats: Annotated[int, typer.Option(help="timed repeats per level (median reported)")] = 3,
    waves: Annotated[int, typer.Option(help="responses per level = waves * concurrency ...")] = 4,
    min_responses: Annotated[int, typer.Option(help="... but at least this many")] = 16,
    threads: Annotated[Optional[int], typer.Option(help="torch intra-op threads (default: torch's); with --backend openai "
                                                       "the server's, as you started it (recorded only)")] = None,
    device: DeviceOption = "auto",
    hardware: HardwareOption = None,
    seed: Annotated[int, typer.Option()] = 0,
    json_out: JsonOption = False,
) -> None:
    """Tokens/s and responses/s vs rollout concurrency, and the critical generation batch (the knee): of batchscale's
    engine, HF generate, or any OpenAI-compatible server (--backend openai --base-url URL --model NAME)."""
    levels = parse_concurrencies(concurrency) if concurrency else default_concurrencies(max_concurrency)
    log = lambda message: typer.echo(message, err=True)  # noqa: E731
    if backend == "openai":
        from batchscale.profile.openai_server import ServerOptions, profile_server

        if base_url is None or model is None:
            raise UserError("--backend openai", "needs --base-url and --model (the name the server serves)",
                            "pass e.g. --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-0.5B")
        if device != "auto":
            raise UserError("--device", "the server chooses its own device", "drop --device with --backend openai")
        options = ServerOptions(base_url, model, api_key_env, endpoint, ignore_eos, connect_timeout_s,
                                read_timeout_s, level_timeout_s, threads, dtype, shape)
        result = profile_server(options, levels, samples_per_prompt, max_new_tokens, temperature, top_p, repeats,
                                waves, min_responses, seed, log=log, hardware=hardware)
        show(result, json_out, print_generation_table)
        return
    given = {"--base-url": base_url, "--api-key-env": api_key_env, "--shape": shape,
             "--endpoint": None if endpoint == "auto" else endpoint, "--no-ignore-eos": None if ignore_eos else True}
    for option, value in given.items():
        if value is not None:
            raise UserError(option, f"applies to --backend openai only, not {backend}",
                            f"drop {option}, or pass --backend openai")
    set_threads(model or "tiny", threads)
    from batchscale.profile.generation import profile_generation

    result = profile_generation(model or "tiny", dtype or "float32", levels, backend, samples_per_prompt,
                                max_new_tokens, temperature, top_p, repeats, waves, min_responses, seed, device,
                                log=log, hardware=hardware)
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
    set_threads(model, threads)
    from batchscale.profile.training import profile_training

    result = profile_training(model, dtype, levels, micro_batch_size, repeats, seed, device,
                              log=lambda message: typer.echo(message, err=True), compute_dtype=compute_dtype,
                              hardware=hardware, prompt_tokens=prompt_tokens, response_tokens=response_tokens)
    show(result, json_out, print_training_table)
