"""bf16 autocast training (`train.precision`, `optim.compute_dtype`): chosen by the hardware unless overridden, float32
master weights, gradients and Adam state, and an update that stays within bf16 tolerance of the float32 one.

Tiny shapes only: on a CPU without native bf16 torch emulates the bf16 matmuls."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from rollout_fixtures import batch_plan, grouped_rollout, policy, update_with_gradients  # noqa: F401  (policy: a fixture)

from batchscale import device
from batchscale.algorithms.advantages import AdvantageInputs, grpo_advantages
from batchscale.config import OptimConfig, load_config
from batchscale.errors import UserError
from batchscale.policy.forward import token_logprobs
from batchscale.train.actor import Actor
from batchscale.train.critic import Critic, build_value_model
from batchscale.train.loop import train
from batchscale.train.optimizer import build_optimizer
from batchscale.train.precision import autocast, resolve_training_dtype

BF16, F32 = torch.bfloat16, torch.float32
LR = 1e-3
# bf16 keeps 8 significant bits: one rounding is within 2^-8 relative. Through a 2-layer forward and backward the
# gradient moves by ~0.5% of its norm (measured 0.55%); the bound leaves 4x room and still fails a wrong-dtype loss.
GRADIENT_GAP_BOUND = 2e-2
LOGPROB_GAP_BOUND = 2e-2  # nats, per token (measured 0.003)


@pytest.fixture(scope="module")
def rollout(policy):
    batch, g = grouped_rollout(policy.tokenizer)
    advantages = grpo_advantages(AdvantageInputs(torch.rand(12, generator=g), batch.response_mask, 4))
    return batch, advantages


@pytest.mark.parametrize("native, expected", [(True, BF16), (False, F32)])
def test_auto_follows_the_cpu_and_explicit_values_override_it(monkeypatch, native, expected):
    monkeypatch.setattr(device, "native_bf16_cpu", lambda: native)
    assert resolve_training_dtype("auto", F32, "cpu") == expected
    assert resolve_training_dtype("float32", F32, "cpu") == F32
    assert resolve_training_dtype("bfloat16", F32, "cpu") == BF16
    assert resolve_training_dtype("auto", BF16, "cpu") == BF16  # bf16 weights: no float32 master copy to autocast from


def test_config_accepts_the_three_values_and_rejects_float32_arithmetic_on_bf16_weights():
    for value in ("auto", "float32", "bfloat16"):
        assert load_config(None, [f"optim.compute_dtype='{value}'"]).optim.compute_dtype == value
    assert OptimConfig().compute_dtype == "auto"
    with pytest.raises(UserError, match="optim.compute_dtype"):
        load_config(None, ["optim.compute_dtype='float16'"])
    with pytest.raises(UserError, match="model.dtype = 'float32'"):
        load_config(None, ["optim.compute_dtype='float32'", "model.dtype='bfloat16'"])


def update(policy, rollout, compute_dtype):
    """One actor update; returns the gradient, the parameter change and the optimizer it used."""
    batch, advantages = rollout
    model = copy.deepcopy(policy.model)
    optimizer = build_optimizer(model.parameters(), OptimConfig(eps=1e-6), LR)
    actor = Actor(model, optimizer, batch_plan(4), 0.2, None, "token-mean", compute_dtype=compute_dtype)
    _, (grads,) = update_with_gradients(actor, batch, advantages)
    grad = torch.cat([g.flatten() for g in grads])
    assert all(g.dtype == F32 for g in grads)
    assert all(p.dtype == F32 for p in model.parameters())  # master weights stay float32
    step = torch.cat([(p - q).flatten() for p, q in zip(model.parameters(), policy.model.parameters())]).detach()
    return grad, step, optimizer


def test_bf16_update_stays_within_bf16_tolerance_of_float32(policy, rollout):
    grad_32, step_32, _ = update(policy, rollout, F32)
    grad_16, step_16, optimizer = update(policy, rollout, BF16)
    assert all(v.dtype == F32 for state in optimizer.state.values() for v in state.values() if v.is_floating_point())
    gap = float((grad_16 - grad_32).norm() / grad_32.norm())
    assert 1e-4 < gap < GRADIENT_GAP_BOUND  # > 1e-4: autocast did run in bf16 (float32 reorderings give ~1e-6)
    # Adam's first step is lr * g / (|g| + eps): an entry whose gradient is within bf16 noise of 0 may flip sign, so
    # the step is compared where the float32 gradient stands clear of that noise (above 1e-3 of the largest entry)
    # Even there a few entries are differences of micro-batch terms that cancel in 8 bits (measured: one entry in
    # 59,192, where two micro-batches' bf16 terms of -+0.0173 sum to exactly 0 against float32's 2.9e-4), so the step
    # must agree to 5% of lr on all but 1 in 1,000 of them
    clear = grad_32.abs() > 1e-3 * grad_32.abs().max()
    assert clear.float().mean() > 0.5
    off = (step_16 - step_32)[clear].abs() > 0.05 * LR
    assert float(off.float().mean()) < 1e-3


def test_bf16_logprobs_and_values_stay_within_tolerance(policy, rollout):
    batch, _ = rollout
    with torch.no_grad():
        logp_32 = token_logprobs(policy.model, batch)
        with autocast(BF16, "cpu"):
            logp_16 = token_logprobs(policy.model, batch)
    assert logp_16.dtype == F32
    assert 0 < float((logp_16 - logp_32).abs().max()) < LOGPROB_GAP_BOUND


def test_bf16_critic_gradient_stays_within_tolerance(policy, rollout):
    batch, _ = rollout
    torch.manual_seed(0)
    critic = build_value_model(policy.model)
    with torch.no_grad():
        values_old = critic(batch.input_ids, batch.attention_mask)[:, :-1] * batch.response_mask  # (N, L-1)
    # the value-loss gradient is V - R: bf16 moves V by ~2^-8 of |V|, so the relative gap scales with |V| / |V - R|
    # (about 0.1 / 1 here; with values 50x larger and returns 0.3 away the gap reaches ~9%)
    returns = values_old + batch.response_mask
    grads = {}
    for dtype in (F32, BF16):
        model = copy.deepcopy(critic)
        network = Critic(model, build_optimizer(model.parameters(), OptimConfig(), LR), batch_plan(4), None, None,
                         "token-mean", compute_dtype=dtype)
        _, (step_grads,) = update_with_gradients(network, batch, values_old, returns)
        grads[dtype] = torch.cat([g.flatten() for g in step_grads])
        assert all(g.dtype == F32 for g in step_grads)
    gap = float((grads[BF16] - grads[F32]).norm() / grads[F32].norm())
    assert 1e-4 < gap < GRADIENT_GAP_BOUND


@pytest.mark.parametrize("compute_dtype", ["bfloat16", "auto"])
def test_trainer_records_the_arithmetic_it_trained_in(random_model_dir, tmp_path, compute_dtype):
    cfg = load_config(None, [
        f"model.name='{random_model_dir}'", "batch.prompts_per_step=2", "batch.samples_per_prompt=2",
        "batch.micro_batch_size=2", "batch.reference_samples_per_step=4", "run.budget_samples=4",
        "run.eval_every_samples=4", "task.eval_size=4", "sampling.max_new_tokens=3", "run.threads=1",
        f"optim.compute_dtype='{compute_dtype}'"])
    summary = train(cfg, tmp_path / "run", log=lambda s: None)
    expected = "bfloat16" if compute_dtype == "bfloat16" or device.native_bf16_cpu() else "float32"
    assert summary["machine"]["train_compute_dtype"] == expected
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["machine"]["train_compute_dtype"] == expected
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["samples"] for r in records if r["kind"] == "step"] == [4]
