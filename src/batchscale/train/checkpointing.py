"""What a checkpoint holds of a training run, and how a resumed run gets it back (the format: rundir.checkpoint).

Tensors, as safetensors (nothing a file holds is ever unpickled or executed):
- `actor.safetensors`, `critic.safetensors`: the weights the optimizers update. The reference model of a KL penalty
  is a frozen copy of the starting policy, rebuilt from `model.name` exactly as at the start, so it is not saved;
- `actor_optimizer.safetensors`, `critic_optimizer.safetensors`: the optimizer's per-parameter state (Adam's moments
  and step counts), its param_groups in the manifest;
- `rng.safetensors`: torch's CPU generator (the engine samples from it) and, on a GPU, every CUDA generator's.

JSON, in the manifest's `state`: the loop's position (step, samples, next eval, wall-clock so far), the collapse
watch and its notes, both gradient-noise EMAs, the numpy generator the task samples prompts with, Python's `random`,
and the config the run trained with (a config.json edited since is refused: train.resume). Nothing of a checkpoint
is restored before all of it has passed train.checkpoint_checks (`prepare_restore`): one found wanting is skipped
for the previous one with the run's freshly built state untouched. With these a resumed synchronous run draws the
same prompts and samples the same tokens as the uninterrupted one, so its records are the same, times aside
(tests/test_resume.py). What cannot be restored exactly,
an asynchronous generator's buffer and in-flight groups, `resume_notes` says.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import save_file, save_model

from batchscale.rundir.checkpoint import Checkpoint, CheckpointProblem
from batchscale.train import checkpoint_checks as checks
from batchscale.train.health import CollapseWatch

RNG_FILE = "rng.safetensors"


@dataclass
class LoopState:
    """Where the training loop is: what a checkpoint saves besides the networks and generators."""

    step: int = 0
    samples: int = 0
    next_eval: int = 0
    wall_s: float = 0.0  # training time before this process (a resumed run's wall_s continues from it)
    records: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    collapse: CollapseWatch = field(default_factory=CollapseWatch)


def networks(state) -> dict:
    """name -> (model, optimizer) of the networks a run updates (state: train.state.TrainingState)."""
    found = {"actor": (state.actor.model, state.actor.optimizer)}
    if state.critic is not None:
        found["critic"] = (state.critic.model, state.critic.optimizer)
    return found


def optimizer_parts(optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(tensors, JSON) of an optimizer's state_dict: every tensor under "<param index>.<name>", the rest as JSON."""
    state_dict = optimizer.state_dict()
    tensors, plain = {}, {}
    for index, values in state_dict["state"].items():
        plain[str(index)] = {}
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().contiguous().cpu()
            else:
                plain[str(index)][name] = value
    return tensors, {"state": plain, "param_groups": state_dict["param_groups"]}


