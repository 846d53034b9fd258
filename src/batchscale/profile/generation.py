"""`batchscale profile generation`: rollout throughput against concurrency, and the critical generation batch.

For each concurrency B (1, 2, 4, ... N by default) the rollout engine generates a fixed workload of responses with
`max_concurrency = B`: prompts from the built-in task, grouped G per prompt as a GRPO rollout boundary draws them,
and responses as long as the model makes them (ending at <eos> or max_new_tokens), never a fixed length. The workload
holds `waves * B` responses (at least `min_responses`), so every level runs several refills of its slots.
Each level gets one untimed warm-up call, then `repeats` timed calls on the same prompts and seed (so the same
tokens); the reported time is their median. Timers synchronize the device before reading the clock.

Per level: tokens/s and responses/s (generated tokens / median time), mean active concurrency (engine statistics),
response lengths, memory (peak RSS of the process; on CUDA the peak allocated bytes during the level) and the engine's
KV-cache size. With a hardware preset (`--hardware`; on a CUDA device the detected GPU's by default) each level also
reports the weight bytes decode reads per second, decode steps x `decode_weight_bytes` / time, and its fraction of the
preset's HBM bandwidth; `roofline.bandwidth_fraction_at_1` is that fraction at concurrency 1, where decode is
bandwidth-bound and the fraction says how close the engine gets to the roofline. Departure: KV-cache and activation
traffic are not counted (small at concurrency 1), and the time includes prefill, so the fraction is a lower bound. The knee: `systems.knee.fit_saturating_throughput` on (B, tokens/s), q(B) = q_max * B / (B + B_half),
with B_90 = 9 * B_half and the doubling rule (the smallest measured B whose doubling gains < threshold). B is the
requested concurrency (the knob a user sets); `active_mean` shows how much of it the scheduling realized.
"""

from __future__ import annotations

import math
import resource
import statistics
import time

from batchscale.console import in_long_phase
from batchscale.errors import UserError
from batchscale.profile.options import load_profiled_policy
from batchscale.rundir import GenerationProfile


