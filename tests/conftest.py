"""Shared fixtures: a small random-init model directory (no warm start) for fast trainer tests."""

from __future__ import annotations

import os

import pytest

# The engine times its decode plans at first use and caches the winner (rollout/tuning.py). The suite takes the
# untimed defaults, so that every run decodes the same way; tests/test_rollout_tuning.py times where it tests timing.
# BATCHSCALE_DECODE_TUNING=auto in the environment runs the whole suite on timed plans instead.
os.environ.setdefault("BATCHSCALE_DECODE_TUNING", "off")

# `heavy`: a test over a minute on 2 AVX2-only cores (each trains an example to its learning claim). The default run
# (`make test`, CI) skips them to stay under 15 minutes there; BATCHSCALE_TEST_HEAVY=1 (`make test-heavy`) runs them.
RUN_HEAVY = os.environ.get("BATCHSCALE_TEST_HEAVY") == "1"


def pytest_collection_modifyitems(config, items):
    if RUN_HEAVY:
        return
    skip = pytest.mark.skip(reason="heavy (over a minute on 2 AVX2 cores): BATCHSCALE_TEST_HEAVY=1 or make test-heavy")
    for item in items:
        if "heavy" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def random_model_dir(tmp_path_factory):
    """A 2-layer Llama with the built-in character tokenizer, saved like any local HF checkpoint."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from batchscale.policy.tokenizer import build_char_tokenizer

    path = tmp_path_factory.mktemp("random-model")
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def one_torch_thread():
    """Run a test on one torch thread (profilers measure; one thread keeps them quick and steady), then restore."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