def load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict, plain: dict, device) -> None:
    state: dict[int, dict] = {int(index): dict(values) for index, values in plain["state"].items()}
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value if name == "step" else value.to(device)
    groups = [{k: tuple(v) if k == "betas" else v for k, v in group.items()} for group in plain["param_groups"]]
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def capture(state, loop: LoopState) -> tuple[dict, Callable[[Path], None]]:
    """(the manifest's JSON state, the writer of the tensor files) of the run at a step boundary."""
    parts = {name: optimizer_parts(optimizer) for name, (_, optimizer) in networks(state).items()}
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng.update({f"cuda.{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
    python_state = random.getstate()
    plain = {
        "loop": {"step": loop.step, "samples": loop.samples, "next_eval": loop.next_eval, "wall_s": loop.wall_s,
                 "notes": list(loop.notes), "collapse": vars(loop.collapse)},
        "noise_scales": {name: {"grad_sq": ema.grad_sq, "trace_sigma": ema.trace_sigma}
                         for name, ema in state.noise_scales.items()},
        "optimizers": {name: part[1] for name, part in parts.items()},
        "numpy_rng": state.rng.bit_generator.state,
        "python_random": [python_state[0], list(python_state[1]), python_state[2]],
        "config": state.cfg.model_dump(mode="json"),
    }

    def write_files(directory: Path) -> None:
        for name, (model, _) in networks(state).items():
            save_model(model, str(directory / f"{name}.safetensors"))
            save_file(parts[name][0], str(directory / f"{name}_optimizer.safetensors"))
        save_file({k: v.contiguous() for k, v in rng.items()}, str(directory / RNG_FILE))

    return plain, write_files


@dataclass(frozen=True)
class Restorable:
    """A checkpoint read whole and checked (train.checkpoint_checks), ready to be put into the training state."""

    checkpoint: Checkpoint
    weights: dict  # network -> its tensors, on the model's device
    moments: dict  # network -> its optimizer's tensors
    rng: dict


def prepare_restore(state, checkpoint: Checkpoint, may_differ: tuple[str, ...] = ()) -> Restorable:
    """Read and check everything of `checkpoint` against itself and the freshly built `state` (module docstring of
    train.checkpoint_checks), touching nothing of `state`; raises CheckpointProblem saying what is wrong. Config keys
    in `may_differ` (train.resume.MAY_DIFFER) may differ from those it trained with."""
    plain = checkpoint.state
    checks.check_state_form(plain)
    checks.check_loop(plain["loop"], checkpoint, state.cfg, state.plan.samples_per_step)
    checks.check_config(plain, state.cfg, may_differ)
    found = networks(state)
    if set(plain["optimizers"]) != set(found):
        raise CheckpointProblem(f"it holds the optimizers of {sorted(plain['optimizers'])!r:.80}, the run has "
                                f"{sorted(found)}")
    for name, (_, optimizer) in found.items():
        checks.check_optimizer_groups(name, plain["optimizers"][name], optimizer)
    checks.check_noise_scales(plain["noise_scales"], set(state.noise_scales))
    checks.check_generators(plain["numpy_rng"], plain["python_random"], state.rng.bit_generator)
    weights, moments = {}, {}
    device = str(state.actor.model.device)
    for name, (model, optimizer) in found.items():
        weights[name] = checks.read_tensors(checkpoint.path / f"{name}.safetensors", device)
        checks.check_weights(name, weights[name], model)
        moments[name] = checks.read_tensors(checkpoint.path / f"{name}_optimizer.safetensors")
        checks.check_moments(name, moments[name], optimizer)
    rng = checks.read_tensors(checkpoint.path / RNG_FILE)
    checks.check_rng(rng)
    return Restorable(checkpoint, weights, moments, rng)


def apply_restore(state, restorable: Restorable, records: list[dict]) -> LoopState:
    """Put a checked checkpoint's weights, optimizer states and generators into the training state; returns the
    loop's position, its records those of metrics.jsonl up to the checkpoint."""
    plain = restorable.checkpoint.state
    device = state.actor.model.device
    for name, (model, optimizer) in networks(state).items():
        model.load_state_dict(restorable.weights[name], strict=False)  # a name left out is tied to one held
        load_optimizer(optimizer, restorable.moments[name], plain["optimizers"][name], device)
    for name, values in plain["noise_scales"].items():
        state.noise_scales[name].grad_sq, state.noise_scales[name].trace_sigma = values["grad_sq"], values["trace_sigma"]
    state.rng.bit_generator.state = plain["numpy_rng"]
    version, internal, gauss = plain["python_random"]
    random.setstate((version, tuple(internal), gauss))
    rng = restorable.rng
    torch.set_rng_state(rng["torch"])
    if torch.cuda.is_available():
        cuda = [rng[f"cuda.{i}"] for i in range(torch.cuda.device_count()) if f"cuda.{i}" in rng]
        torch.cuda.set_rng_state_all(cuda)
    loop = plain["loop"]
    collapse = CollapseWatch()
    for key, value in loop["collapse"].items():
        setattr(collapse, key, value)
    return LoopState(loop["step"], loop["samples"], loop["next_eval"], loop["wall_s"], records, list(loop["notes"]),
                     collapse)


def restore(state, checkpoint: Checkpoint, records: list[dict]) -> LoopState:
    """prepare_restore, then apply_restore: raises CheckpointProblem, with `state` untouched, when it is wanting."""
    return apply_restore(state, prepare_restore(state, checkpoint), records)
