"""batchscale.integrations.trl without TRL: the callback's estimate on micro-batches of known gradients (each loss is
linear in the parameters, so every increment is known exactly), under TRL's two loss scalings and a clip; its log keys
and EMA; what it refuses; and that `import batchscale` still loads neither torch nor transformers. The run with the real
GRPOTrainer is tests/test_trl_grpo.py."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from batchscale.errors import UserError
from batchscale.integrations.trl import GradientNoiseCallback, step_noise_terms
from batchscale.telemetry.gradnoise import NoiseScaleEMA, estimate_noise_terms

GNS = ("gns/grad_sq", "gns/trace_sigma")


class FakeTrainer:
    """What the callback touches of a GRPOTrainer: args, loss_type, model, compute_loss and log. A micro-batch's loss
    is <u, theta> / normalizer, so its gradient is u / normalizer exactly."""

    def __init__(self, loss_type="dapo", accumulation=2, **overrides):
        torch.manual_seed(0)
        self.model = torch.nn.Linear(3, 2, dtype=torch.float64)
        self.loss_type = loss_type
        self.args = SimpleNamespace(gradient_accumulation_steps=accumulation, world_size=1, n_gpu=1, deepspeed=None,
                                    fsdp="", fp16=False, **overrides)
        self.logged: list[dict] = []

    def parameters(self):
        return list(self.model.parameters())

    def compute_loss(self, model, inputs, num_items_in_batch=None):
        theta = torch.cat([p.reshape(-1) for p in model.parameters()])
        return (inputs["u"] * theta).sum() / inputs["normalizer"]

    def log(self, logs, start_time=None):
        self.logged.append(dict(logs))


def micro_batches(trainer, rows: list[int], tokens: list[int], rng) -> list[dict]:
    """One step's micro-batch inputs under TRL's scaling of `trainer.loss_type` (one process, S = K)."""
    size = sum(p.numel() for p in trainer.parameters())
    total = sum(tokens)
    batches = []
    for b, t in zip(rows, tokens):
        mask = torch.zeros(b, 5)
        mask.view(-1)[:t] = 1  # t loss tokens over b completions
        normalizer = total if trainer.loss_type == "dapo" else len(rows)  # dapo: N; grpo: K (u is then the mean)
        batches.append({"completion_mask": mask, "num_items_in_batch": torch.tensor(total),
                        "u": torch.tensor(rng.normal(size=size)), "normalizer": normalizer, "tokens": t, "rows": b})
    return batches


def run_step(trainer, callback, batches, clip: float | None = None) -> None:
    """The Trainer's event order for one optimizer step (transformers 5.24 `_inner_training_loop`)."""
    args, state, control = trainer.args, None, None
    callback.on_step_begin(args, state, control)
    for k, inputs in enumerate(batches):
        trainer.compute_loss(trainer.model, inputs).backward()
        if k < len(batches) - 1:
            callback.on_substep_end(args, state, control)
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(trainer.parameters(), clip)
    callback.on_pre_optimizer_step(args, state, control)


def expected_terms(trainer, batches) -> tuple[float, float]:
    """estimate_noise_terms on the micro-batches' own mean gradients (u / T_k for dapo, u for grpo)."""
    own = [b["u"] / (b["tokens"] if trainer.loss_type == "dapo" else 1) for b in batches]
    step = sum(b["u"] / b["normalizer"] for b in batches)
    return estimate_noise_terms([float(g.square().sum()) for g in own], [b["rows"] for b in batches],
                                float(step.square().sum()), sum(b["rows"] for b in batches))


@pytest.mark.parametrize("loss_type,rows,tokens", [("dapo", [4, 4], [7, 13]), ("grpo", [4, 4], [9, 9]),
                                                   ("dapo", [2, 2, 2], [3, 8, 5])])
