"""`batchscale profile generation --backend openai`: the knee of the server you deploy (vLLM, SGLang, llama.cpp, TGI,
transformers serve: any OpenAI-compatible server), measured the way `profile.generation` measures the engine.

Workload: the engine profile's (`profile.generation.build_workload`): the built-in task's prompts, G responses per
prompt (G requests with n = 1, as a rollout sends them), temperature, top_p and max new tokens; with `ignore_eos` where
the server takes it (vLLM, SGLang and llama.cpp do), so that every response is max_new_tokens long and the level
measures decoding, not the model's taste for stopping. A server that refuses it (HTTP 400/422 naming it; transformers
serve does) is measured with EOS allowed and the profile says "refused"; one that accepts it but still stops at EOS,
"ignored". Likewise `stream_options.include_usage`: refused, tokens are counted from the stream's chunks.

A level B: `waves * B` responses (at least `min_responses`) through B workers, each sending its next request when its
last one ends, so B requests are in flight until the queue runs dry. One untimed warm-up pass of B requests, then
`repeats` timed passes of the whole workload; the row reports the repeat of median tokens/s (so tokens / time_s =
tokens_per_s holds within the row; `time_s_repeats` lists every repeat). A pass's time runs from its first request
sent to its last response ended. Per level: tokens/s, responses/s, time to first token and inter-token latency
(median and 90th percentile over responses), and the concurrency actually reached: `active_mean`, requests in flight
time-weighted over the pass (sum of request durations / pass time); `decoding_mean`, the same over each stream's first
to last token. The first request of the profile settles the endpoint and the optional fields and warms the server.

Knee: `systems.knee.fit_saturating_throughput` on (B, tokens/s), as for the engine. Roofline (`--hardware` with a model
shape, `--shape` or `--model` naming a preset or config.json, and `--dtype`): weight bytes per decode step from the
shape (`ModelShape.decode_weight_bytes`), times decode steps, over the pass time. A server counts no decode steps, so
they are estimated: tokens / (sum of streams' decode spans / the spans' union), the mean number of sequences decoding
together under continuous batching (exact at concurrency 1). Departure from the engine's fraction: the estimate
assumes the server decodes every stream it is streaming in each step.

The client shares the machine with a local server: its own CPU seconds per pass are recorded (`client_cpu_s`).
"""

from __future__ import annotations

import asyncio
import math
import resource
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass

from batchscale.console import console, draws_live, in_long_phase
from batchscale.errors import UserError
from batchscale.profile.generation import add_bandwidth, build_workload, check_profile_values, fit_knee
from batchscale.profile.openai_client import (Address, ServerFault, api_key_headers, describe_server, make_client,
                                              one_line, parse_base_url, request_body, stream_one)
from batchscale.rundir import GenerationProfile

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
INSTALL_LINE = "pip install 'batchscale[server]' (httpx)"


@dataclass(frozen=True)
class ServerOptions:
    base_url: str
    model: str
    api_key_env: str | None = None
    endpoint: str = "auto"  # auto (completions, chat where the server lacks it), completions, chat
    ignore_eos: bool = True
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0  # the longest silence within a response
    level_timeout_s: float = 600.0  # a whole level: warm-up and repeats
    threads: int | None = None  # the server's, as the user started it (recorded, not set)
    dtype: str | None = None  # what the server computes in (recorded; the roofline needs it)
    shape: str | None = None  # a model preset or config.json for the roofline's weight bytes


@dataclass
class Negotiated:
    """What the first request settled: the endpoint and the optional fields the server takes."""

    endpoint: str
    ignore_eos: bool
    stream_usage: bool
    endpoint_note: str | None = None
    ignore_eos_note: str | None = None


def check_server_options(options: ServerOptions) -> None:
    for name, value in (("connect_timeout_s", options.connect_timeout_s), ("read_timeout_s", options.read_timeout_s),
                        ("level_timeout_s", options.level_timeout_s)):
        if not (value > 0 and math.isfinite(value)):
            raise UserError(f"--{name.replace('_', '-')}", f"must be a positive number of seconds, got {value}",
                            f"pass e.g. --{name.replace('_', '-')} 30")
    if options.endpoint not in ("auto", "completions", "chat"):
        raise UserError("--endpoint", f"must be auto, completions or chat, got {options.endpoint!r}",
                        "pass --endpoint completions (or chat)")
    if options.dtype is not None and options.dtype not in DTYPE_BYTES:
        raise UserError("--dtype", f"must be one of {', '.join(DTYPE_BYTES)} for a server, got {options.dtype!r}",
                        "pass the dtype the server computes in, e.g. --dtype bfloat16")
    if options.threads is not None and options.threads < 1:
        raise UserError("--threads", f"must be >= 1, got {options.threads}", "pass the server's thread count")