def build_workload(task, responses: int, samples_per_prompt: int, seed: int) -> list[str]:
    """`responses` prompts, prompt-major groups of G as the trainer draws them (the last group may be cut short)."""
    import numpy as np

    examples = task.sample_train(np.random.default_rng(seed), math.ceil(responses / samples_per_prompt))
    return [e.prompt for e in examples for _ in range(samples_per_prompt)][:responses]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def measure_level(engine, prompts: list[str], params, repeats: int, seed: int, device) -> dict:
    import torch

    from batchscale.telemetry.timers import synchronize

    cuda = torch.device(device).type == "cuda"
    torch.manual_seed(seed)
    engine.generate(prompts[: engine_cap(engine)], params)  # warm-up: allocates the cache at this size
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    times, rollouts = [], None
    for _ in range(repeats):
        torch.manual_seed(seed)  # same seed, same prompts: every repeat generates the same tokens
        synchronize(device)
        start = time.perf_counter()
        rollouts = engine.generate(prompts, params)
        synchronize(device)
        times.append(time.perf_counter() - start)
    time_s = statistics.median(times)
    lengths = [len(r) for r in rollouts.response_ids]
    row = {
        "responses": len(prompts),
        "tokens": sum(lengths),
        "time_s": time_s,
        "time_s_repeats": times,
        "tokens_per_s": sum(lengths) / time_s,
        "responses_per_s": len(prompts) / time_s,
        "active_mean": rollouts.stats.get("active_mean"),
        "decode_steps": rollouts.stats.get("decode_steps"),
        "response_length_mean": statistics.fmean(lengths),
        "response_length_max": max(lengths),
        "peak_rss_mb": _peak_rss_mb(),
    }
    decoder = getattr(engine, "decoder", None)
    if decoder is not None and decoder.keys:
        row["kv_cache_mb"] = sum(t.numel() * t.element_size() for t in (*decoder.keys, *decoder.values)) / 2**20
    if cuda:
        row["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return row


def decode_weight_bytes(model, dtype) -> float:
    """Bytes of weights one decode step reads in `dtype`: every matrix and norm and the LM head; the input embedding
    is a lookup of a few rows (counted once, as the LM head, when the two are tied)."""
    embed = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight.data_ptr() == embed.data_ptr()
    params = sum(p.numel() for p in model.parameters())
    return float((params - (0 if tied else embed.numel())) * dtype.itemsize)


def add_bandwidth(rows: list[dict], weight_bytes: float, hardware) -> dict:
    """Each row's realized weight bandwidth and its fraction of the preset's; returns the `roofline` block."""
    for row in rows:
        row["weight_bytes_per_s"] = (row["decode_steps"] or 0) * weight_bytes / row["time_s"]
        row["bandwidth_fraction"] = row["weight_bytes_per_s"] / hardware.bandwidth_bytes_per_s
    at_1 = next((row["bandwidth_fraction"] for row in rows if row["concurrency"] == 1), None)
    return {"hardware": hardware.name, "bandwidth_bytes_per_s": hardware.bandwidth_bytes_per_s,
            "weight_bytes": weight_bytes, "bandwidth_fraction_at_1": at_1}


def engine_cap(engine) -> int:
    return getattr(engine, "max_concurrency", None) or getattr(engine, "max_batch")


@in_long_phase("profiling generation (throughput vs concurrency)")
def profile_generation(model: str = "tiny", dtype: str = "float32", concurrencies: list[int] = (1, 2, 4, 8),
                       backend: str = "engine", samples_per_prompt: int = 8, max_new_tokens: int = 8,
                       temperature: float = 1.0, top_p: float = 1.0, repeats: int = 3, waves: int = 4,
                       min_responses: int = 16, seed: int = 0, device: str = "auto", threshold: float = 0.10,
                       log=print, hardware: str | None = None) -> GenerationProfile:
    """Measure every concurrency level and fit the knee (`rundir.GenerationProfile`)."""
    import torch
    from pydantic import ValidationError

    from batchscale.config import ModelConfig, RolloutConfig, SamplingConfig
    from batchscale.rollout import build_engine
    from batchscale.rollout.base import SamplingParams
    from batchscale.systems.knee import fit_saturating_throughput
    from batchscale.profile.options import device_hardware, named_hardware

    for name, value in (("repeats", repeats), ("waves", waves), ("min_responses", min_responses),
                        ("samples_per_prompt", samples_per_prompt)):
        if value < 1:
            raise UserError(name, f"must be >= 1, got {value}", f"pass --{name.replace('_', '-')} 1 or more")
    try:  # validate through the run config's own rules (backend names, dtype, sampling ranges)
        model_cfg = ModelConfig(name=model, dtype=dtype)
        RolloutConfig(backend=backend)
        SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    except ValidationError as e:
        error = e.errors()[0]
        option = "--" + "-".join(str(part) for part in error["loc"]).replace("_", "-")
        raise UserError(option, error["msg"], "see `batchscale profile generation --help`") from None
    preset = named_hardware(hardware)
    policy, task, device = load_profiled_policy(model_cfg, device, log)
    preset = device_hardware(preset, device, log)
    params = SamplingParams(temperature, top_p, max_new_tokens)
    rows = []
    for level in concurrencies:
        engine = build_engine(backend, policy, max_concurrency=level)
        prompts = build_workload(task, max(waves * level, min_responses), samples_per_prompt, seed)
        row = {"concurrency": level, **measure_level(engine, prompts, params, repeats, seed, device)}
        log(f"concurrency {level:>4}: {row['tokens_per_s']:9.1f} tok/s  {row['responses_per_s']:8.1f} resp/s  "
            f"active {row['active_mean']:.1f}  ({row['responses']} responses, median of {repeats})")
        rows.append(row)
    knee = None
    if len(rows) >= 2:
        fit = fit_saturating_throughput([r["concurrency"] for r in rows], [r["tokens_per_s"] for r in rows], threshold)
        knee = {"metric": "tokens_per_s", **fit.to_dict()}
    decoder = getattr(engine, "decoder", None)  # the engine may compute in another dtype than the model's
    decode_dtype = decoder.dtype if decoder is not None else policy.model.dtype
    compute_dtype = str(decode_dtype).removeprefix("torch.")
    roofline = None
    if preset is not None:
        roofline = add_bandwidth(rows, decode_weight_bytes(policy.model, decode_dtype), preset)
        if roofline["bandwidth_fraction_at_1"] is not None:
            log(f"concurrency 1 reads weights at {rows[0]['weight_bytes_per_s'] / 1e9:.1f} GB/s = "
                f"{roofline['bandwidth_fraction_at_1']:.1%} of {preset.name}'s {preset.bandwidth_bytes_per_s / 1e12:.2f} TB/s")
    return GenerationProfile(
        model=model, dtype=dtype, compute_dtype=compute_dtype, backend=backend, device=str(device),
        threads=torch.get_num_threads(), params=policy.num_params, task=task.name,
        samples_per_prompt=samples_per_prompt,
        sampling={"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens},
        repeats=repeats, rows=rows, knee=knee, roofline=roofline,
    )
