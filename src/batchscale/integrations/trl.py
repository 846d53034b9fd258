"""`GradientNoiseCallback`: batchscale's gradient-noise keys and phase timers from a TRL GRPOTrainer run.

    trainer = GRPOTrainer(model=..., reward_funcs=..., args=config, train_dataset=..., callbacks=[GradientNoiseCallback()])

A plain `transformers.TrainerCallback`, made without the trainer and bound on `on_train_begin` to what the Trainer
passes every callback (`args`, `state`, `model`); it wraps no trainer method. Each optimizer step gets `gns/grad_sq` =
|G|^2 and `gns/trace_sigma` = tr(Sigma) (McCandlish et al. 2018, `telemetry.gradnoise.estimate_noise_terms`),
`gns/b_noise` (`NoiseScaleEMA`, as native runs log it), and `time/generate`, `time/train`; they enter each training
log entry, hence trainer_state.json's log_history, which `batchscale import trl` reads and `batchscale predict` plans from.
Checked against TRL 1.13.0 with transformers 5.25.0 and torch 2.13.0 (CHECKED_TRL; another TRL gets a warning naming
what was checked); every event and hook it uses is public API, except torch's autograd `queue_callback` (below).

Estimator, on P processes (P = 1 without torch.distributed) each running K micro-batches per step. Process p's
backward of micro-batch k adds the increment d_pk to its .grad; DDP averages the processes' sums, so the step's
gradient is g = (1/P) sum_pk d_pk. TRL's losses make g a weighted mean of the micro-batches' own mean gradients,
g = sum_pk w_pk m_pk with sum w = 1, so m_pk = d_pk / (P w_pk) (weights below). With b_pk completions per micro-batch
and B = sum b_pk, E|m_pk|^2 = |G|^2 + tr(Sigma) / b_pk and E|g|^2 = |G|^2 + tr(Sigma) / B: the estimator's small
batches are the P x K micro-batches (b their harmonic mean; with K = 1 each process's local batch), its large batch
is the all-reduced step. What crosses processes is an all-gather of 3K scalars per process, (|d_pk|^2, w_pk, b_pk),
once per step; |g|^2 is read on every process after DDP's all-reduce. The inputs are exactly those of one process
running the same P x K micro-batches in sequence (tests/test_trl_ddp.py, two gloo processes against one). Needs
P x K >= 2. Reducing only per-process squared norms |a_p|^2 (a_p = sum_k d_pk) would compare a middle level with the
step at K >= 2 and lose the finer split; the micro-batch is the smallest batch the backward hands over for free.

Norms, at no second backward and no gradient copy. A hook on each trainable parameter sees d_pk as its backward
delivers it, before it is added into .grad (squared norm, kept on the device). At the end of each backward the
squared norm of .grad is read in a callback queued on autograd's engine (`torch.autograd.Variable._execution_engine.
queue_callback`, which torch.distributed's FSDP uses the same way): re-queued once, it runs after DDP's own end-of-
backward callback, which finishes the all-reduce, and before the Trainer clips (transformers clips before
`on_pre_optimizer_step`). Where nothing is clipped, the step's norm is checked against .grad at
`on_pre_optimizer_step`; a mismatch (a reduction this callback did not see) stops the estimate with a warning rather
than logging a wrong one. Cost: one squared norm per parameter per micro-batch and one of the whole .grad per
backward; the hooks return nothing, so training is bitwise unchanged (tests/test_trl_grpo.py).

Weights (TRL 1.13 `_compute_loss`). `grpo`, `sapo`, `bnpo`, `dr_grpo`, `luspo`: a micro-batch's loss is its own mean
/ K, so w = 1 (0 for a micro-batch without loss tokens: that step has no estimate). `dapo` (TRL's default), `cispo`,
`vespo`: the sum over the micro-batch's loss tokens T_pk / (N/P x K/S), N the loss tokens of the whole generation
batch, S = steps_per_generation: w = T_pk (normalised over the step). T_pk is read in a forward pre-hook on the model
(training mode, gradients on): TRL calls `model(input_ids=..., attention_mask=cat(prompt_mask, completion_mask),
logits_to_keep=C + 1)`, so the completion mask is attention_mask's last C columns (the truncation mask included); a
model whose forward takes no `logits_to_keep` is refused for these losses. Not seen: TRL's tool_mask (tool-call runs
count tool-result tokens in T_pk), a Liger loss (it calls the backbone, so no step has an estimate). A token-sum loss
with S < K is refused (a step would span generation batches with different N). For S > K the step's share of N
varies: a common factor s ~ 1 scales |G|^2 and tr(Sigma) alike and cancels in B_noise.

Unit. TRL shuffles each generation batch before splitting it into micro-batches (`shuffle_sequence_dict`), so a
prompt group's completions spread over several: the estimate treats completions as independent. With rho the
within-group correlation of completion gradients, B_noise comes out about 1 + (G - 1) rho times smaller than
batchscale's own group-unit estimate; TRL offers no whole-group micro-batches, so the bias is stated, not removed
(`batchscale import trl` notes it).

Timers. `time/generate` sums, over a step's micro-batches, the time from the previous micro-batch's end (or the step's
start) to its training forward: TRL's `_prepare_inputs`, i.e. generation, rewards, advantages and old/reference
log-probs when it generates. `time/train` is the rest up to `on_pre_optimizer_step`: forward, backward, the clip. Like
TRL's `step_time`, neither counts the optimizer step. Host clock.

Logging. Each training log entry (every `logging_steps`) gets gns/grad_sq, gns/trace_sigma and the timers as means over
the steps since the previous log (as TRL's own metrics), and gns/b_noise, the EMA at the logged step (null while the
EMA of |G|^2 is not positive). `on_log` adds them to the entry the Trainer has just appended to `state.log_history`
(trainer_state.json) and to the entry's dict that the callbacks after this one see (the console). The `report_to`
loggers are callbacks that run before any user callback, so they do not see them: to send them there, set
`report_to="none"` and list the logger's callback after this one (`callbacks=[GradientNoiseCallback(),
WandbCallback()]`). The learning rate is TRL's own `learning_rate` of each entry (the schedule's value at that step),
which the import carries as `lr/actor` per record. Refused at `on_train_begin` (a UserError, before the first step):
args without a TRL GRPO `loss_type` this module knows, P x K < 2, fp16 (loss-scaled gradients), nn.DataParallel
(n_gpu > 1), DeepSpeed (it reduces and partitions the gradients in its own buffers, out of the parameters' hooks)
and FSDP (each gradient is reduce-scattered inside the backward, so no process ever holds a micro-batch's whole
gradient).
"""