def roofline_weights(options: ServerOptions, hardware: str | None) -> tuple[object | None, float | None, str | None]:
    """(preset, weight bytes per decode step, where they came from) for --hardware; (None, None, None) without."""
    from batchscale.profile.options import named_hardware
    from batchscale.systems.model_shapes import MODEL_PRESETS, get_model_shape

    preset = named_hardware(hardware)
    if preset is None:
        return None, None, None
    shape_name = options.shape or options.model
    if options.shape is None and shape_name.lower() not in {k.lower() for k in MODEL_PRESETS}:
        from pathlib import Path

        if not Path(shape_name).exists():
            raise UserError("--shape", f"--hardware needs the served model's shape, and --model {one_line(shape_name)} "
                            "names no preset or local config.json", "pass --shape PRESET or --shape path/config.json")
    if options.dtype is None:
        raise UserError("--dtype", "--hardware needs the bytes per weight the server reads",
                        "pass the dtype the server computes in, e.g. --dtype bfloat16")
    shape = get_model_shape(shape_name)
    return preset, float(shape.decode_weight_params * DTYPE_BYTES[options.dtype]), shape.name


@in_long_phase("profiling generation on a server (throughput vs concurrency)")
def profile_server(options: ServerOptions, concurrencies: list[int], samples_per_prompt: int = 8,
                   max_new_tokens: int = 8, temperature: float = 1.0, top_p: float = 1.0, repeats: int = 3,
                   waves: int = 4, min_responses: int = 16, seed: int = 0, threshold: float = 0.10, log=print,
                   hardware: str | None = None) -> GenerationProfile:
    """Measure every concurrency level on the server and fit the knee (`rundir.GenerationProfile`, backend openai).
    Every input is checked before the first request; a failed request is a UserError naming the level and cause."""
    try:
        import httpx  # noqa: F401
    except ImportError:
        raise UserError("--backend openai", "needs the async HTTP client httpx", INSTALL_LINE) from None
    from batchscale.config import TaskConfig
    from batchscale.tasks import build_task

    check_profile_values(repeats, waves, min_responses, samples_per_prompt, temperature, top_p, max_new_tokens)
    check_server_options(options)
    address = parse_base_url(options.base_url)
    headers = api_key_headers(options.api_key_env)
    preset, weight_bytes, weights_from = roofline_weights(options, hardware)
    task = build_task(TaskConfig())
    workloads = {level: build_workload(task, max(waves * level, min_responses), samples_per_prompt, seed)
                 for level in concurrencies}
    sampling = {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}
    server, negotiated, rows, counts = asyncio.run(measure_server(
        options, address, headers, workloads, sampling, repeats, log))
    roofline = None
    if preset is not None:
        roofline = {**add_bandwidth(rows, weight_bytes, preset, steps_key="decode_steps_estimated"),
                    "decode_steps": "estimated: tokens / mean sequences decoding together (streams' first to last "
                                    "token)", "weights_from": weights_from}
    stopped = sum(row["stopped_early"] for row in rows)
    ignore_eos = ("off" if not options.ignore_eos else "refused" if not negotiated.ignore_eos else
                  "ignored" if stopped else "honoured")
    if ignore_eos in ("refused", "ignored"):
        log(f"note: the server {ignore_eos} ignore_eos: measured with EOS allowed ({stopped} responses stopped "
            "before max_new_tokens)")
    server.update(url=address.url, endpoint=negotiated.endpoint, endpoint_note=negotiated.endpoint_note,
                  ignore_eos=ignore_eos, ignore_eos_note=negotiated.ignore_eos_note,
                  stream_usage=negotiated.stream_usage, tokens_from=describe_counts(*counts),
                  timeouts_s={"connect": options.connect_timeout_s, "read": options.read_timeout_s,
                              "level": options.level_timeout_s},
                  api_key_env=options.api_key_env)
    return GenerationProfile.model_validate({
        "model": options.model, "dtype": options.dtype or "unknown", "compute_dtype": options.dtype or "unknown",
        "backend": "openai", "device": "server", "threads": options.threads,
        "params": None, "task": task.name, "samples_per_prompt": samples_per_prompt, "sampling": sampling,
        "repeats": repeats, "rows": rows, "knee": fit_knee(rows, threshold), "roofline": roofline, "server": server,
    })


def describe_counts(from_usage: int, from_chunks: int) -> str:
    if not from_chunks:
        return "usage"
    if not from_usage:
        return "stream chunks"
    return f"usage for {from_usage} responses, stream chunks for {from_chunks}"


