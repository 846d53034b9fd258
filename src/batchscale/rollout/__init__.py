"""Rollout engines behind one interface (base.RolloutEngine: prompts in, base.Rollouts out), selected by name in
build.py.

- "engine", the default: batchscale's continuous-batching engine (engine.py: the scheduler) over a preallocated KV
  cache (decoder.py: the decode arithmetic, on weights packed by weights.py), sampling with one uniform per sample
  and position (sampling.py), and native kernels compiled from kernels/*.c and chosen by the CPU's flags (native.py);
- "hf": Hugging Face `generate` on static batches (hf.py), the reference backend.

streaming.py keeps the engine's scheduler running across calls for the asynchronous generator (train.async_generator):
sequences join as groups are admitted and leave when their group is sent.
"""

from batchscale.rollout.build import ENGINES, build_engine

__all__ = ["ENGINES", "build_engine"]
