"""`batchscale profile training`: seconds per policy update against batch size, the linear cost law, and utilization.

For each batch B (sequences per optimizer update) we build one rollout batch from the built-in task: B prompts drawn
with a fixed seed, each followed by its reference answer and <eos> as the response (the length a correct response has,
without running the generator; plain prompts, as the trainer sends them with `model.chat_template = false`). The timed
region is what the trainer's `train` phase does for a single-pass GRPO step: `Actor.update`, the path runs take
(`train.update`: two gradient chunks of micro-batches, each a forward, the clipped surrogate and a backward, with the
chunk norms of the gradient noise scale; then gradient clipping and an AdamW step). The advantages are seeded per-sequence normal draws spread over the response tokens; their values do not change the cost.
Each B gets one untimed warm-up update (it also allocates the optimizer state), then `repeats` timed updates with timers
that synchronize the device; the median is reported. The built-in task's samples are ~11 tokens long, far shorter than
RL responses (hundreds to thousands of tokens): on a GPU such an update is a few small matmuls per layer, its time is
kernel launches and the optimizer step, and its utilization says nothing about the lengths a run trains on.
`--prompt-tokens` / `--response-tokens` replace the prompts / responses by random tokens of exactly those lengths
(the response's last one <eos>), so the update has the shape of a realistic rollout batch.

Per B: seconds, tokens/s and samples/s, where tokens = prompt + response tokens of the batch (padding excluded;
`padded_tokens` counts what the micro-batches actually compute). The cost law time_s = a + b * tokens is fitted with
`systems.knee.fit_training_cost`.

Utilization follows the 6 * N * D rule (Kaplan et al. 2020; forward 2 N, backward 4 N FLOPs per token with N the
matmul parameter count, attention's context term ignored, which is small at these lengths), counted where the update
runs each matrix: the body's on every token, the LM head's only on response tokens (`policy.forward.token_logprobs`; the
input embedding is a lookup): achieved FLOP/s = 6 * (N_body * tokens + N_head * response_tokens) / seconds, over the
matmul peak measured here with torch for the arithmetic dtype in use (both float32 and bfloat16 are measured;
`measure_matmul_rates`): a GEMM of the model's MLP up-projection shape, not a vendor number, so utilization says how
close the update gets to what this machine's matmul reaches at that size. The arithmetic dtype is `--compute-dtype`
(like `optim.compute_dtype`: "auto" is bf16 autocast over float32 weights where bf16 is native, else float32; a model
loaded with `--dtype bfloat16` computes in bf16). Departure from "median
of repeats": the peak is the best of its samples (`summarize_peak`), because on shared cores other processes halve
individual samples; the median is reported beside it. Update times stay medians. Utilization can exceed 1 slightly when
the model's matmuls run faster than the benchmark shape, or when the peak samples were all disturbed.

With a hardware preset (`--hardware`; on a CUDA device the detected GPU's by default) each row also reports
`utilization_of_preset`, its FLOP/s over the preset's dense bf16 datasheet peak (the number a GPU run is judged by),
and `roofline` the best row's; on CUDA each row reports the peak allocated memory of its timed updates.
"""

from __future__ import annotations

import statistics
import time

from batchscale.console import in_long_phase
from batchscale.errors import UserError
from batchscale.profile.options import load_profiled_policy, validate_micro_batch
from batchscale.rundir import TrainingProfile

PEAK_DTYPES = ("float32", "bfloat16")


