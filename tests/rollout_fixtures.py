"""One small GRPO-shaped rollout on the random test model, shared by the update tests (equivalence, precision, the
gradient-noise chunks): P = 3 prompts x G = 4 responses of 1 to 5 tokens plus eos, so micro-batches pad differently.
A test module imports the fixtures it uses by name (`from rollout_fixtures import policy, rollout`); the update tests
run the trainer's own update (`Actor.update`, `Critic.update`) on `batch_plan` and read the gradient each optimizer
step applied with `update_with_gradients`."""

from __future__ import annotations

import pytest
import torch

from batchscale.config import ModelConfig, TaskConfig, derive_plan, load_config
from batchscale.policy.load import load_policy
from batchscale.policy.sequences import SequenceBatch, collate


def load_random_policy(model_dir):
    return load_policy(ModelConfig(name=str(model_dir)), TaskConfig(), log=lambda s: None)


def grouped_rollout(tokenizer) -> tuple[SequenceBatch, torch.Generator]:
    """The batch, and the generator that drew it (callers draw their rewards from it next, as they always did)."""
    g = torch.Generator().manual_seed(0)
    prompts, responses = [], []
    for p in range(3):
        for _ in range(4):
            prompts.append(tokenizer(f"{p + 10}+{p * 7}=")["input_ids"])
            length = int(torch.randint(1, 6, (1,), generator=g))
            responses.append(torch.randint(4, 20, (length,), generator=g).tolist() + [tokenizer.eos_token_id])
    return collate(prompts, responses, tokenizer.pad_token_id), g


@pytest.fixture(scope="module")
def policy(random_model_dir):
    return load_random_policy(random_model_dir)


@pytest.fixture(scope="module")
def rollout(policy):
    """The grouped rollout with rewards uniform in [0, 1)."""
    batch, g = grouped_rollout(policy.tokenizer)
    return batch, torch.rand(12, generator=g)


def batch_plan(micro_batch_size: int, *overrides: str):
    """The batch plan (config.BatchPlan) of an update of this rollout: P = 3 x G = 4, B_ref = 12."""
    return derive_plan(load_config(None, ["batch.prompts_per_step=3", "batch.samples_per_prompt=4",
                                          f"batch.micro_batch_size={micro_batch_size}",
                                          "batch.reference_samples_per_step=12", *overrides]))


def update_with_gradients(network, *inputs) -> tuple[dict, list[list[torch.Tensor]]]:
    """`network.update(*inputs)` (train.actor.Actor or train.critic.Critic): its statistics, and the gradient each of
    its optimizer steps applied (after clipping, if the network clips), read by a hook just before the step."""
    grads = []
    hook = network.optimizer.register_step_pre_hook(
        lambda optimizer, args, kwargs: grads.append([p.grad.clone() for p in network.model.parameters()]))
    try:
        stats = network.update(*inputs)
    finally:
        hook.remove()
    return stats, grads