async def measure_server(options: ServerOptions, address: Address, headers: dict, workloads: dict[int, list[str]],
                         sampling: dict, repeats: int, log) -> tuple[dict, Negotiated, list[dict], tuple[int, int]]:
    """Discovery, the first request, then every level; returns the server block's facts, what was negotiated, the
    rows and how many responses' tokens came from usage / from chunks."""
    largest = max(workloads)
    client = make_client(address, headers, options.connect_timeout_s, options.read_timeout_s, largest + 4)
    async with client:
        server = await describe_server(client, address, options.model)
        first_prompt = workloads[min(workloads)][0]
        negotiated = await negotiate(client, address, options, first_prompt, sampling)
        rows, counts = [], [0, 0]

        def send(prompt: str):
            body = request_body(negotiated.endpoint, options.model, prompt, sampling["max_new_tokens"],
                                sampling["temperature"], sampling["top_p"], negotiated.ignore_eos,
                                negotiated.stream_usage)
            return stream_one(client, endpoint_url(address, negotiated.endpoint), body)
        with level_bar() as advance:
            for level, prompts in workloads.items():
                try:
                    async with asyncio.timeout(options.level_timeout_s):
                        row = await measure_level(send, prompts, level, repeats, sampling["max_new_tokens"],
                                                  lambda done, total: advance(level, done, total), counts)
                except TimeoutError:
                    raise level_error(level, f"the level did not finish within {options.level_timeout_s:g} s "
                                             "(--level-timeout-s)") from None
                except ServerFault as e:
                    raise level_error(level, e.cause) from None
                rows.append(row)
                log(f"concurrency {level:>4}: {row['tokens_per_s']:9.1f} tok/s  {row['responses_per_s']:8.1f} resp/s  "
                    f"in flight {row['active_mean']:.1f}  TTFT {row['ttft_s_median'] * 1e3:.0f} ms  "
                    f"ITL {fmt_ms(row['itl_s_median'])}  ({row['responses']} responses, median of {repeats})")
    return server, negotiated, rows, tuple(counts)


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f} ms"


def level_error(level: int, cause: str) -> UserError:
    return UserError(f"concurrency {level}", cause, "check the server's log; raise --read-timeout-s / "
                     "--level-timeout-s for a slow server, or profile fewer levels (--concurrency)")


def endpoint_url(address: Address, endpoint: str) -> str:
    return f"{address.api_root}/{'chat/completions' if endpoint == 'chat' else 'completions'}"


async def negotiate(client, address: Address, options: ServerOptions, prompt: str, sampling: dict) -> Negotiated:
    """The first request: the endpoint (completions; chat where --endpoint says so, or the server has no completions
    and --endpoint is auto) and which optional fields (ignore_eos, stream_options) the server takes. A refusal names
    the field (HTTP 400/422) or, when it names none, each field is dropped in turn; any other failure is an error."""
    chosen = Negotiated("chat" if options.endpoint == "chat" else "completions", options.ignore_eos, True)
    tried = set()
    while True:
        body = request_body(chosen.endpoint, options.model, prompt, sampling["max_new_tokens"],
                            sampling["temperature"], sampling["top_p"], chosen.ignore_eos, chosen.stream_usage)
        tried.add((chosen.endpoint, chosen.ignore_eos, chosen.stream_usage))
        try:
            await stream_one(client, endpoint_url(address, chosen.endpoint), body)
            return chosen
        except ServerFault as fault:
            if fault.status in (404, 405) and chosen.endpoint == "completions" and options.endpoint == "auto":
                chosen.endpoint, chosen.endpoint_note = "chat", (
                    f"the server has no /v1/completions (HTTP {fault.status}): measured through /v1/chat/completions, "
                    "whose chat template lengthens each prompt")
                continue
            retry = fault.status in (400, 422) and next_try(chosen, fault.body, tried)
            if not retry:
                raise UserError(f"--base-url {address.url}", f"the first request to /v1/"
                                f"{'chat/' if chosen.endpoint == 'chat' else ''}completions failed: {fault.cause}",
                                "check --model and the server's log") from None


def next_try(chosen: Negotiated, refusal: str, tried: set) -> bool:
    """Drop what the refusal names (ignore_eos, stream_options), else each optional field in turn, then both; False
    when every combination has been tried. Fields are only ever dropped, never added back."""
    named = {field for field in ("ignore_eos", "stream_options") if field in refusal}
    candidates = [(chosen.ignore_eos and "ignore_eos" not in named, chosen.stream_usage and "stream_options" not in named)]
    candidates += [(False, chosen.stream_usage), (chosen.ignore_eos, False), (False, False)]
    for ignore_eos, usage in candidates:
        if (ignore_eos, usage) != (chosen.ignore_eos, chosen.stream_usage) and \
                (chosen.endpoint, ignore_eos, usage) not in tried:
            if chosen.ignore_eos and not ignore_eos:
                chosen.ignore_eos_note = one_line(refusal)
            chosen.ignore_eos, chosen.stream_usage = ignore_eos, usage
            return True
    return False