def build_batch(policy, task, batch: int, seed: int, device, prompt_tokens: int | None = None,
                response_tokens: int | None = None):
    """B task prompts with answer + <eos> as responses, collated as the trainer collates rollouts; with
    `prompt_tokens` / `response_tokens`, random ordinary tokens of exactly that length instead (responses end in <eos>)."""
    import numpy as np

    from batchscale.policy.sequences import collate

    tok = policy.tokenizer
    examples = task.sample_train(np.random.default_rng(seed), batch)
    ordinary = np.setdiff1d(np.arange(len(tok)), tok.all_special_ids)  # never pad, <eos> or <bos> mid-sequence
    rng = np.random.default_rng([seed, 1])  # its own stream: the task's draws stay those of the default batch

    def random_ids(length: int) -> list[list[int]]:
        return rng.choice(ordinary, size=(batch, length)).tolist()

    if prompt_tokens is None:
        prompt_ids = [list(ids) for ids in tok(policy.format_prompts([e.prompt for e in examples]))["input_ids"]]
    else:
        prompt_ids = random_ids(prompt_tokens)
    if response_tokens is None:
        response_ids = [tok(e.answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for e in examples]
    else:
        response_ids = [ids + [tok.eos_token_id] for ids in random_ids(response_tokens - 1)]
    return collate(prompt_ids, response_ids, tok.pad_token_id, device)


def validate_lengths(prompt_tokens: int | None, response_tokens: int | None, max_positions: int | None = None) -> None:
    """Synthetic lengths are >= 1 and, once the model is known, fit its positions."""
    for option, value in (("--prompt-tokens", prompt_tokens), ("--response-tokens", response_tokens)):
        if value is not None and value < 1:
            raise UserError(option, f"must be >= 1, got {value}", f"pass {option} 1 or more, or omit it")
    total = (prompt_tokens or 0) + (response_tokens or 0)
    if max_positions and total > max_positions:
        raise UserError("--response-tokens", f"prompt + response = {total} tokens exceed the model's "
                        f"{max_positions} positions (max_position_embeddings)", "pass shorter lengths")


def measure_matmul_rates(dtype: str, m: int, k: int, n: int, device="cpu", repeats: int = 7,
                         min_time_s: float = 0.02) -> list[float]:
    """FLOP/s samples of torch.matmul of (m, k) @ (k, n) in `dtype` (2 m k n FLOPs each): after a warm-up, each of
    `repeats` samples runs enough matmuls to last ~min_time_s, with the device synchronized around it."""
    import torch

    from batchscale.policy.load import DTYPES
    from batchscale.telemetry.timers import synchronize

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(device=device, dtype=DTYPES[dtype])
    b = torch.randn(k, n, generator=gen).to(device=device, dtype=DTYPES[dtype])

    def timed(iters: int) -> float:
        synchronize(device)
        start = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b)
        synchronize(device)
        return time.perf_counter() - start

    once_s = min(timed(1), timed(1))  # the first call loads kernels; the faster one sizes the inner loop
    iters = max(1, min(1000, round(min_time_s / max(once_s, 1e-7))))
    return [2 * m * k * n * iters / timed(iters) for _ in range(repeats)]


def summarize_peak(rates: list[float]) -> dict:
    """The peak is the best sample: interference from other processes only ever slows a sample down, so on shared
    cores the median of a short benchmark measures the neighbours, not the machine. The median is kept beside it."""
    return {"best": max(rates), "median": statistics.median(rates), "samples": rates}


def matmul_shape(model, tokens: int) -> tuple[int, int, int]:
    """The benchmark GEMM: (tokens, hidden) @ (hidden, intermediate), the MLP up-projection over the tokens of one
    micro-batch of the largest batch (clamped to [256, 2048] rows: big enough to run at full rate, small enough that a
    slow CPU bf16 GEMM still measures in seconds)."""
    cfg = model.config
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", 1024)
    inner = getattr(cfg, "intermediate_size", None) or 4 * hidden
    return min(max(tokens, 256), 2048), hidden, inner


def update_flops(model, tokens: int, response_tokens: int) -> float:
    """FLOPs of one update by the 6 N D rule, each matrix counted on the tokens it runs on: the body's matmul parameters
    on every token, the LM head's on response tokens only (on every token for models whose logits take the full forward,
    see `policy.forward.lm_head_applies_alone`). The input embedding is a lookup: no FLOPs. Rows that share a prompt
    compute it once (`shared_prompts`); this count does not credit that (the profile's prompts are drawn at random from
    the task, so few repeat)."""
    from batchscale.policy.forward import lm_head_applies_alone

    head, embedding = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    tied = head.data_ptr() == embedding.data_ptr()
    params = sum(p.numel() for p in model.parameters())
    body = params - head.numel() - (0 if tied else embedding.numel())
    head_tokens = response_tokens if lm_head_applies_alone(model) else tokens
    return 6.0 * (body * tokens + head.numel() * head_tokens)


