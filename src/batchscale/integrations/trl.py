"""`GradientNoiseCallback`: batchscale's gradient-noise keys and phase timers from a TRL GRPOTrainer run.

    trainer.add_callback(GradientNoiseCallback(trainer))

Each optimizer step of a run with gradient_accumulation_steps K >= 2 gets `gns/grad_sq` = |G|^2 and `gns/trace_sigma`
= tr(Sigma) (McCandlish et al. 2018, `telemetry.gradnoise.estimate_noise_terms`: each micro-batch is a small batch,
the step a large one; b and B count completions), `gns/b_noise` (`NoiseScaleEMA`, as native runs log it), and
`time/generate`, `time/train`; they enter the trainer's log, hence trainer_state.json's log_history, which `batchscale
import trl` reads, and `plan --predict` plans from. Checked against TRL 1.13.0 and transformers 5.24.0.

Norms, at no second backward and no gradient copy. A hook on each trainable parameter sees the gradient a micro-batch's
backward delivers before it is added into .grad, the increment d_k, and adds up its squared norms; a post-accumulate
hook reads .grad after each backward, so after the last micro-batch it holds the step's gradient a_K before the
Trainer clips it (transformers clips before `on_pre_optimizer_step`, so .grad there is already clipped). Cost: two
squared norms per parameter per micro-batch, kept on the device, one synchronization per step. The hooks return
nothing: gradients, hence training, are bitwise unchanged (tests/test_trl_callback.py). Why increments: (a) the
increment as a difference of prefix sums a_k - a_{k-1} needs a copy of the previous prefix (one gradient of memory);
(b) a fit over the prefix norms |a_k|^2 (batch sizes k b, k = 1..K) is unbiased too, but at K = 2 it compares the
first micro-batch alone with the step, while the increments average all K micro-batch norms: the native estimator
exactly (the chunks' spread about the step, each weighted by its size).

Scales (TRL 1.13 `_compute_loss`). `grpo`, `sapo`, `bnpo`, `dr_grpo`, `luspo`: a micro-batch's loss is its own mean
(over completions; over its tokens for bnpo; over a fixed length for dr_grpo) / K, so its mean gradient m_k = K d_k.
`dapo` (TRL's default), `cispo`, `vespo`: the sum over its loss tokens T_k / (N K / S), with N the loss tokens of its
generation batch (`num_items_in_batch`) and S = steps_per_generation, so d_k ~ T_k / N m_k. In general d_k = s w_k m_k
with weights w_k (1, or T_k / N_k) normalized to sum 1 over the step and s a common factor: m_k = d_k / (s w_k) and
a_K = s sum_k w_k m_k, the step's (token-)weighted mean gradient. s = 1 for the mean losses, and for the token losses
when each step uses exactly one generation batch (S = K, the default, one process); otherwise s ~ 1 scales |G|^2 and
tr(Sigma) by s^2 and cancels in B_noise. T_k and N_k come from the micro-batch's inputs (`completion_mask` x
`tool_mask`, `num_items_in_batch`): trainer.compute_loss is wrapped, passing everything through. Assumed: only the
policy loss is weighted so; an entropy bonus or MoE aux loss (a per-micro-batch mean / K) is taken as weighted like it.
A step with a micro-batch of no loss tokens has no estimate.

Unit. TRL shuffles each generation batch before splitting it into micro-batches (`shuffle_sequence_dict`), so a
micro-batch holds a random subset of completions and a prompt group's completions spread over several: the estimate
treats completions as independent. With rho the within-group correlation of completion gradients, the step's gradient
is as noisy as B / (1 + (G - 1) rho) independent completions, while the split measures the completion-level variance:
B_noise comes out about 1 + (G - 1) rho times smaller than batchscale's own group-unit estimate (too small for rho > 0,
a prompt's shared difficulty; too large for rho < 0, group-centred advantages pulling a group's completions apart).
TRL offers no whole-group micro-batches, so the bias is stated, not removed; `batchscale import trl` notes it.

Timers. `time/generate` sums, over a step's micro-batches, the time from the previous micro-batch (or the step's start)
to its loss: TRL's `_prepare_inputs`, i.e. generation, rewards, advantages and old/reference log-probs when it
generates (every S x num_iterations micro-batches). `time/train` is the rest up to `on_pre_optimizer_step`: forward,
backward, clip. Like TRL's `step_time`, neither counts the optimizer step, so their sum is about `step_time`. Host
clock; on a GPU both end at a synchronizing point (decoding; the Trainer's grad-norm read).

Logging. Every `logging_steps` steps the Trainer logs one entry: gns/grad_sq, gns/trace_sigma and the timers are means
over the steps since the previous log (as TRL's own metrics), gns/b_noise is the EMA at the logged step (updated every
step; null when the EMA of |G|^2 is not positive). The keys are added by wrapping trainer.log (a callback's on_log runs
after the entry is appended to log_history and after the report_to loggers), so every logger sees them. Both wraps and
the hooks are removed at on_train_end. Refused at construction (UserError): K < 2, several processes or GPUs (DDP
reduces gradients inside the backward), DeepSpeed or FSDP (sharded gradients), fp16 (loss-scaled gradients), and a
trainer without a TRL GRPO `loss_type` this module knows.
"""

