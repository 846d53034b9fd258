"""`plan --predict`: the time-to-target curve of other batch sizes predicted from ONE run, before any sweep.

Learning side (McCandlish et al. 2018): the run logs the gradient noise terms every step (`gns/grad_sq`,
`gns/trace_sigma`; see `telemetry.gradnoise`); its B_noise is the ratio of their means over the second half of the
run, with an 80% interval from the steps' scatter (infinite, null in JSON, where the gradient was pure noise: then rN
= 1, the formula's limit). When the interval's upper end is infinite, no best batch is named: the document says why
and about how many more samples would resolve it (`why_unresolved`). Samples to target relative to the run's own
batch B_ref:

    rN(B) = (1 + b(B) / B_noise) / (1 + b(B_ref) / B_noise)

with b the samples per optimizer update (= B in the single pass; with PPO mini-batches every candidate keeps the run's
split, b = B * samples_per_update / samples_per_step). Every candidate is a point of the run's lr family: its learning
rate retuned from the run's by the run's lr rule (`lr_rule` in the document; McCandlish's link assumes each batch at its
optimal step size, which the square-root rule stands in for). A batch trained at a fixed LR, or any other rule, is not
a point the formula speaks for, and the output says so.

Systems side: q(B) = B / t_step(B), each phase of the run's measured step carried to B by a model (`phase_times`).
Then throughput_gain = q(B) / q(B_ref) and T/T_ref = rN / throughput_gain (the paper's decision rule); the predicted
best batch is the feasible candidate with the smallest T/T_ref, and its interval is the best batch at B_noise's low
and high ends. A candidate is infeasible when its KV cache does not fit (`--model --hardware`, as `plan` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from batchscale.errors import UserError
from batchscale.plan import phase_times
from batchscale.plan.sweep_inputs import measure_run_throughput
from batchscale.rundir import GenerationProfile, PredictionDocument, TrainingProfile, read_document, read_run
from batchscale.telemetry.gradnoise import predict_samples_penalty, summarize_noise_scale

DEFAULT_BATCH_FACTORS = (0.25, 0.5, 1, 2, 4, 8, 16)


@dataclass(frozen=True)
class RooflineInputs:
    model: str
    hardware: str
    context: int
    mem_util: float = 0.9


def parse_candidate_batches(text: str | None, reference: int) -> list[int]:
    """--batches as a comma list of positive integers (samples per step); default B_ref x 1/4 .. 16. The reference
    batch is always among them."""
    if text is None:
        batches = {max(1, round(reference * factor)) for factor in DEFAULT_BATCH_FACTORS}
    else:
        batches = set()
        for item in text.split(","):
            try:
                value = int(item.strip())
            except ValueError:
                value = 0
            if value < 1:
                raise UserError("--batches", f"every batch must be a positive integer of samples per step, got "
                                f"{item.strip()!r}", "pass a comma list such as 64,128,256")
            batches.add(value)
    return sorted(batches | {reference})


def predict_from_run(run_dir: Path, batches: str | None = None, generation_profile: Path | None = None,
                     training_profile: Path | None = None, roofline: RooflineInputs | None = None) -> PredictionDocument:
    """The prediction document of `plan --predict RUN_DIR` (inputs checked before any arithmetic)."""
    if training_profile is not None and roofline is not None:
        raise UserError("--training-profile / --model", "are two sources for the training time",
                        "pass --training-profile, or --model --hardware --context, not both")
    run = read_run(Path(run_dir))
    b_noise = summarize_noise_scale(run.steps)
    if b_noise is None:
        raise UserError(f"--predict {run_dir}", "logs no gns/b_noise (the online gradient noise scale)"
                        + describe_variance_proxy(run.steps),
                        "train the run with this batchscale (every run logs it when an update holds two prompt "
                        "groups), or plan from a sweep")
    measured = measure_run_throughput(run)
    if measured is None or measured.generate_s is None or measured.train_s is None:
        raise UserError(f"--predict {run_dir}", "has no timed steps (time/step, time/generate, time/train)",
                        "give a run whose step records carry the phase timers")
    reference = run.samples_per_step
    candidates = parse_candidate_batches(batches, reference)
    gen_profile = read_document(generation_profile, GenerationProfile, "--generation-profile") \
        if generation_profile else None
    train_profile = read_document(training_profile, TrainingProfile, "--training-profile") if training_profile else None
    shape, hardware, kv_max_batch = _roofline(roofline)
    max_concurrency = run.descriptor.max_concurrency
    if gen_profile is not None:
        generation = phase_times.generation_from_profile(gen_profile, max_concurrency)
    elif shape is not None:
        generation = phase_times.generation_from_roofline(shape, hardware, roofline.context, max_concurrency)
    else:
        generation = phase_times.proportional("generation")
    if train_profile is not None:
        training = phase_times.training_from_profile(train_profile)
    elif shape is not None:
        training = phase_times.training_from_roofline(shape, hardware, roofline.context)
    else:
        training = phase_times.proportional("training")

    per_update = run.descriptor.samples_per_update / run.descriptor.samples_per_step
    other_s = max(measured.step_s - measured.generate_s - measured.train_s, 0.0)

    def step_s(batch: int) -> float:
        return (phase_times.scale_phase(generation, measured.generate_s, batch, reference)
                + phase_times.scale_phase(training, measured.train_s, batch, reference)
                + other_s * batch / reference)

    def penalty(batch: int, scale: float) -> float:
        return predict_samples_penalty(batch * per_update, reference * per_update, scale)

    q_ref = reference / step_s(reference)
    rows = []
    for batch in candidates:
        q = batch / step_s(batch)
        r_n, gain = penalty(batch, b_noise.value), q / q_ref
        rows.append({"samples_per_step": batch, "r_n_predicted": r_n, "throughput_gain": gain,
                     "time_to_target_normalized": r_n / gain, "throughput_samples_per_s": q,
                     "feasible": kv_max_batch is None or batch <= kv_max_batch})
    why_unresolved = unresolved_reason(b_noise, reference)
    best = None if why_unresolved else _best_batch(rows, b_noise.value, penalty)
    ends = [] if why_unresolved else [_best_batch(rows, scale, penalty) for scale in (b_noise.low, b_noise.high)]
    known = [b for b in (best, *ends) if b is not None]
    return PredictionDocument.model_validate({
        "run": str(run_dir),
        "label": run.label,
        "b_noise": b_noise.to_json(),
        "b_noise_steps": b_noise.steps,
        "b_noise_unresolved_steps": b_noise.unresolved_steps,
        "why_unresolved": why_unresolved,
        "lr_rule": run.descriptor.lr_rule,
        "reference": {"label": run.label, "samples_per_step": reference,
                      "throughput_samples_per_s": q_ref, "step_s": measured.step_s},
        "best": {"samples_per_step": best, "low": min(known) if known else None,
                 "high": max(known) if known else None},
        "throughput_method": "; ".join([generation.method, training.method, "other step time: proportional to B",
                                        "each carried from the run's median phase times after the first step"]),
        "rows": rows,
    })


def describe_variance_proxy(steps: list[dict]) -> str:
    """What an imported verl run's variance_proxy/* say and why they are no B_noise (docs/IMPORT.md), "" without."""
    medians = {}
    for name in ("proxy1_signal_strength", "proxy2_total_power", "proxy3_pure_noise"):
        values = sorted(s[f"variance_proxy/{name}"] for s in steps if f"variance_proxy/{name}" in s)
        if values:
            medians[name] = values[len(values) // 2]
    if not medians:
        return ""
    shown = ", ".join(f"{name} {value:.3g}" for name, value in medians.items())
    return (f"; it logs verl's variance_proxy/* (medians: {shown}), a forward-pass signal (advantages^2 x a "
            "logit-space score norm, over ||g||^2 in parameter space), not the parameter-gradient noise B_noise "
            "measures, so it is not used")


def unresolved_reason(b_noise, samples_per_step: int) -> str | None:
    """Why no best batch can be named from this B_noise (its interval's upper end infinite), and how many more samples
    the run would need at its present scatter (the window being the run's second half); None when resolved."""
    if b_noise.resolved:
        return None
    if b_noise.steps_to_resolve is None:
        return ("B_noise is not resolved: the mean |G|^2 estimate is not above zero over the run's second half, so "
                "the gradient is noise at this batch; a run several times longer, or at a larger batch, is needed")
    more = 2 * b_noise.steps_to_resolve * samples_per_step
    return (f"B_noise is not resolved: its 80% interval reaches infinity (|G|^2 not above its noise); at the present "
            f"scatter about {more:,} more samples ({2 * b_noise.steps_to_resolve} more steps, half of them in the "
            "second-half window) would resolve it")


def _best_batch(rows: list[dict], b_noise: float, penalty) -> int | None:
    """The feasible candidate with the smallest predicted T/T_ref at this B_noise (ties: the smaller batch)."""
    feasible = [r for r in rows if r["feasible"]]
    if not feasible:
        return None
    return min(feasible, key=lambda r: (penalty(r["samples_per_step"], b_noise) / r["throughput_gain"],
                                        r["samples_per_step"]))["samples_per_step"]


def _roofline(inputs: RooflineInputs | None):
    """Model shape, hardware and KV capacity for the roofline (None, None, None without --model/--hardware)."""
    if inputs is None:
        return None, None, None
    from batchscale.plan.memory import compute_memory_limit
    from batchscale.systems.hardware import get_hardware
    from batchscale.systems.model_shapes import get_model_shape

    limit = compute_memory_limit(inputs.model, inputs.hardware, inputs.context, inputs.mem_util)
    return get_model_shape(inputs.model), get_hardware(inputs.hardware), limit.kv_max_batch
