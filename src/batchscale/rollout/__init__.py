"""Rollout engines behind one interface, selected by name."""

from __future__ import annotations

from batchscale.errors import UserError

ENGINES = ("hf",)


def build_engine(name: str, policy):
    if name == "hf":
        from batchscale.rollout.hf import HFGenerateEngine

        return HFGenerateEngine(policy.model, policy.tokenizer)
    raise UserError("rollout.backend", f"unknown rollout backend {name!r}", f"choose one of: {', '.join(ENGINES)}")
