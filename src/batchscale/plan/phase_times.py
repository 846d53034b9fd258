"""Seconds per step at another batch, from one run's measured phase times and a model of how each phase scales.

Each phase of the reference run (median `time/generate`, `time/train` over its steps after the first, as
`load_sweep_inputs` measures throughput) is carried to batch B (samples per step) by a model's ratio t(B) / t(B_ref), so
the prediction keeps the run's own split between generation and training and its machine's absolute speed:

- generation, from a generation profile (`profile generation --json`): a step of B responses decoding c = B at once
  (or `max_concurrency`, when the run capped it, in waves) takes B / rate(c), rate the profile's knee fit
  q_max c / (c + B_half) when it has one, else its measured responses/s interpolated log-log between concurrencies (flat
  past the largest, proportional to c below the smallest: decode is bandwidth-bound there);
- generation, from the roofline (`--model --hardware --context`): rate(c) = c / the decode step's latency bound at
  active batch c and KV length `context`;
- training, from a training profile (`profile training --json`): its fit seconds_fixed + seconds_per_token * tokens,
  with the profile's own tokens per sample; without a fit, seconds per sample interpolated log-log over its rows;
- training, from the roofline: the forward + backward latency bound of B sequences of `context` tokens;
- without a model for a phase: t proportional to B (constant samples/s: no gain from a larger batch is assumed).
Everything else in `time/step` (scoring, advantages, the critic) is carried proportionally to B.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from batchscale.errors import UserError
from batchscale.rundir import GenerationProfile, TrainingProfile


@dataclass(frozen=True)
class PhaseModel:
    """Seconds (in any fixed unit) of one phase for a step of B samples, and what it was taken from."""

    seconds: Callable[[int], float]
    method: str


def proportional(phase: str) -> PhaseModel:
    return PhaseModel(lambda batch: float(batch), f"{phase}: proportional to B (no model given)")


def generation_from_profile(profile: GenerationProfile, max_concurrency: int | None) -> PhaseModel:
    if profile.knee is not None and profile.knee.q_max > 0 and profile.knee.b_half > 0:
        q_max, b_half = profile.knee.q_max, profile.knee.b_half
        rate, how = (lambda c: q_max * c / (c + b_half)), f"knee fit (B_half {b_half:.3g})"
    else:
        levels = sorted((row.concurrency, row.responses_per_s) for row in profile.rows if row.responses_per_s > 0)
        if not levels:
            raise UserError("--generation-profile", "has no knee fit and no row with responses_per_s > 0",
                            "rerun `batchscale profile generation --json`")
        rate, how = _interpolate_rate([c for c, _ in levels], [q for _, q in levels]), "rows interpolated"
    return PhaseModel(_in_waves(rate, max_concurrency), f"generation: profile {how}")


def generation_from_roofline(shape, hardware, context: int, max_concurrency: int | None) -> PhaseModel:
    from batchscale.systems.roofline import estimate_decode

    rate = lambda c: c / estimate_decode(shape, hardware, c, context)["model_s"]  # noqa: E731
    return PhaseModel(_in_waves(rate, max_concurrency),
                      f"generation: roofline decode bound ({shape.name} on {hardware.name}, context {context})")


def training_from_profile(profile: TrainingProfile) -> PhaseModel:
    tokens_per_sample = float(np.mean([row.tokens / row.samples_per_update for row in profile.rows]))
    if profile.fit is not None and profile.fit.seconds_per_token > 0:
        fixed, per_token = max(profile.fit.seconds_fixed, 0.0), profile.fit.seconds_per_token
        return PhaseModel(lambda batch: fixed + per_token * tokens_per_sample * batch,
                          f"training: profile fit ({fixed:.3g} s + {per_token:.3g} s/token)")
    levels = sorted((row.samples_per_update, row.seconds / row.samples_per_update) for row in profile.rows
                    if row.seconds > 0)
    if not levels:
        raise UserError("--training-profile", "has no cost fit and no row with seconds > 0",
                        "rerun `batchscale profile training --json`")
    per_sample = _interpolate_log_log([b for b, _ in levels], [s for _, s in levels])
    return PhaseModel(lambda batch: batch * per_sample(batch), "training: profile rows interpolated")


def training_from_roofline(shape, hardware, context: int) -> PhaseModel:
    from batchscale.systems.roofline import estimate_train

    return PhaseModel(lambda batch: estimate_train(shape, hardware, batch, context)["model_s"],
                      f"training: roofline bound ({shape.name} on {hardware.name}, context {context})")


def scale_phase(model: PhaseModel, measured_s: float, batch: int, reference_batch: int) -> float:
    """The reference's measured seconds carried to `batch` by the model's ratio."""
    return measured_s * model.seconds(batch) / model.seconds(reference_batch)


def _in_waves(rate: Callable[[float], float], max_concurrency: int | None) -> Callable[[int], float]:
    """Seconds for B responses at `rate(c)` responses per unit time, c = min(B, max_concurrency)."""
    return lambda batch: batch / rate(min(batch, max_concurrency) if max_concurrency else batch)


def _interpolate_rate(concurrency: list[int], rate: list[float]) -> Callable[[float], float]:
    inside = _interpolate_log_log(concurrency, rate)

    def at(c: float) -> float:
        if c < concurrency[0]:
            return rate[0] * c / concurrency[0]
        return inside(min(c, concurrency[-1]))
    return at


def _interpolate_log_log(x: list[float], y: list[float]) -> Callable[[float], float]:
    """Piecewise power law through the points, constant past either end."""
    log_x, log_y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    return lambda value: float(np.exp(np.interp(np.log(value), log_x, log_y)))
