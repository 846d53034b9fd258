"""batchscale.integrations.trl without TRL: the callback, made without a trainer and bound on on_train_begin, in a
stand-in for GRPOTrainer's step (tests/trl_standin.py: TRL 1.13's loss scalings and the model call, transformers'
event order). Its estimate equals the estimator on the micro-batches' own mean gradients, computed here independently,
with a hard clip in the way; the log entries (trainer_state's log_history) carry the keys; the training is unchanged;
a gradient changed behind its back stops it; what it refuses; and `import batchscale` still loads neither torch nor
transformers. Two processes under DDP: tests/test_trl_ddp.py; the real GRPOTrainer: tests/test_trl_grpo.py."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from transformers import TrainerControl, TrainerState

from batchscale.errors import UserError
from batchscale.integrations.trl import GradientNoiseCallback, step_noise_terms
from batchscale.telemetry.gradnoise import NoiseScaleEMA, estimate_noise_terms
from trl_standin import (TinyLM, log, make_micro_batches, own_mean_gradient, run_step, trainer_args,
                         trl_loss)

GNS = ("gns/grad_sq", "gns/trace_sigma")


def begin(args, model) -> GradientNoiseCallback:
    callback = GradientNoiseCallback()  # no trainer: bound to what on_train_begin hands over
    callback.on_train_begin(args, TrainerState(), TrainerControl(), model=model, optimizer=None, lr_scheduler=None)
    return callback


def loss_tokens(batches) -> int:
    return int(sum(b["completion_mask"].sum() for b in batches))


def expected_inputs(model, batches, loss_type: str) -> tuple[list[float], list[int], float]:
    """(|m_k|^2 of each micro-batch's own mean gradient, completions, |g|^2 of the step before clipping), computed
    without the callback."""
    own = [own_mean_gradient(model, b, loss_type) for b in batches]
    total = sum(trl_loss(model, b, loss_type, len(batches), 1, loss_tokens(batches)) for b in batches)
    step = torch.cat([g.reshape(-1) for g in torch.autograd.grad(total, list(model.parameters()))])
    return [float(m.square().sum()) for m in own], [b["completion_ids"].size(0) for b in batches], float(
        step.square().sum())


@pytest.mark.parametrize("loss_type,micro,rows", [("dapo", 2, 4), ("grpo", 2, 4), ("dapo", 3, 2)])
def test_logged_terms_are_the_estimator_on_the_micro_batches_own_gradients(loss_type, micro, rows):
    model = TinyLM()
    args = trainer_args(loss_type, micro, max_grad_norm=1e-3)  # clipped hard: the estimate uses the norm before it
    callback, state = begin(args, model), TrainerState()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    ema, expected = NoiseScaleEMA(), []
    for step in range(2):
        batches = make_micro_batches(10 + step, micro, rows)
        chunks, samples, batch_sq = expected_inputs(model, batches, loss_type)
        run_step(model, callback, batches, args, state, loss_tokens=loss_tokens(batches), optimizer=optimizer)
        got = callback.last_step
        assert got["chunk_grad_sq"] == pytest.approx(chunks, rel=1e-9)
        assert (got["samples"], got["processes"]) == (samples, 1)
        assert got["batch_sq"] == pytest.approx(batch_sq, rel=1e-9) and batch_sq > 1e-3 ** 2  # before the clip
        expected.append(estimate_noise_terms(chunks, samples, batch_sq, sum(samples)))
        b_noise = ema.observe(dict(zip(GNS, expected[-1])))
    entry = log(callback, args, state, {"loss": 0.5, "grad_norm": 1.0, "learning_rate": 1e-6})
    for i, key in enumerate(GNS):  # the window's mean over its two steps, in the log_history entry itself
        assert entry[key] == pytest.approx((expected[0][i] + expected[1][i]) / 2, rel=1e-9)
    want = b_noise["gns/b_noise"]  # None (not resolved) when the EMA of |G|^2 is not positive
    assert entry["gns/b_noise"] == (None if want is None else pytest.approx(want, rel=1e-9))
    assert entry["time/generate"] >= 0 and entry["time/train"] > 0 and entry["step"] == 2
    eval_entry = log(callback, args, state, {"eval_loss": 1.0})  # an eval entry gets nothing
    assert not any(key.startswith(("gns/", "time/")) for key in eval_entry)
    callback.on_train_end(args, state, TrainerControl())
    assert not model.embed._backward_hooks and not model._forward_pre_hooks


def test_gradients_are_unchanged_by_the_hooks():
    grads = []
    for with_callback in (False, True):
        model, args = TinyLM(), trainer_args("dapo", 3, max_grad_norm=0.0)
        batches = make_micro_batches(3, 3, 2)
        if with_callback:
            callback = begin(args, model)
            callback.on_step_begin(args, TrainerState(), TrainerControl())
        for k, inputs in enumerate(batches):
            trl_loss(model, inputs, "dapo", 3, 1, loss_tokens(batches)).backward()
            if with_callback and k < 2:
                callback.on_substep_end(args, TrainerState(), TrainerControl())
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_a_gradient_changed_behind_its_back_stops_the_estimate():
    model, args = TinyLM(), trainer_args("grpo", 2, max_grad_norm=0.0)
    callback, state = begin(args, model), TrainerState()
    batches = make_micro_batches(5, 2, 3)
    run_step(model, callback, batches, args, state, loss_tokens=loss_tokens(batches))
    assert "gns/grad_sq" in log(callback, args, state, {"loss": 0.1})

    def halve_then_pre_step(*a, **k):  # a reduction the callback does not see, between the backward and the step
        for p in model.parameters():
            p.grad.mul_(0.5)
        return original(*a, **k)

    original, callback.on_pre_optimizer_step = callback.on_pre_optimizer_step, halve_then_pre_step
    with pytest.warns(UserWarning, match="stops estimating"):
        run_step(model, callback, batches, args, state, loss_tokens=loss_tokens(batches))
    entry = log(callback, args, state, {"loss": 0.1})
    assert "gns/grad_sq" not in entry and "time/train" in entry and callback.stopped


def test_processes_scale_the_increments_to_the_micro_batches_own_means():
    assert step_noise_terms([1.0], [1.0], [4], 1.0) == {}
    assert step_noise_terms([1.0, 2.0], [1.0, 0.0], [4, 4], 1.0) == {}  # a micro-batch with no loss tokens
    terms = step_noise_terms([2.0, 4.0], [3.0, 1.0], [4, 4], 1.0, processes=2)  # weights 3/4, 1/4 over 2 processes
    assert terms["gns/grad_sq"] == pytest.approx(
        estimate_noise_terms([2.0 / 1.5 ** 2, 4.0 / 0.5 ** 2], [4, 4], 1.0, 8)[0])


class NoLogitsToKeep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))

    def forward(self, input_ids, attention_mask=None):
        return self.w


@pytest.mark.parametrize("overrides,field,model", [
    ({"gradient_accumulation_steps": 1}, "gradient_accumulation_steps", None),
    ({"loss_type": "mystery"}, "loss_type", None),
    ({"fp16": True}, "fp16", None),
    ({"n_gpu": 2}, "GradientNoiseCallback", None),
    ({"deepspeed": "ds_config.json"}, "GradientNoiseCallback", None),
    ({"fsdp": "full_shard"}, "GradientNoiseCallback", None),
    ({"steps_per_generation": 1, "gradient_accumulation_steps": 2}, "steps_per_generation", None),
    ({}, "GradientNoiseCallback", NoLogitsToKeep()),  # dapo needs the completion length
])
def test_setups_the_estimate_cannot_read_are_refused_before_the_first_step(overrides, field, model):
    args = trainer_args("dapo", 2)
    for key, value in overrides.items():
        setattr(args, key, value)
    with pytest.raises(UserError) as error:
        begin(args, model or TinyLM())
    assert error.value.field == field


def test_args_without_a_loss_type_are_refused():
    with pytest.raises(UserError, match="needs TRL's GRPOConfig"):
        begin(SimpleNamespace(gradient_accumulation_steps=2), TinyLM())


def test_batchscale_and_integrations_import_without_torch():
    code = ("import sys, batchscale, batchscale.integrations; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