def profiled_actor(policy, batch: int, micro_batch_size: int, compute_dtype, samples_per_prompt: int = 1):
    """The actor that a run of single-pass GRPO updates of `batch` responses (`samples_per_prompt` per prompt, in
    micro-batches of `micro_batch_size`) trains with: `train.actor.build_actor`, AdamW at the default settings,
    clipping at 1.0."""
    from batchscale.config import Config, derive_plan
    from batchscale.train.actor import build_actor

    cfg = Config.model_validate({"batch": {"prompts_per_step": batch // samples_per_prompt,
                                           "samples_per_prompt": samples_per_prompt,
                                           "micro_batch_size": micro_batch_size},
                                 "run": {"budget_samples": batch}})
    return build_actor(policy.model, cfg, derive_plan(cfg), compute_dtype)


def time_update(actor, batch, advantages, repeats: int, device) -> list[float]:
    """Seconds of each of `repeats` full updates, `Actor.update` as a run's `time/train` times it (after one untimed
    warm-up update); on CUDA the peak allocated memory counts from the warm-up on."""
    import torch

    from batchscale.telemetry.timers import synchronize

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    actor.update(batch, advantages)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        actor.update(batch, advantages)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def padded_tokens(batch, micro_batch_size: int) -> int:
    """Token positions the update's micro-batches compute (`train.micro_batches.iter_gradient_chunks`, as
    `train.update.update_network` runs them): each is trimmed to its own longest sequence."""
    from batchscale.train.micro_batches import iter_gradient_chunks

    return sum(len(rows) * batch.select(rows)[0].input_ids.shape[1]
               for chunk in iter_gradient_chunks(batch, micro_batch_size) for rows in chunk)


