"""Build a rollout engine by name: "engine" (batchscale's continuous batching, engine.py) or "hf" (Hugging Face
`generate` on static batches, hf.py, the reference)."""

from __future__ import annotations

from batchscale.errors import UserError

ENGINES = ("engine", "hf")


def build_engine(backend, policy, max_concurrency: int | None = None, compute_dtype: str | None = None):
    """`backend` is an engine name or a `RolloutConfig` (whose `max_concurrency` and `compute_dtype` then apply)."""
    name = backend if isinstance(backend, str) else backend.backend
    if not isinstance(backend, str):
        max_concurrency = backend.max_concurrency if max_concurrency is None else max_concurrency
        compute_dtype = backend.compute_dtype if compute_dtype is None else compute_dtype
    if name == "engine":
        from batchscale.rollout.engine import DEFAULT_MAX_CONCURRENCY, ContinuousBatchingEngine

        return ContinuousBatchingEngine(policy.model, policy.tokenizer, max_concurrency or DEFAULT_MAX_CONCURRENCY,
                                        compute_dtype or "auto")
    if name == "hf":
        from batchscale.rollout.hf import HFGenerateEngine

        return HFGenerateEngine(policy.model, policy.tokenizer, **({"max_batch": max_concurrency} if max_concurrency else {}))
    raise UserError("rollout.backend", f"unknown rollout backend {name!r}", f"choose one of: {', '.join(ENGINES)}")