from __future__ import annotations

import math
import os
import time
import warnings
from importlib import metadata

import torch
from transformers import TrainerCallback

from batchscale.errors import UserError
from batchscale.rundir.run import GNS_STEP_KEYS
from batchscale.telemetry.gradnoise import NoiseScaleEMA, estimate_noise_terms

KEYS = GNS_STEP_KEYS["actor"]
TIME_KEYS = ("time/generate", "time/train")
TOKEN_SUM_LOSSES = ("dapo", "cispo", "vespo")  # sum over loss tokens / the generation batch's loss tokens
MEAN_LOSSES = ("grpo", "sapo", "bnpo", "dr_grpo", "luspo")  # the micro-batch's own mean / K
CHECKED_TRL = ("1.13.0",)
CLIPPED_FRACTION = 0.999  # a step whose norm after the clip is below this x max_grad_norm was not clipped
NORM_RTOL = 1e-3  # the end-of-backward norm must match .grad's where nothing was clipped
FIX_MEASURE = "measure on a single-device or DDP run of the same configuration"


def micro_batch_grad_sq(increment_sq: list[float], weights: list[float], processes: int = 1) -> list[float] | None:
    """|m|^2 of each micro-batch's own mean gradient, m = d / (P w) with the weights normalized over the step (module
    docstring); None when a weight is not positive (a micro-batch without loss tokens) or they do not sum finite."""
    total = sum(weights)
    if not weights or min(weights) <= 0 or not math.isfinite(total):
        return None
    return [sq / (processes * w / total) ** 2 for sq, w in zip(increment_sq, weights)]


