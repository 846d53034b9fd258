"""Model shapes for the roofline: presets from public Hugging Face config.json files, or any Llama-style config.json.

Only what the roofline needs: hidden size, layers, query and key/value heads, head dim, MLP intermediate size,
vocabulary, maximum positions and whether the input embedding and LM head share one matrix. The layer is the Llama/Qwen
block: q/k/v/o projections (grouped-query attention) and a gated (SwiGLU) MLP with gate/up/down projections.

Parameter count per layer = hidden * (q_dim + 2 * kv_dim) + q_dim * hidden + 3 * hidden * intermediate, with
q_dim = heads * head_dim and kv_dim = kv_heads * head_dim. Departure: norm weights and Qwen2's q/k/v biases are not
counted (each under 0.1% of a layer), so counts run a hair under the published totals (Llama-3.1-8B: 8.03e9).
This formula stays because this side must not import torch; the exact count for any architecture (transformers on
the meta device) is policy/param_count.py, checked against it in tests/test_param_count.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import read_text_utf8


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_positions: int
    tied_embeddings: bool

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Matmul weights of one transformer block (attention projections + gated MLP)."""
        attention = self.hidden_size * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size
        return attention + mlp

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def params(self) -> int:
        """All weights held in memory: blocks + input embedding + LM head (one matrix when tied)."""
        heads = 1 if self.tied_embeddings else 2
        return self.num_layers * self.layer_params + heads * self.embedding_params

    @property
    def decode_weight_params(self) -> int:
        """Weights one decode step reads: every block and the LM head; the input embedding is a lookup of a few rows
        (counted once, as the LM head, when the two are tied)."""
        return self.params - (0 if self.tied_embeddings else self.embedding_params)

    def to_dict(self) -> dict:
        return {**asdict(self), "params": self.params}


def _shape(name, hidden, layers, heads, kv_heads, intermediate, vocab, max_positions, tied, head_dim=None) -> ModelShape:
    return ModelShape(
        name, hidden, layers, heads, kv_heads, head_dim or hidden // heads, intermediate, vocab, max_positions, tied
    )


# The built-in tiny model: mirrors policy/tiny.py's TINY_ARCHITECTURE (not imported: that module needs torch); vocab 99 =
# its character tokenizer (4 special tokens + 95 printable characters). Keep the two in step.
TINY_SHAPE = _shape("tiny", hidden=256, layers=4, heads=4, kv_heads=4, intermediate=688, vocab=99, max_positions=128,
                    tied=True)

# Values from each model's public config.json on the Hugging Face Hub (base models).
MODEL_PRESETS: dict[str, ModelShape] = {
    "Qwen2.5-0.5B": _shape("Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936, 32768, True),
    "Qwen2.5-1.5B": _shape("Qwen2.5-1.5B", 1536, 28, 12, 2, 8960, 151936, 131072, True),
    "Qwen2.5-7B": _shape("Qwen2.5-7B", 3584, 28, 28, 4, 18944, 152064, 131072, False),
    "Llama-3.1-8B": _shape("Llama-3.1-8B", 4096, 32, 32, 8, 14336, 128256, 131072, False),
    "Qwen3-8B": _shape("Qwen3-8B", 4096, 36, 32, 8, 12288, 151936, 40960, False, head_dim=128),
    "tiny": TINY_SHAPE,
}

_REQUIRED_FIELDS = [
    "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
    "max_position_embeddings",
]


def _positive_int(config: dict, key: str, path: Path) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{path}: {key}", f"must be a positive integer, got {value!r}", "fix the config.json")
    return value


def read_config_json(path: str | Path) -> tuple[Path, dict]:
    """A Hugging Face config.json (a file, or a directory holding one): its path and its JSON object."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise UserError("model", f"no config.json at {path}", "pass a preset name or a path to a config.json")
    try:
        config = json.loads(read_text_utf8(path, "model"))
    except (OSError, json.JSONDecodeError) as e:
        raise UserError("model", f"cannot read {path} as JSON ({e})", "pass a valid config.json") from None
    if not isinstance(config, dict):
        raise UserError("model", f"{path} is not a JSON object", "pass a Hugging Face config.json")
    return path, config


def load_config_json(path: str | Path) -> ModelShape:
    """Read a Llama/Qwen2/Qwen3/Mistral-style config.json (a file, or a directory holding one)."""
    path, config = read_config_json(path)
    config = {**config.get("text_config", {}), **config}  # multimodal configs nest the language model's fields
    for key in _REQUIRED_FIELDS:
        if config.get(key) is None:
            raise UserError(f"{path}: {key}", "required field is missing", f"add {key} to the config.json")
    hidden, heads = _positive_int(config, "hidden_size", path), _positive_int(config, "num_attention_heads", path)
    if config.get("num_key_value_heads") is None:
        config["num_key_value_heads"] = heads  # HF default: multi-head attention
    if config.get("head_dim") is None:  # derived: the heads must split the hidden size evenly
        if hidden % heads:
            raise UserError(f"{path}: num_attention_heads", f"{heads} heads do not divide hidden_size {hidden} (and "
                            "no head_dim is given)", "fix num_attention_heads or hidden_size, or add head_dim")
        config["head_dim"] = hidden // heads
    kv_heads = _positive_int(config, "num_key_value_heads", path)
    if heads % kv_heads:
        raise UserError(f"{path}: num_key_value_heads", f"{kv_heads} key/value heads do not divide the {heads} "
                        "attention heads (grouped-query attention shares each among a whole group)",
                        "fix num_key_value_heads to a divisor of num_attention_heads")
    return ModelShape(
        name=str(path),
        hidden_size=hidden,
        num_layers=_positive_int(config, "num_hidden_layers", path),
        num_heads=heads,
        num_kv_heads=_positive_int(config, "num_key_value_heads", path),
        head_dim=_positive_int(config, "head_dim", path),
        intermediate_size=_positive_int(config, "intermediate_size", path),
        vocab_size=_positive_int(config, "vocab_size", path),
        max_positions=_positive_int(config, "max_position_embeddings", path),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
    )


def get_model_shape(name_or_path: str) -> ModelShape:
    """A preset by name (case-insensitive), else a config.json path (file or directory)."""
    for key, shape in MODEL_PRESETS.items():
        if key.lower() == name_or_path.lower():
            return shape
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        return load_config_json(path)
    raise UserError(
        "model", f"unknown preset {name_or_path!r}", f"use one of {', '.join(MODEL_PRESETS)} or a path to a config.json"
    )