from __future__ import annotations

import math
import time

import torch
from transformers import TrainerCallback

from batchscale.errors import UserError
from batchscale.rundir.run import GNS_STEP_KEYS
from batchscale.telemetry.gradnoise import NoiseScaleEMA, estimate_noise_terms

KEYS = GNS_STEP_KEYS["actor"]
TIME_KEYS = ("time/generate", "time/train")
TOKEN_SUM_LOSSES = ("dapo", "cispo", "vespo")  # sum over loss tokens / the generation batch's loss tokens
MEAN_LOSSES = ("grpo", "sapo", "bnpo", "dr_grpo", "luspo")  # the micro-batch's own mean / K
FIX_TRAINER = "pass the TRL GRPOTrainer the callback is added to: trainer.add_callback(GradientNoiseCallback(trainer))"


def step_noise_terms(increment_sq: list[float], weights: list[float], samples: list[int],
                     batch_sq: float) -> dict:
    """{gns/grad_sq, gns/trace_sigma} of one step from its micro-batches' squared increment norms |d_k|^2, loss
    weights w_k (any positive scale: normalized here), completions b_k, and the step's squared gradient norm before
    clipping; {} with fewer than two micro-batches or a weight that is not positive (see the module docstring)."""
    total = sum(weights)
    if len(increment_sq) < 2 or min(weights) <= 0 or min(samples) < 1 or not math.isfinite(total):
        return {}
    chunk_grad_sq = [sq / (w / total) ** 2 for sq, w in zip(increment_sq, weights)]
    terms = estimate_noise_terms(chunk_grad_sq, samples, batch_sq, sum(samples))
    if terms is None or not all(math.isfinite(t) for t in terms):
        return {}
    return {KEYS["grad_sq"]: terms[0], KEYS["trace_sigma"]: terms[1]}


class MicroBatchNorms:
    """Parameter hooks collecting, per micro-batch, the squared norm of the gradient its backward delivers (the
    increment) and of the accumulated .grad after it (the prefix), as device scalars until `take`."""

    def __init__(self, parameters):
        self.parameters = [p for p in parameters if p.requires_grad]
        self.increment: list[torch.Tensor] = []  # squared norms of the current micro-batch, one per parameter
        self.prefix: list[torch.Tensor] = []
        self.closed: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []
        self.handles = [handle for p in self.parameters for handle in (
            p.register_hook(self._on_increment), p.register_post_accumulate_grad_hook(self._on_prefix))]

    def _on_increment(self, grad: torch.Tensor) -> None:
        self.increment.append(_squared_norm(grad))  # list.append is atomic: autograd may run hooks on device threads

    def _on_prefix(self, parameter: torch.Tensor) -> None:
        self.prefix.append(_squared_norm(parameter.grad))

    def close(self) -> None:
        """End the current micro-batch (its backward is done)."""
        self.closed.append((self.increment, self.prefix))
        self.increment, self.prefix = [], []

    def take(self) -> list[torch.Tensor]:
        """|d_k|^2 and |a_k|^2 of each micro-batch of the step, interleaved, as device scalars; then reset."""
        sums = [_sum(part) for closed in self.closed for part in closed]
        self.closed = []
        return sums

    def discard(self) -> None:
        self.increment, self.prefix, self.closed = [], [], []

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


