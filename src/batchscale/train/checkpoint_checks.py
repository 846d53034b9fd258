"""What a checkpoint must hold before any of it is restored: a resume trusts nothing it reads (issue 39).

rundir.checkpoint has checked the manifest's form and that its files are the ones it names (sizes, sha256, no links).
Here its content is checked against itself and against the run a resumed process has just built from its config
(train.state.TrainingState), and every tensor file is read and checked, all before the first weight, moment or
generator is set, so that a checkpoint found wanting is skipped for the previous one with nothing half-restored:

- the loop: its step and samples are the manifest's, samples = step x P x G of the run's plan, the next eval a
  multiple of `run.eval_every_samples` just past the samples, wall-clock time finite and not negative;
- the config it trained with (written since this check exists) differs from the run's in no key outside
  train.resume.MAY_DIFFER;
- each optimizer: the run's networks and no other, the same groups over the same parameters, and every
  hyperparameter (lr, betas, eps, weight decay, ...) the run's config gives now: a checkpoint whose optimizer carries
  another learning rate would otherwise train at it, logged against run.json's;
- the generators: numpy's and Python's states are set on scratch generators first (a wrong-size state is refused
  there), torch's is a byte tensor of the size torch uses;
- the tensors: the weights are the model's names, shapes and dtypes (a name the file leaves out must be tied to one
  it holds), the optimizer moments those of the parameters; a file safetensors cannot read (a header claiming 1 TiB)
  is a problem, not a traceback.
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from batchscale.config import Config
from batchscale.rundir.checkpoint import Checkpoint, CheckpointProblem
from batchscale.telemetry.trackers.base import flatten_config

ADAM_STATE = {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
GROUP_KEYS = ("params", "lr", "betas", "eps", "weight_decay")
STATE_KEYS = {"loop": dict, "noise_scales": dict, "optimizers": dict, "numpy_rng": dict, "python_random": list}
COLLAPSE_FIELDS = {"steps": int, "was_positive": bool, "zero_since": (int, type(None)), "warned": bool}


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_state_form(plain: dict) -> None:
    for key, kind in STATE_KEYS.items():
        if not isinstance(plain.get(key), kind):
            raise CheckpointProblem(f"its state has no {key} {kind.__name__} (found {type(plain.get(key)).__name__})")


def check_loop(loop: dict, checkpoint: Checkpoint, cfg: Config, samples_per_step: int) -> None:
    """The loop's position against the manifest's and the run's plan."""
    step, samples, next_eval, wall_s = (loop.get(k) for k in ("step", "samples", "next_eval", "wall_s"))
    if step != checkpoint.step or not is_count(step):
        raise CheckpointProblem(f"its loop is at step {step!r:.40}, its manifest at step {checkpoint.step}")
    if samples != checkpoint.samples or not is_count(samples):
        raise CheckpointProblem(f"its loop is at {samples!r:.40} samples, its manifest at {checkpoint.samples:,}")
    if samples != step * samples_per_step:
        raise CheckpointProblem(f"step {step} of P x G = {samples_per_step} samples each ends at "
                                f"{step * samples_per_step:,} samples, but it says {samples:,}")
    every = cfg.run.eval_every_samples
    if not is_count(next_eval) or next_eval % every or not samples < next_eval <= samples + every:
        raise CheckpointProblem(f"its next eval at {next_eval!r:.40} samples is not the first multiple of "
                                f"run.eval_every_samples = {every} after its {samples:,}")
    if not is_number(wall_s) or wall_s < 0:
        raise CheckpointProblem(f"its wall-clock time {wall_s!r:.40} is not a number of seconds >= 0")
    notes, collapse = loop.get("notes"), loop.get("collapse")
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise CheckpointProblem("its loop's notes are not a list of text")
    if not isinstance(collapse, dict) or set(collapse) != set(COLLAPSE_FIELDS) or not all(
            isinstance(collapse[k], kind) and (kind is bool or not isinstance(collapse[k], bool))
            for k, kind in COLLAPSE_FIELDS.items()):
        raise CheckpointProblem(f"its collapse watch is not {', '.join(COLLAPSE_FIELDS)} of the right types")


def check_config(plain: dict, cfg: Config, may_differ: tuple[str, ...]) -> None:
    """The config the checkpoint trained with (absent before this check) against the run's."""
    saved = plain.get("config")
    if saved is None:
        return
    if not isinstance(saved, dict):
        raise CheckpointProblem("its config is not a table")
    before, after = flatten_config(saved), flatten_config(cfg.model_dump(mode="json"))
    differ = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and k not in may_differ)
    if differ:
        shown = "; ".join(f"{k}: {before.get(k)!r:.40} in it, {after.get(k)!r:.40} in the run" for k in differ[:4])
        raise CheckpointProblem(f"it was trained with another config ({shown})")


def same(got, want) -> bool:
    return (list(got) if isinstance(got, (list, tuple)) else got) == (list(want) if isinstance(want, tuple) else want)


