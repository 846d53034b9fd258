"""The framework's own config, given (`--config`) or found beside the log: batch shape, lr, algorithm, model, task.

verl's Hydra writes the config to `.hydra/config.yaml` in the run's output directory; we look for `config.yaml` and
`.hydra/config.yaml` beside the log and `.hydra/config.yaml` one level up. A config found this way that cannot be read
is noted and ignored; one passed with `--config` must be readable. A JSON or YAML dump of OpenRLHF's arguments (old
flat names or the newer dotted ones) or of TRL's training arguments can be passed with `--config`. Nested mappings are
flattened to dotted keys, so `{"data": {"train_batch_size": 256}}` reads as `data.train_batch_size`.

Unresolved Hydra interpolations (`${...}`) and non-numbers are ignored with a note rather than guessed.
"""

from __future__ import annotations

import json
from pathlib import Path

from batchscale.errors import UserError

# run descriptor field -> framework -> config keys, first present wins.
CONFIG_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "prompts_per_step": {
        "verl": ("data.train_batch_size",),
        "openrlhf": ("rollout.batch_size", "rollout_batch_size"),
        "trl": (),  # TRL's prompts per step depend on the device count, which its files do not record
    },
    "samples_per_prompt": {
        "verl": ("actor_rollout_ref.rollout.n",),
        "openrlhf": ("rollout.n_samples_per_prompt", "n_samples_per_prompt"),
        "trl": ("num_generations",),
    },
    "lr": {
        "verl": ("actor_rollout_ref.actor.optim.lr",),
        "openrlhf": ("actor.adam.lr", "actor_learning_rate"),
        "trl": ("learning_rate",),
    },
    "algorithm": {"verl": ("algorithm.adv_estimator",), "openrlhf": ("advantage_estimator",), "trl": ()},
    "model": {"verl": ("actor_rollout_ref.model.path",), "openrlhf": ("pretrain",), "trl": ("model_name_or_path",)},
    "task": {"verl": ("data.train_files",), "openrlhf": ("prompt_data",), "trl": ("dataset_name",)},
    "seed": {"verl": ("data.seed",), "openrlhf": ("seed",), "trl": ("seed",)},
    # the updates a rollout batch feeds: verl splits it into mini-batches of ppo_mini_batch_size prompts (x n
    # responses each, verl multiplies by n itself) and passes over them ppo_epochs times
    "mini_batch_prompts": {"verl": ("actor_rollout_ref.actor.ppo_mini_batch_size",), "openrlhf": (), "trl": ()},
    "epochs": {"verl": ("actor_rollout_ref.actor.ppo_epochs",), "openrlhf": (), "trl": ()},
}
NUMERIC_FIELDS = {"prompts_per_step": int, "samples_per_prompt": int, "seed": int, "lr": float,
                  "mini_batch_prompts": int, "epochs": int}


def find_config_file(log_path: Path) -> Path | None:
    """verl's Hydra config beside the log: config.yaml or .hydra/config.yaml there, or ../.hydra/config.yaml."""
    base = log_path if log_path.is_dir() else log_path.parent
    for candidate in (base / "config.yaml", base / ".hydra" / "config.yaml", base.parent / ".hydra" / "config.yaml"):
        if candidate.is_file():
            return candidate
    return None


def flatten_mapping(mapping: dict, prefix: str = "") -> dict:
    """Nested dict -> {dotted.key: value}."""
    flat = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_mapping(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def read_config_file(config_path: Path) -> dict:
    """Flattened contents of a YAML or JSON config file; UserError when it cannot be read."""
    text = config_path.read_text()
    try:
        if config_path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml  # PyYAML: only needed for YAML configs

            data = yaml.safe_load(text)
    except ImportError:
        raise UserError(str(config_path), "reading YAML needs PyYAML", "pip install pyyaml, or pass JSON") from None
    except Exception as e:  # yaml.YAMLError or json.JSONDecodeError
        raise UserError(str(config_path), f"not valid YAML/JSON ({e})", "pass the framework's config file") from None
    if not isinstance(data, dict):
        raise UserError(str(config_path), "the config must be a mapping", "pass the framework's config file")
    return flatten_mapping(data)


def read_run_fields(config: dict, style: str, notes: list[str]) -> dict:
    """Run descriptor fields the config provides, e.g. {"prompts_per_step": 256, "lr": 1e-6}; skipped values are noted."""
    fields = {}
    for field_name, per_framework in CONFIG_KEYS.items():
        for key in per_framework.get(style, ()):
            if key not in config or config[key] is None:
                continue
            value = config[key]
            if isinstance(value, str) and "${" in value:
                notes.append(f"config {key} = {value!r} is an unresolved interpolation; ignored")
                break
            convert = NUMERIC_FIELDS.get(field_name)
            if convert is not None:
                try:
                    value = convert(value)
                except (TypeError, ValueError):
                    notes.append(f"config {key} = {value!r} is not a number; ignored")
                    break
            else:
                value = ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
            fields[field_name] = value
            break
    return fields