def step_noise_terms(increment_sq: list[float], weights: list[float], samples: list[int], batch_sq: float,
                     processes: int = 1) -> dict:
    """{gns/grad_sq, gns/trace_sigma} of one step from its micro-batches' squared increment norms |d|^2 (of every
    process), loss weights w (any positive scale), completions b, the step's squared gradient norm before clipping,
    and the number of processes DDP averaged over; {} with fewer than two micro-batches or a weight that is not
    positive."""
    chunk_grad_sq = micro_batch_grad_sq(increment_sq, weights, processes)
    if chunk_grad_sq is None or len(chunk_grad_sq) < 2 or min(samples) < 1:
        return {}
    terms = estimate_noise_terms(chunk_grad_sq, samples, batch_sq, sum(samples))
    if terms is None or not all(math.isfinite(t) for t in terms):
        return {}
    return {KEYS["grad_sq"]: terms[0], KEYS["trace_sigma"]: terms[1]}


class MicroBatchNorms:
    """Per micro-batch: the squared norm of the increment each parameter's backward delivers (a tensor hook each), and
    the squared norm of the whole .grad at the end of the backward (after DDP's all-reduce: module docstring), as
    device scalars until `take`."""

    def __init__(self, parameters):
        self.parameters = [p for p in parameters if p.requires_grad]
        self.increment: list[torch.Tensor] = []  # squared norms of the current micro-batch, one per parameter
        self.grad_sq: torch.Tensor | None = None  # |.grad|^2 at the end of the latest backward
        self.closed: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        self.queued = False
        self.handles = [p.register_hook(self._on_increment) for p in self.parameters]

    def _on_increment(self, grad: torch.Tensor) -> None:
        self.increment.append(_squared_norm(grad))  # list.append is atomic: autograd may run hooks on device threads
        if not self.queued:  # first hook of this backward: read .grad once the backward (and DDP's part) is done
            self.queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)

    def _after_backward(self) -> None:
        # DDP queues its own end-of-backward callback (the all-reduce's end) during the backward, after this one was
        # queued; callbacks run in order and may queue more, so the read goes to the back of the queue once.
        torch.autograd.Variable._execution_engine.queue_callback(self._read_grad)

    def _read_grad(self) -> None:
        self.queued = False
        grads = [p.grad for p in self.parameters if p.grad is not None]
        self.grad_sq = _sum([_squared_norm(g) for g in grads]) if grads else None

    def close(self) -> None:
        """End the current micro-batch (its backward is done)."""
        self.closed.append((_sum(self.increment), self.grad_sq))
        self.increment, self.grad_sq = [], None

    def take(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """(|d_k|^2, |.grad|^2 after it) of each micro-batch of the step, as device scalars; then reset."""
        closed, self.closed = self.closed, []
        return closed

    def discard(self) -> None:
        self.increment, self.grad_sq, self.closed = [], None, []
        self.queued = False  # a backward that raised never ran its end-of-backward callback

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


class TrainingForwards:
    """A forward pre-hook on the model: completions and loss tokens of the training forwards (training mode, gradients
    on) since the last `take`, and when the first of them started."""

    def __init__(self, model, weighting: str):
        self.weighting = weighting
        self.rows, self.tokens, self.started = 0, [], None
        self.handle = model.register_forward_pre_hook(self._on_forward, with_kwargs=True)

    def _on_forward(self, module, args, kwargs) -> None:
        if not (module.training and torch.is_grad_enabled()):
            return  # generation, old and reference log-probs
        if self.started is None:
            self.started = time.perf_counter()
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        if input_ids is None:
            return
        self.rows += input_ids.size(0)
        if mask is None:
            mask = torch.ones_like(input_ids)
        keep = kwargs.get("logits_to_keep")
        if isinstance(keep, int) and keep > 1:
            mask = mask[:, -(keep - 1):]  # TRL passes the completion length + 1
        self.tokens.append(mask.detach().sum())

    def take(self) -> tuple[int, torch.Tensor | None, float | None]:
        """(completions, loss tokens as a device scalar or None, start time) of the micro-batch; then reset."""
        tokens = _sum(self.tokens) if self.tokens else None
        taken = (self.rows, tokens, self.started)
        self.rows, self.tokens, self.started = 0, [], None
        return taken

    def remove(self) -> None:
        self.handle.remove()


def _squared_norm(tensor: torch.Tensor) -> torch.Tensor:
    """In float32 at least (a bf16 gradient's norm is not taken in bf16)."""
    return torch.linalg.vector_norm(tensor.detach(), dtype=torch.promote_types(tensor.dtype, torch.float32)).square()


def _sum(scalars: list[torch.Tensor]) -> torch.Tensor:
    if not scalars:
        return torch.zeros((), dtype=torch.float64)
    device = scalars[0].device
    return torch.stack([s.detach().double().reshape(()).to(device) for s in scalars]).sum()


def processes() -> int:
    """How many processes DDP averages over: torch.distributed's world size, 1 without it."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def check_setup(args, model) -> str:
    """The weighting ("tokens" or "mean") of the run's loss; UserError for a setup the estimate cannot read."""
    loss_type = getattr(args, "loss_type", None)
    if loss_type is None:
        raise UserError("GradientNoiseCallback", f"needs TRL's GRPOConfig (args with a loss_type), got "
                        f"{type(args).__name__}", "add it to a TRL GRPOTrainer: GRPOTrainer(..., callbacks=["
                        "GradientNoiseCallback()])")
    if loss_type not in TOKEN_SUM_LOSSES + MEAN_LOSSES:
        raise UserError("loss_type", f"{loss_type!r} is not a loss whose micro-batch scaling this callback knows "
                        f"({', '.join(TOKEN_SUM_LOSSES + MEAN_LOSSES)})", "use one of those loss types")
    accumulation = getattr(args, "gradient_accumulation_steps", 1)
    if accumulation * processes() < 2:
        raise UserError("gradient_accumulation_steps", f"is {accumulation} on one process: the estimate needs at least "
                        "two micro-batches per step (a micro-batch is the small batch compared with the step)",
                        "set gradient_accumulation_steps >= 2 and divide per_device_train_batch_size to keep the "
                        "batch, or train on several processes")
    if getattr(args, "n_gpu", 1) > 1:
        raise UserError("GradientNoiseCallback", f"n_gpu is {args.n_gpu}: nn.DataParallel in one process sums the "
                        "GPUs' gradients inside the backward", "launch one process per GPU (torchrun or accelerate "
                        "launch): DDP, which this callback reads")
    if getattr(args, "deepspeed", None) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        raise UserError("GradientNoiseCallback", "DeepSpeed reduces and partitions the gradients in its own buffers, "
                        "out of reach of the parameters' hooks", FIX_MEASURE)
    fsdp_model = type(model).__name__ == "FullyShardedDataParallel" or any(
        type(p).__name__ == "DTensor" for p in model.parameters())
    if getattr(args, "fsdp", None) or os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" or fsdp_model:
        raise UserError("GradientNoiseCallback", "FSDP (or another sharding of the parameters into DTensors) "
                        "reduce-scatters each gradient inside the backward, so no process holds a micro-batch's whole "
                        "gradient", FIX_MEASURE)
    if getattr(args, "fp16", False):
        raise UserError("fp16", "the gradients carry the fp16 loss scale, which changes between steps",
                        "train with bf16 or float32 while measuring the gradient noise")
    if loss_type in TOKEN_SUM_LOSSES:
        generation = getattr(args, "steps_per_generation", None) or accumulation
        if generation < accumulation:
            raise UserError("steps_per_generation", f"{generation} < gradient_accumulation_steps {accumulation}: a "
                            f"step spans generation batches whose {loss_type} losses have different normalizers",
                            "set steps_per_generation >= gradient_accumulation_steps while measuring")
        forward = getattr(model, "forward", None)
        import inspect

        if forward is None or "logits_to_keep" not in inspect.signature(forward).parameters:
            raise UserError("GradientNoiseCallback", f"the model's forward takes no logits_to_keep, so the {loss_type} "
                            "loss's completion tokens cannot be told from the prompt's", "use a loss type of "
                            f"{', '.join(MEAN_LOSSES)}, or a model whose forward takes logits_to_keep")
    return "tokens" if loss_type in TOKEN_SUM_LOSSES else "mean"


def check_trl_version() -> None:
    """A warning when the installed TRL is not one this module's loss scalings were checked against."""
    try:
        version = metadata.version("trl")
    except metadata.PackageNotFoundError:
        return
    if version not in CHECKED_TRL:
        warnings.warn(f"GradientNoiseCallback was checked against TRL {', '.join(CHECKED_TRL)} (how GRPOTrainer "
                      f"scales a micro-batch's loss and calls the model); TRL {version} may differ: compare its "
                      "_compute_loss with the module docstring of batchscale.integrations.trl", stacklevel=3)


class GradientNoiseCallback(TrainerCallback):
    """Logs gns/grad_sq, gns/trace_sigma, gns/b_noise, time/generate and time/train into each training log entry
    (module docstring): `GRPOTrainer(..., callbacks=[GradientNoiseCallback()])` or `trainer.add_callback(...)`."""

    def __init__(self):
        self.ema = NoiseScaleEMA("actor")
        self.norms: MicroBatchNorms | None = None
        self.forwards: TrainingForwards | None = None
        self.processes = 1
        self.max_grad_norm = None
        self.window: list[dict] = []  # per step since the last log: gns terms and timers
        self.b_noise: dict = {}  # the EMA's last output
        self.last_step: dict = {}  # the latest step's estimator inputs, for tests and debugging
        self.stopped: str | None = None  # why the estimate stopped, if it did
        self._reset_step()

    # --- the Trainer's events ---------------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None:
            raise UserError("GradientNoiseCallback", "the Trainer passed no model to on_train_begin",
                            "add the callback to a transformers Trainer (TRL's GRPOTrainer)")
        weighting = check_setup(args, model)
        check_trl_version()
        self.processes = processes()
        self.max_grad_norm = getattr(args, "max_grad_norm", None) or None
        self.norms = MicroBatchNorms(model.parameters())
        self.forwards = TrainingForwards(model, weighting)

    def on_train_end(self, args, state, control, **kwargs):
        for hooks in (self.norms, self.forwards):
            if hooks is not None:
                hooks.remove()
        self.norms = self.forwards = None

    def on_step_begin(self, args, state, control, **kwargs):
        self._reset_step()
        if self.norms is not None:
            self.norms.discard()  # a backward outside the step (none in the Trainer) must not count
            self.forwards.take()

    def on_substep_end(self, args, state, control, **kwargs):
        self._end_micro_batch()

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self._end_micro_batch()
        record = {"time/generate": self.generate_s, "time/train": self.train_s}
        if self.norms is not None and self.stopped is None:
            record.update(self._estimate(model))
        self.window.append(record)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or "loss" not in logs or any(key.startswith("eval_") for key in logs):
            return
        entry = state.log_history[-1] if state is not None and state.log_history else None
        summary = self.window_summary()
        if entry is not None and all(entry.get(key) is value for key, value in logs.items()):  # the same values
            entry.update(summary)  # the dict trainer_state.json is written from
        logs.update(summary)  # what the callbacks after this one see

    # --- the estimate -------------------------------------------------------------------------------------------------

    def _estimate(self, model) -> dict:
        micro = self.norms.take()
        if not micro or len(micro) != len(self.micro_batches) or micro[-1][1] is None:
            return {}
        local = torch.stack([torch.stack([increment.double(), weight.double().to(increment.device),
                                          torch.tensor(float(rows), dtype=torch.float64, device=increment.device)])
                             for (increment, _), (rows, weight) in zip(micro, self.micro_batches)])  # (K, 3)
        table = gather_rows(local, self.processes)  # (P*K, 3), the step's one synchronization
        batch_sq = micro[-1][1].double().to(table.device)
        values = torch.cat([table.reshape(-1), batch_sq.reshape(1)]).tolist()
        batch_sq = values[-1]
        increments, weights, samples = values[0:-1:3], values[1:-1:3], [round(v) for v in values[2:-1:3]]
        self.last_step = {"increment_sq": increments, "weights": weights, "samples": samples, "batch_sq": batch_sq,
                          "processes": self.processes,
                          "chunk_grad_sq": micro_batch_grad_sq(increments, weights, self.processes)}
        self._check_reduced(model, batch_sq)
        if self.stopped is not None:
            return {}
        terms = step_noise_terms(increments, weights, samples, batch_sq, self.processes)
        if terms:
            self.b_noise = self.ema.observe(terms) or self.b_noise
        return terms

    def _check_reduced(self, model, batch_sq: float) -> None:
        """Where nothing was clipped, .grad now is the step's gradient: its norm must be the one read at the end of
        the last backward (module docstring)."""
        grads = [p.grad for p in self.norms.parameters if p.grad is not None]
        now_sq = float(_sum([_squared_norm(g) for g in grads])) if grads else 0.0
        clipped = self.max_grad_norm is not None and now_sq >= (CLIPPED_FRACTION * self.max_grad_norm) ** 2
        if not clipped and not math.isclose(now_sq, batch_sq, rel_tol=NORM_RTOL, abs_tol=1e-30):
            self.stopped = (f"the step's squared gradient norm {now_sq:.6g} is not the {batch_sq:.6g} read at the end "
                            "of its backward: a gradient reduction this callback does not see")
            warnings.warn(f"GradientNoiseCallback stops estimating: {self.stopped}", stacklevel=2)

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
        self.generate_s = self.train_s = 0.0
        self.micro_batches: list[tuple] = []  # (completions, weight tensor) per micro-batch

    def _end_micro_batch(self) -> None:
        now = time.perf_counter()
        rows, tokens, started = self.forwards.take() if self.forwards is not None else (0, None, None)
        if started is not None:
            self.generate_s += started - self.mark
            self.train_s += now - started
        else:
            self.generate_s += now - self.mark
        self.mark = now
        if self.norms is not None:
            self.norms.close()
        weight = torch.zeros((), dtype=torch.float64) if tokens is None else tokens.double()
        if self.forwards is not None and self.forwards.weighting == "mean":
            weight = (weight > 0).double()
        self.micro_batches.append((rows, weight))


def gather_rows(local: torch.Tensor, world: int) -> torch.Tensor:
    """Every process's (K, 3) rows stacked in rank order: (P*K, 3). The same K on every process (the Trainer runs
    the same number of micro-batches on each); NCCL gathers on the device, gloo on the CPU."""
    if world == 1:
        return local
    import torch.distributed as dist

    device = local.device if dist.get_backend() == "nccl" else torch.device("cpu")
    local = local.to(device)
    gathered = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(gathered, local)
    return torch.cat(gathered)