def test_logged_terms_are_the_estimator_on_the_known_micro_batch_gradients(loss_type, rows, tokens):
    import numpy as np

    trainer = FakeTrainer(loss_type, accumulation=len(rows))
    callback = GradientNoiseCallback(trainer)
    callback.on_train_begin(trainer.args, None, None)
    rng = np.random.default_rng(1)
    steps = [micro_batches(trainer, rows, tokens, rng) for _ in range(2)]
    ema = NoiseScaleEMA()
    expected = []
    for batches in steps:
        trainer.model.zero_grad()
        run_step(trainer, callback, batches, clip=1e-3)  # clipped hard: the estimate must use the norm before it
        expected.append(expected_terms(trainer, batches))
        b_noise = ema.observe(dict(zip(GNS, expected[-1])))
    trainer.log({"loss": 0.5, "grad_norm": 1.0})
    logged = trainer.logged[-1]
    for i, key in enumerate(GNS):  # the window's mean over its two steps
        assert logged[key] == pytest.approx((expected[0][i] + expected[1][i]) / 2, rel=1e-5)
    want = b_noise["gns/b_noise"]  # None (not resolved) when the EMA of |G|^2 is not positive
    assert logged["gns/b_noise"] == (None if want is None else pytest.approx(want, rel=1e-5))
    assert logged["time/generate"] >= 0 and logged["time/train"] >= 0
    trainer.log({"eval_reward": 1.0})  # an eval entry gets nothing
    assert not any(key.startswith(("gns/", "time/")) for key in trainer.logged[-1])
    callback.on_train_end(trainer.args, None, None)
    assert "compute_loss" not in trainer.__dict__ and "log" not in trainer.__dict__


def test_gradients_are_unchanged_by_the_hooks():
    import numpy as np

    grads = []
    for with_callback in (False, True):
        trainer = FakeTrainer("dapo", accumulation=3)
        batches = micro_batches(trainer, [2, 2, 2], [4, 6, 5], np.random.default_rng(2))
        if with_callback:
            callback = GradientNoiseCallback(trainer)
            callback.on_train_begin(trainer.args, None, None)
            run_step(trainer, callback, batches)
        else:
            for inputs in batches:
                trainer.compute_loss(trainer.model, inputs).backward()
        grads.append([p.grad.clone() for p in trainer.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_a_step_without_two_weighted_micro_batches_has_no_estimate():
    assert step_noise_terms([1.0], [1.0], [4], 1.0) == {}
    assert step_noise_terms([1.0, 2.0], [1.0, 0.0], [4, 4], 1.0) == {}  # a micro-batch with no loss tokens
    terms = step_noise_terms([2.0, 4.0], [3.0, 1.0], [4, 4], 1.0)  # weights 3/4 and 1/4
    assert terms["gns/grad_sq"] == pytest.approx(
        estimate_noise_terms([2.0 / 0.75 ** 2, 4.0 / 0.25 ** 2], [4, 4], 1.0, 8)[0])


@pytest.mark.parametrize("overrides,field", [
    ({"accumulation": 1}, "gradient_accumulation_steps"),
    ({"loss_type": "mystery"}, "loss_type"),
    ({"fp16": True}, "fp16"),
    ({"world_size": 2}, "GradientNoiseCallback"),
])
def test_setups_the_estimate_cannot_read_are_refused(overrides, field):
    kwargs = {k: overrides[k] for k in ("loss_type", "accumulation") if k in overrides}
    trainer = FakeTrainer(**kwargs)
    for key in ("fp16", "world_size"):
        if key in overrides:
            setattr(trainer.args, key, overrides[key])
    with pytest.raises(UserError) as error:
        GradientNoiseCallback(trainer)
    assert error.value.field == field


def test_a_trainer_without_loss_type_is_refused():
    with pytest.raises(UserError, match="needs a TRL GRPOTrainer"):
        GradientNoiseCallback(SimpleNamespace(args=SimpleNamespace()))


def test_batchscale_and_integrations_import_without_torch():
    code = ("import sys, batchscale, batchscale.integrations; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