def _squared_norm(tensor: torch.Tensor) -> torch.Tensor:
    """In float32 at least (a bf16 gradient's norm is not taken in bf16)."""
    return torch.linalg.vector_norm(tensor.detach(), dtype=torch.promote_types(tensor.dtype, torch.float32)).square()


def _sum(norms: list[torch.Tensor]) -> torch.Tensor:
    if not norms:
        return torch.zeros((), dtype=torch.float32)
    device = norms[0].device
    return torch.stack([n.to(device) for n in norms]).sum()


def _read_all(scalars: list[torch.Tensor]) -> list[float]:
    device = scalars[0].device
    return torch.stack([s.detach().float().reshape(()).to(device) for s in scalars]).tolist()


def check_trainer(trainer) -> str:
    """The weighting ("tokens" or "mean") of `trainer`'s loss; UserError for a setup the estimate cannot read."""
    args = getattr(trainer, "args", None)
    loss_type = getattr(trainer, "loss_type", None)
    if args is None or loss_type is None:
        raise UserError("GradientNoiseCallback(trainer)", f"needs a TRL GRPOTrainer (with args and loss_type), got "
                        f"{type(trainer).__name__}", FIX_TRAINER)
    if loss_type not in TOKEN_SUM_LOSSES + MEAN_LOSSES:
        raise UserError("loss_type", f"{loss_type!r} is not a loss whose micro-batch scaling this callback knows "
                        f"({', '.join(TOKEN_SUM_LOSSES + MEAN_LOSSES)})", "use one of those loss types")
    if args.gradient_accumulation_steps < 2:
        raise UserError("gradient_accumulation_steps", f"must be at least 2 for the gradient noise estimate, got "
                        f"{args.gradient_accumulation_steps} (a micro-batch is the small batch compared with the step)",
                        "set gradient_accumulation_steps >= 2 and divide per_device_train_batch_size to keep the batch")
    if getattr(args, "world_size", 1) > 1 or getattr(args, "n_gpu", 1) > 1:
        raise UserError("GradientNoiseCallback", f"reads one process's gradients, but the run has world_size "
                        f"{args.world_size}, n_gpu {args.n_gpu} (gradients are reduced inside the backward)",
                        "measure on a single-device run of the same configuration")
    if getattr(args, "deepspeed", None) or getattr(args, "fsdp", None):
        raise UserError("GradientNoiseCallback", "cannot read sharded gradients (DeepSpeed or FSDP is on)",
                        "measure on a single-device run without DeepSpeed/FSDP")
    if getattr(args, "fp16", False):
        raise UserError("fp16", "the gradients carry the fp16 loss scale, which changes between steps",
                        "train with bf16 or float32 while measuring the gradient noise")
    return "tokens" if loss_type in TOKEN_SUM_LOSSES else "mean"