async def run_pass(send, prompts: list[str], level: int, on_done) -> tuple[list, float, float]:
    """Every prompt through `level` workers (a worker sends its next request when its last one ends); returns the
    responses in prompt order and the pass's start and end (perf_counter)."""
    results: list = [None] * len(prompts)
    queue = iter(enumerate(prompts))  # shared: each worker takes the next prompt

    async def worker():
        for index, prompt in queue:
            results[index] = await send(prompt)
            on_done()

    start = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(min(level, len(prompts)))]
    try:
        await asyncio.gather(*tasks)
    finally:  # a failed request stops the pass: the other workers' requests are cancelled, not left running
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return results, start, time.perf_counter()


async def measure_level(send, prompts: list[str], level: int, repeats: int, max_new_tokens: int, progress,
                        counts: list[int]) -> dict:
    """The warm-up pass, `repeats` timed passes, and the row of the median repeat."""
    await run_pass(send, prompts[:level], level, lambda: None)
    passes = []
    for repeat in range(repeats):
        done = [0]

        def tick():
            done[0] += 1
            progress(repeat * len(prompts) + done[0], repeats * len(prompts))
        cpu_start = client_cpu_s()
        responses, start, end = await run_pass(send, prompts, level, tick)
        passes.append(summarize_pass(responses, end - start, max_new_tokens, client_cpu_s() - cpu_start))
    for response in responses:
        counts[0 if response.usage_tokens is not None else 1] += 1
    rates = [row["tokens_per_s"] for row in passes]
    row = passes[rates.index(statistics.median_low(rates))]
    return {"concurrency": level, **row, "time_s_repeats": [row["time_s"] for row in passes]}


def client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def summarize_pass(responses: list, time_s: float, max_new_tokens: int, cpu_s: float) -> dict:
    """One timed pass as a row (GenerationRow's fields)."""
    import numpy as np

    for response in responses:
        if response.tokens > max_new_tokens:
            raise ServerFault(f"a response has {response.tokens} tokens, more than max_tokens {max_new_tokens}: the "
                              "server does not hold to max_tokens")
    lengths = [r.tokens for r in responses]
    spans = [(r.first_token_s, r.last_token_s) for r in responses if r.first_token_s is not None]
    decoding_s = sum(last - first for first, last in spans)
    union_s = union_length(spans)
    together = decoding_s / union_s if union_s > 0 else 1.0  # sequences decoding at once, on average
    ttft = [r.first_token_s - r.sent_s for r in responses if r.first_token_s is not None]
    itl = [(r.last_token_s - r.first_token_s) / (r.tokens - 1) for r in responses
           if r.first_token_s is not None and r.tokens >= 2]

    def quantile(values: list[float], q: float) -> float | None:
        return float(np.percentile(values, q)) if values else None
    return {
        "responses": len(responses), "tokens": sum(lengths), "time_s": time_s,
        "tokens_per_s": sum(lengths) / time_s, "responses_per_s": len(responses) / time_s,
        "active_mean": sum(r.done_s - r.sent_s for r in responses) / time_s,
        "decode_steps": None, "decode_steps_estimated": sum(lengths) / together,
        "response_length_mean": statistics.fmean(lengths), "response_length_max": max(lengths),
        "peak_rss_mb": None, "ttft_s_median": quantile(ttft, 50), "ttft_s_p90": quantile(ttft, 90),
        "itl_s_median": quantile(itl, 50), "itl_s_p90": quantile(itl, 90), "decoding_mean": decoding_s / time_s,
        "stopped_early": sum(r.finish_reason == "stop" and r.tokens < max_new_tokens for r in responses),
        "client_cpu_s": cpu_s,
    }


def union_length(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of intervals."""
    total, end = 0.0, -math.inf
    for first, last in sorted(spans):
        if last > end:
            total += last - max(first, end)
            end = last
    return total


@contextmanager
def level_bar():
    """A rich bar of responses per level in a terminal; nothing in a pipe (the level's line says it there)."""
    if not draws_live(console):
        yield lambda level, done, total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("warming up", total=None)

        def advance(level: int, done: int, total: int) -> None:
            progress.update(task, description=f"concurrency {level}: responses", completed=done, total=total)
        yield advance