def check_optimizer_groups(name: str, saved, optimizer: torch.optim.Optimizer) -> None:
    """The saved param_groups against the freshly built optimizer's (built from the run's config): the same
    parameters and every setting both know equal (a setting only one torch version has is left to torch)."""
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    fresh = optimizer.state_dict()["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(fresh) or not isinstance(saved.get("state"), dict):
        raise CheckpointProblem(f"its {name} optimizer is not {len(fresh)} parameter group(s) with a state")
    params = {index for group in fresh for index in group["params"]}
    for group, want in zip(groups, fresh):
        if not isinstance(group, dict) or not set(GROUP_KEYS) <= set(group):
            raise CheckpointProblem(f"its {name} optimizer's groups lack {', '.join(GROUP_KEYS)}")
        for key in sorted(set(group) & set(want), key=lambda k: (k not in GROUP_KEYS, k)):
            if not same(group[key], want[key]):
                raise CheckpointProblem(f"its {name} optimizer's {key} is {group[key]!r:.60}, but the run's config "
                                        f"gives {want[key]!r:.60}")
    for index, values in saved["state"].items():
        if not (index.isdigit() and int(index) in params) or not isinstance(values, dict) or not all(
                key in ADAM_STATE and (value is None or is_number(value)) for key, value in values.items()):
            raise CheckpointProblem(f"its {name} optimizer's state {index!r:.40} is not one of a parameter's")


def check_noise_scales(saved: dict, known: set[str]) -> None:
    for name, values in saved.items():
        if name not in known or not isinstance(values, dict) or set(values) != {"grad_sq", "trace_sigma"} or not all(
                is_number(v) for v in values.values()):
            raise CheckpointProblem(f"its noise scale {name!r:.40} is not the grad_sq and trace_sigma numbers of a "
                                    "network")


def check_generators(numpy_state: dict, python_state: list, bit_generator: np.random.BitGenerator) -> None:
    """Set both states on scratch generators: what they refuse (a wrong-size state, another bit generator) is a
    problem here, before the run's own generators are touched."""
    try:
        type(bit_generator)().state = numpy_state
    except (ValueError, TypeError, KeyError, OverflowError) as e:
        raise CheckpointProblem(f"its numpy generator state cannot be restored ({str(e)[:120]})") from None
    try:
        version, internal, gauss = python_state
        if not isinstance(internal, list) or not all(is_count(v) for v in internal):
            raise TypeError("the internal state is not a list of integers")
        random.Random().setstate((version, tuple(internal), gauss))
    except (ValueError, TypeError, OverflowError) as e:
        raise CheckpointProblem(f"its Python random state cannot be restored ({str(e)[:120]})") from None


def read_tensors(path, device: str = "cpu") -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path), device=device)
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointProblem(f"{path.name} is not a readable safetensors file ({str(e)[:160]})") from None


def check_weights(name: str, tensors: dict[str, torch.Tensor], model: torch.nn.Module) -> None:
    """The file's tensors are the model's by name, shape and dtype; a name it leaves out is tied to one it holds
    (save_model writes a shared tensor once)."""
    expected = model.state_dict()
    for key, tensor in tensors.items():
        want = expected.get(key)
        if want is None:
            raise CheckpointProblem(f"{name}.safetensors holds {key!r:.80}, which the model has not")
        if tensor.shape != want.shape or tensor.dtype != want.dtype:
            raise CheckpointProblem(f"{name}.safetensors holds {key} as {tuple(tensor.shape)} {tensor.dtype}, the "
                                    f"model as {tuple(want.shape)} {want.dtype}")
    held = {expected[key].data_ptr() for key in tensors}
    missing = [key for key, value in expected.items() if key not in tensors and value.data_ptr() not in held]
    if missing:
        raise CheckpointProblem(f"{name}.safetensors lacks {', '.join(missing[:3])}")


def check_moments(name: str, tensors: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer) -> None:
    """Each tensor `<param index>.<Adam state name>`, shaped as its parameter (the step count a scalar)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for key, tensor in tensors.items():
        index, _, state = key.partition(".")
        if not index.isdigit() or int(index) >= len(params) or state not in ADAM_STATE:
            raise CheckpointProblem(f"{name}_optimizer.safetensors holds {key!r:.80}, no state of a parameter")
        want = () if state == "step" else tuple(params[int(index)].shape)
        if tuple(tensor.shape) != want or not tensor.is_floating_point():
            raise CheckpointProblem(f"{name}_optimizer.safetensors holds {key} as {tuple(tensor.shape)} "
                                    f"{tensor.dtype}, not a float tensor of shape {want}")


def check_rng(tensors: dict[str, torch.Tensor]) -> None:
    """torch's CPU generator state (and the CUDA ones, where there is a GPU to restore them to): byte tensors of the
    sizes torch uses."""
    if "torch" not in tensors:
        raise CheckpointProblem("its generator file holds no torch generator state")
    for key, tensor in tensors.items():
        if key == "torch":
            want = torch.get_rng_state().numel()
        elif key.startswith("cuda.") and key[5:].isdigit():
            restored = torch.cuda.is_available() and int(key[5:]) < torch.cuda.device_count()
            want = torch.cuda.get_rng_state(int(key[5:])).numel() if restored else tensor.numel()
        else:
            raise CheckpointProblem(f"its generator file holds {key!r:.40}, no generator's state")
        if tensor.dtype != torch.uint8 or tensor.dim() != 1 or tensor.numel() != want:
            raise CheckpointProblem(f"its {key} generator state is {tuple(tensor.shape)} {tensor.dtype}, not "
                                    f"{want} bytes")
