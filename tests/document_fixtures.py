"""Valid documents (rundir.documents) for tests that need an analysis.json or a profile without running anything.

Built through the schema classes, so a fixture can never drift from what the producers write."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchscale.rundir import AnalysisDocument, GenerationProfile, TrainingProfile, write_document
from batchscale.systems.knee import fit_saturating_throughput, fit_training_cost


def generation_profile(levels, tokens_per_s, knee: dict | None = None) -> GenerationProfile:
    """A generation profile with these (concurrency, tokens/s) rows; the knee fitted as `profile generation` does,
    unless given."""
    rows = [{"concurrency": int(b), "responses": 4 * int(b), "tokens": 32 * int(b), "time_s": 32 * b / q,
             "time_s_repeats": [32 * b / q], "tokens_per_s": float(q), "responses_per_s": float(q) / 8,
             "active_mean": float(b), "decode_steps": 8, "response_length_mean": 8.0, "response_length_max": 8,
             "peak_rss_mb": 100.0} for b, q in zip(levels, tokens_per_s)]
    if knee is None and len(levels) >= 2:
        knee = {"metric": "tokens_per_s", **fit_saturating_throughput(levels, tokens_per_s).to_dict()}
    return GenerationProfile(model="tiny", dtype="float32", compute_dtype="float32", backend="engine", device="cpu",
                             threads=2, params=3_000_000, task="arithmetic", samples_per_prompt=8,
                             sampling={"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8}, repeats=3, rows=rows,
                             knee=knee)


SERVER = {"url": "http://127.0.0.1:8000/v1", "endpoint": "completions", "model": "served-model",
          "models_listed": ["served-model"], "version": "0.32.0", "version_from": "/version", "server_header": "uvicorn",
          "ignore_eos": "honoured", "stream_usage": True, "tokens_from": "usage",
          "timeouts_s": {"connect": 10.0, "read": 60.0, "level": 600.0}}


def server_profile(levels, tokens_per_s, knee: dict | None = None) -> GenerationProfile:
    """The same rows as a server's profile (`profile generation --backend openai`): backend openai, a server block."""
    engine = generation_profile(levels, tokens_per_s, knee).to_json()
    return GenerationProfile.model_validate({**engine, "backend": "openai", "device": "server", "threads": None,
                                             "params": None, "model": "served-model", "server": SERVER})


def write_generation_profile(path: Path) -> Path:
    """tokens/s = 1000 B / (B + 32) over B = 1..256, with the knee fitted as `profile generation` does."""
    levels = [2**i for i in range(9)]
    return write_document(path, generation_profile(levels, [1000.0 * b / (b + 32) for b in levels]))


def write_training_profile(path: Path) -> Path:
    """seconds = 0.05 + 2e-4 * tokens over B = 8..128 sequences of 40 tokens, fitted as `profile training` does."""
    batches = np.array([8, 16, 32, 64, 128])
    tokens = batches * 40
    seconds = 0.05 + 2e-4 * tokens
    law = fit_training_cost(tokens, seconds)
    peak = 1e11
    rows = [{"samples_per_update": int(b), "tokens": int(t), "response_tokens": int(t) // 4,
             "flops": 6 * 3e6 * float(t), "padded_tokens": int(t), "seconds": float(s),
             "seconds_repeats": [float(s)], "tokens_per_s": float(t / s), "samples_per_s": float(b / s),
             "flops_per_s": 6 * 3e6 * float(t / s), "utilization": 6 * 3e6 * float(t / s) / peak}
            for b, t, s in zip(batches, tokens, seconds)]
    profile = TrainingProfile(
        model="tiny", params=3_000_000, dtype="float32", compute_dtype="float32", device="cpu", threads=2, micro_batch_size=8, repeats=3,
        task="arithmetic", peak_flops_per_s=peak, peaks={"float32": {"best": peak, "median": peak, "samples": [peak]}},
        peak_matmul_shape=[256, 256, 688], rows=rows,
        fit={"seconds_fixed": law.seconds_fixed, "seconds_per_token": law.seconds_per_token, "r2": law.r2,
             "tokens_per_s": law.tokens_per_s, "flops_per_s_asymptotic": 6 * 3e6 * law.tokens_per_s,
             "utilization_asymptotic": 6 * 3e6 * law.tokens_per_s / peak})
    return write_document(path, profile)


def label_analysis(prompts: int, samples_per_prompt: int, n_star: dict, seeds: list[int], **overrides) -> dict:
    """One analysis.json `configs` entry for a single-pass label of P prompts x G responses."""
    samples_per_step = prompts * samples_per_prompt
    return {"prompts_per_step": prompts, "samples_per_prompt": samples_per_prompt, "samples_per_step": samples_per_step,
            "samples_per_update": samples_per_step, "updates_per_step": 1, "lr": 1e-5, "lr_rule": "sqrt",
            "seeds": seeds, "samples_to_target": n_star, "r_n": None, "updates_to_target": None,
            "update_ratio": None, "grad_norm_actor": None, "aligned": True, **overrides}


def write_analysis(path: Path, reference: str, target: float, configs: dict, b_simple: float | None = None) -> Path:
    return write_document(path, AnalysisDocument(reference=reference, target=target, target_rule="given by the user",
                                                 configs=configs, grad_norm_slope=-0.5, b_simple=b_simple))