@in_long_phase("profiling training (time per update vs batch)")
def profile_training(model: str = "tiny", dtype: str = "float32", batches: list[int] = (8, 16, 32),
                     micro_batch_size: int | None = None, repeats: int = 3, seed: int = 0, device: str = "auto",
                     log=print, compute_dtype: str = "auto", hardware: str | None = None,
                     prompt_tokens: int | None = None, response_tokens: int | None = None) -> TrainingProfile:
    """Time one update per batch size, fit the cost law, and compare to the measured matmul peak."""
    import torch
    from pydantic import ValidationError

    from batchscale.config import ModelConfig
    from batchscale.cpu import native_bf16_cpu
    from batchscale.device import resolve_device
    from batchscale.systems.knee import fit_training_cost
    from batchscale.profile.options import device_hardware, named_hardware
    from batchscale.train.precision import COMPUTE_DTYPES, resolve_training_dtype

    validate_micro_batch(batches, micro_batch_size)
    validate_lengths(prompt_tokens, response_tokens)
    if repeats < 1:
        raise UserError("repeats", f"must be >= 1, got {repeats}", "pass --repeats 1 or more")
    resolve_device(device, "--device")  # before the model loads
    if compute_dtype not in ("auto", *COMPUTE_DTYPES):
        raise UserError("--compute-dtype", f"unknown value {compute_dtype!r}", "use auto, float32 or bfloat16")
    if compute_dtype == "float32" and dtype == "bfloat16":
        raise UserError("--compute-dtype", "float32 arithmetic needs float32 weights, but --dtype is bfloat16",
                        "pass --dtype float32, or --compute-dtype auto")
    try:
        model_cfg = ModelConfig(name=model, dtype=dtype)
    except ValidationError as e:
        error = e.errors()[0]
        fix = "see `batchscale profile training --help`"
        raise UserError("--" + str(error["loc"][-1]), error["msg"], fix) from None
    preset = named_hardware(hardware)
    policy, task, device = load_profiled_policy(model_cfg, device, log)
    preset = device_hardware(preset, device, log)
    cuda = torch.device(device).type == "cuda"
    params = policy.num_params
    arithmetic = resolve_training_dtype(compute_dtype, policy.model.dtype, torch.device(device).type)
    arithmetic_name = str(arithmetic).removeprefix("torch.")

    validate_lengths(prompt_tokens, response_tokens, getattr(policy.model.config, "max_position_embeddings", None))
    sequence_batches = {b: build_batch(policy, task, b, seed, device, prompt_tokens, response_tokens) for b in batches}
    synthetic = ({"prompt_tokens": prompt_tokens, "response_tokens": response_tokens}
                 if prompt_tokens or response_tokens else None)
    largest = sequence_batches[batches[-1]]
    micro_tokens = int(largest.attention_mask.sum()) * (micro_batch_size or len(largest)) // len(largest)
    shape = matmul_shape(policy.model, micro_tokens)
    peaks = {name: summarize_peak(measure_matmul_rates(name, *shape, device=device)) for name in PEAK_DTYPES}
    peak = peaks[arithmetic_name]["best"]
    log(f"matmul peak {shape[0]}x{shape[1]}x{shape[2]} (best / median GFLOP/s): " + ", ".join(
        f"{name} {p['best'] / 1e9:.1f} / {p['median'] / 1e9:.1f}" for name, p in peaks.items()))
    if arithmetic == torch.bfloat16 and torch.device(device).type == "cpu" and not native_bf16_cpu():
        log("warning: this CPU has no native bf16 (no AVX512-BF16 or AMX), so torch emulates bf16 matmuls: the bf16 "
            "peak above is an emulation rate and utilization against it can exceed 100%; profile --dtype float32 "
            "--compute-dtype float32 for the cost a CPU run should use")
    rows = []
    for b in batches:
        batch = sequence_batches[b]
        micro = micro_batch_size or b
        gen = torch.Generator().manual_seed(seed)
        advantages = torch.randn(b, 1, generator=gen).to(device) * batch.response_mask  # (B, L-1)
        actor = profiled_actor(policy, b, micro, arithmetic)
        times = time_update(actor, batch, advantages, repeats, device)
        del actor  # its optimizer state: the next batch's actor allocates its own
        seconds = statistics.median(times)
        tokens, response_tokens = int(batch.attention_mask.sum()), int(batch.response_mask.sum())
        flops = update_flops(policy.model, tokens, response_tokens)
        flops_per_s = flops / seconds
        row = {"samples_per_update": b, "tokens": tokens, "response_tokens": response_tokens, "flops": flops,
               "padded_tokens": padded_tokens(batch, micro), "seconds": seconds, "seconds_repeats": times,
               "tokens_per_s": tokens / seconds, "samples_per_s": b / seconds, "flops_per_s": flops_per_s,
               "utilization": flops_per_s / peak}
        if cuda:
            row["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
        if preset is not None:
            row["utilization_of_preset"] = flops_per_s / preset.peak_flops_per_s
        log(f"batch {b:>5}: {seconds:8.4f} s  {row['tokens_per_s']:9.0f} tok/s  {row['samples_per_s']:8.1f} "
            f"samples/s  utilization {row['utilization']:.1%}  ({tokens} tokens, median of {repeats})")
        rows.append(row)
    fit = None
    if len({r["tokens"] for r in rows}) >= 2:
        law = fit_training_cost([r["tokens"] for r in rows], [r["seconds"] for r in rows])
        # a slope <= 0 (noise swamped it) has no asymptote: None keeps the JSON strict (no Infinity)
        flops_per_token = rows[-1]["flops"] / rows[-1]["tokens"]  # the largest batch's mix of prompt and response
        asymptotic = flops_per_token * law.tokens_per_s if law.seconds_per_token > 0 else None
        fit = {"seconds_fixed": law.seconds_fixed, "seconds_per_token": law.seconds_per_token, "r2": law.r2,
               "tokens_per_s": law.tokens_per_s if asymptotic is not None else None,
               "flops_per_s_asymptotic": asymptotic,
               "utilization_asymptotic": None if asymptotic is None else asymptotic / peak}
    roofline = None
    if preset is not None:
        roofline = {"hardware": preset.name, "peak_flops_per_s": preset.peak_flops_per_s,
                    "utilization_best": max(row["utilization_of_preset"] for row in rows)}
        log(f"best update: {roofline['utilization_best']:.1%} of {preset.name}'s "
            f"{preset.peak_flops_per_s / 1e12:.0f} TFLOP/s dense bf16")
    return TrainingProfile(
        model=model, params=params, dtype=dtype, compute_dtype=arithmetic_name, device=str(device),
        threads=torch.get_num_threads(), micro_batch_size=micro_batch_size, repeats=repeats, task=task.name,
        peak_flops_per_s=peak, peaks=peaks, peak_matmul_shape=list(shape),
        rows=rows, fit=fit, roofline=roofline,
        synthetic_lengths=synthetic,
    )
