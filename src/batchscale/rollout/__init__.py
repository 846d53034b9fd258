"""Rollout engines behind one interface (base.Rollouts), selected by name in build.py.

- "engine": batchscale's continuous-batching engine with a preallocated KV cache (engine.py, decoder.py, weights.py,
  native.py and kernels/), the default;
- "hf": Hugging Face `generate` on static batches (hf.py), the reference backend.
"""

from batchscale.rollout.build import ENGINES, build_engine

__all__ = ["ENGINES", "build_engine"]
