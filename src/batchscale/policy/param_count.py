"""The exact parameter count of a Hugging Face causal LM from its config.json alone, for any architecture transformers
knows: the model is built by transformers on torch's meta device (shapes only: no memory, no weights, no download)
and its parameters are counted, each shared tensor once (a tied LM head is the embedding).

systems/model_shapes.py keeps its Llama-block formula (ModelShape.params) as the count the torch-free reading side
uses (roofline, `plan --memory`, `systems`), which must not import torch. That formula is exact for the matmul
weights of Llama/Qwen/Mistral blocks and leaves out norm weights and Qwen2's q/k/v biases (under 0.1% of a layer); it
is not meant for other architectures (GPT-2's learned positions and biases, MoE experts). tests/test_param_count.py
checks the two agree on Llama shapes up to exactly those terms, and the exact count on a GPT-2 and a Qwen2 config
against hand counts.

Nothing a config names is executed: the class comes from the config's `model_type` through transformers' own table
(AutoConfig.for_model), never from `auto_map` / remote code; an unknown `model_type` is a UserError.
"""

from __future__ import annotations

from pathlib import Path

from batchscale.errors import UserError
from batchscale.systems.model_shapes import read_config_json


def count_params_exact(config: dict | str | Path) -> int:
    """Parameters of the causal LM `config` (a config.json's dict, or its path) describes, tied ones counted once."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = dict(config) if isinstance(config, dict) else read_config_json(config)[1]
    model_type = data.pop("model_type", None)
    for key in ("auto_map", "architectures", "transformers_version"):  # never code a file points at
        data.pop(key, None)
    try:
        hf_config = AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError, TypeError) as e:
        raise UserError("model_type", f"transformers cannot build {model_type!r} ({e})",
                        "pass the config.json of a causal LM transformers supports") from None
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
    except ValueError as e:  # a config class without a causal-LM head
        raise UserError("model_type", f"{model_type!r} has no causal LM in transformers ({e})",
                        "pass the config.json of a causal LM") from None
    return sum(p.numel() for p in model.parameters())  # parameters() yields a shared (tied) tensor once