class GradientNoiseCallback(TrainerCallback):
    """Logs gns/grad_sq, gns/trace_sigma, gns/b_noise, time/generate and time/train into `trainer`'s log (module
    docstring). Add it with `trainer.add_callback(GradientNoiseCallback(trainer))`."""

    def __init__(self, trainer):
        self.weighting = check_trainer(trainer)
        self.trainer = trainer
        self.ema = NoiseScaleEMA("actor")
        self.norms: MicroBatchNorms | None = None
        self.window: list[dict] = []  # per step since the last log: gns terms and timers
        self.b_noise: dict = {}  # the EMA's last output
        self._originals: dict = {}
        self._reset_step()

    # --- the Trainer's events ---------------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        self.norms = MicroBatchNorms(self.trainer.model.parameters())
        for name, wrapper in (("compute_loss", self._compute_loss), ("log", self._log)):
            self._originals[name] = (getattr(self.trainer, name), self.trainer.__dict__.get(name))
            setattr(self.trainer, name, wrapper)

    def on_train_end(self, args, state, control, **kwargs):
        for name, (_, own) in self._originals.items():
            if self.trainer.__dict__.get(name) == getattr(self, "_" + name):  # still our wrapper: undo it
                if own is None:
                    del self.trainer.__dict__[name]  # the class's method again
                else:
                    self.trainer.__dict__[name] = own
        self._originals = {}
        if self.norms is not None:
            self.norms.remove()
            self.norms = None

    def on_step_begin(self, args, state, control, **kwargs):
        self._reset_step()
        if self.norms is not None:
            self.norms.discard()  # a backward outside the step (none in the Trainer) must not count

    def on_substep_end(self, args, state, control, **kwargs):
        self._end_micro_batch()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._end_micro_batch()
        record = {"time/generate": self.generate_s, "time/train": self.train_s}
        norms = self.norms.take() if self.norms is not None else []
        if self.micro_batches and len(norms) == 2 * len(self.micro_batches):
            weights = [w for _, w in self.micro_batches]
            values = _read_all(norms + weights)  # the step's one synchronization
            increments, prefixes, weights = values[0:len(norms):2], values[1:len(norms):2], values[len(norms):]
            samples = [rows for rows, _ in self.micro_batches]
            record.update(step_noise_terms(increments, weights, samples, prefixes[-1]))
            self.b_noise = self.ema.observe(record) or self.b_noise
        self.window.append(record)

    # --- wrapped trainer methods -------------------------------------------------------------------------------------

    def _compute_loss(self, model, inputs, *args, **kwargs):
        """The trainer's compute_loss, unchanged; a training micro-batch's loss start and its size are noted."""
        if self.trainer.model.training and torch.is_grad_enabled():
            now = time.perf_counter()
            self.generate_s += now - self.mark
            self.loss_start = now
            self.pending = _micro_batch_size(inputs, self.weighting)
        return self._originals["compute_loss"][0](model, inputs, *args, **kwargs)

    def _log(self, logs: dict, *args, **kwargs):
        """The trainer's log, with the window's keys added to a training entry."""
        if "loss" in logs and not any(key.startswith("eval_") for key in logs):
            logs.update(self.window_summary())
        return self._originals["log"][0](logs, *args, **kwargs)

    # --- bookkeeping -------------------------------------------------------------------------------------------------

    def window_summary(self) -> dict:
        """Means over the steps since the last log (gns terms over the steps that have them) and the EMA's B_noise;
        then the window restarts."""
        summary = {}
        for key in (KEYS["grad_sq"], KEYS["trace_sigma"], *TIME_KEYS):
            values = [record[key] for record in self.window if key in record]
            if values:
                summary[key] = sum(values) / len(values)
        if KEYS["grad_sq"] in summary:
            summary.update(self.b_noise)
        self.window = []
        return summary

    def _reset_step(self) -> None:
        self.mark = time.perf_counter()
        self.loss_start: float | None = None
        self.generate_s = self.train_s = 0.0
        self.pending: tuple | None = None
        self.micro_batches: list[tuple] = []  # (completions, weight tensor) per micro-batch

    def _end_micro_batch(self) -> None:
        now = time.perf_counter()
        if self.loss_start is not None:
            self.train_s += now - self.loss_start
        self.mark, self.loss_start = now, None
        if self.norms is not None:
            self.norms.close()
        self.micro_batches.append(self.pending if self.pending is not None else (0, torch.zeros(())))
        self.pending = None


def _micro_batch_size(inputs: dict, weighting: str) -> tuple[int, torch.Tensor]:
    """(completions, loss weight) of one micro-batch: weight 1 for the mean losses, T_k / N_k for the token-sum ones
    (module docstring); 0 when it has no loss tokens, so the step has no estimate."""
    mask = inputs["completion_mask"]
    if "tool_mask" in inputs:
        mask = mask * inputs["tool_mask"]
    tokens = mask.sum().float()
    if weighting == "mean":
        return mask.size(0), (tokens > 0).float()
    items = torch.as_tensor(inputs["num_items_in_batch"], dtype=torch.float32, device=tokens.device).reshape(-1)[0]
    return mask.size(0), tokens / items.clamp(min=1.0)
