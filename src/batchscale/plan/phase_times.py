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

`plan` on a sweep with a server's generation profile (backend openai: the generator the user deploys, not the one the
runs generated with) replaces the generation side of each label's measured q (`carry_server_generation`): its
time/generate becomes the reference's, carried to the label by the server's knee as above and by the tokens each
sample took in the label's own runs (median tokens/generated per step over B):

    t_gen(L) = t_gen(ref) * [s(B_L) * tokens_per_sample(L)] / [s(B_ref) * tokens_per_sample(ref)]

with s(B) = B / rate(min(B, max_concurrency)); the rest of each label's step stays as measured, and its q (and every
seed's, so their spread) is scaled by step_s / (step_s - t_gen measured + t_gen carried). Departure: the absolute
speed stays this machine's at the reference (the server's own speed on other hardware would mix two machines'
clocks); what the server contributes is the shape of its knee.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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
    return PhaseModel(_in_waves(rate, max_concurrency), f"generation: profile {how}, measured on {profile.measured_on}")


def carry_server_generation(measurements: list, reference: str, profile: GenerationProfile) -> tuple[list, str]:
    """Each label's measurement with its generation time carried from the reference's by the server's knee (module
    docstring); returns the measurements and the sentence the plan's throughput_method adds."""
    by_label = {m.label: m for m in measurements}
    ref = by_label.get(reference)
    if ref is None or ref.extra.get("generate_s") is None or not ref.samples_per_step:
        raise UserError("--generation-profile", f"a server's profile replaces the generation side of q from the "
                        f"reference's measured time/generate, which {reference!r} does not log",
                        "pass a profile of batchscale's engine (it sets the regime only), or log time/generate")

    def generation_units(m) -> float:  # s(B) * tokens per sample, in the profile's arbitrary unit
        per_sample = (m.tokens_per_step / m.samples_per_step) if m.tokens_per_step else 1.0
        return phase_model(m).seconds(m.samples_per_step) * per_sample

    def phase_model(m) -> PhaseModel:
        return generation_from_profile(profile, m.max_concurrency)
    unit_s = ref.extra["generate_s"] / generation_units(ref)
    lengths_known = all(m.tokens_per_step for m in measurements)
    carried = []
    for m in measurements:
        measured = m.extra.get("generate_s")
        if measured is None or not m.samples_per_step or not m.extra.get("step_s"):
            raise UserError("--generation-profile", f"label {m.label!r} logs no time/generate or time/step, which "
                            "a server's profile needs to replace the generation side of q", "log the phase timers")
        generate_s = unit_s * generation_units(m)
        step_s = max(m.extra["step_s"] - measured + generate_s, 1e-12)
        factor = m.extra["step_s"] / step_s
        extra = {**m.extra, "generate_s": generate_s, "generate_s_measured": measured, "step_s": step_s}
        for key in ("throughput_min_samples_per_s", "throughput_max_samples_per_s"):
            if extra.get(key) is not None:
                extra[key] *= factor
        carried.append(replace(m, throughput_samples_per_s=m.throughput_samples_per_s * factor, extra=extra))
    how = (f"generation time carried from the reference's measured time/generate to each label by the knee of "
           f"{profile.measured_on}" + (" and each label's tokens per sample" if lengths_known else
                                       " (tokens per sample not logged by every label: taken as equal)")
           + "; the rest of each step as measured")
    return carried, how


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
