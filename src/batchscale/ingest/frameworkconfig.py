"""The framework's own config, given (`--config`) or found beside the log: batch shape, lr, algorithm, model, task.

verl's Hydra writes the config to `.hydra/config.yaml` in the run's output directory, while the file logger writes to
`<project>/<experiment>.jsonl` under the working directory (verl/utils/tracking.py `FileLogger`); find_config_file
looks in both places. A console log carries the config itself (verl_console.py); a W&B run folder its `config.yaml`
(unwrapped from W&B's `{value: ...}` layout). A config found this way that cannot be read
is noted and ignored; one passed with `--config` must be readable. A JSON or YAML dump of OpenRLHF's arguments (old
flat names or the newer dotted ones) or of TRL's training arguments can be passed with `--config`. Nested mappings are
flattened to dotted keys, so `{"data": {"train_batch_size": 256}}` reads as `data.train_batch_size`.

Unresolved Hydra interpolations (`${...}`) and non-numbers are ignored with a note rather than guessed.
"""

from __future__ import annotations

import json
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.inputs import read_input_text
from batchscale.ingest.newer_frameworks import CONFIG_KEYS as NEWER_CONFIG_KEYS
from batchscale.ingest.trl_batch import decide_trl_prompts

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
for _style, _fields in NEWER_CONFIG_KEYS.items():
    for _field, _keys in _fields.items():
        CONFIG_KEYS[_field][_style] = _keys
# verl's fully-async trainer (experimental/fully_async_policy, b178a3c): data.train_batch_size is 0, and one logged
# step (a parameter version) trains trigger_parameter_sync_step x require_batches mini-batches of
# ppo_mini_batch_size prompts (docs/advance/fully_async.md)
FULLY_ASYNC_KEYS = ("async_training.trigger_parameter_sync_step", "async_training.require_batches",
                    "actor_rollout_ref.actor.ppo_mini_batch_size")
HYDRA_LEVELS_UP = 3
MAX_CONFIG_BYTES = 16 * 2**20
MAX_CONFIG_KEYS = 100_000
MAX_YAML_ALIASES = 100
NUMERIC_FIELDS = {"prompts_per_step": int, "samples_per_prompt": int, "seed": int, "lr": float,
                  "mini_batch_prompts": int, "epochs": int}


def find_config_file(log_path: Path, notes: list[str]) -> Path | None:
    """verl's Hydra config for a log: `config.yaml` or `.hydra/config.yaml` beside it, `.hydra/config.yaml` in a
    directory above it (up to HYDRA_LEVELS_UP), or, for the file logger's default path `<cwd>/<project>/<experiment>.jsonl`,
    the latest `<cwd>/outputs/<date>/<time>/.hydra/config.yaml` whose trainer.project_name and experiment_name match."""
    base = log_path if log_path.is_dir() else log_path.parent
    candidates = [base / "config.yaml", base / ".hydra" / "config.yaml"]
    candidates += [above / ".hydra" / "config.yaml" for above in list(base.parents)[:HYDRA_LEVELS_UP]]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if log_path.is_dir():
        return None
    matches = [c for c in sorted((base.parent / "outputs").glob("*/*/.hydra/config.yaml"))
               if names_run(c, project=base.name, experiment=log_path.stem)]
    if len(matches) > 1:
        notes.append(f"{len(matches)} Hydra configs in {base.parent / 'outputs'} name this project and experiment; "
                     f"the latest ({matches[-1].parent.parent}) was used")
    return matches[-1] if matches else None


def names_run(config_path: Path, project: str, experiment: str) -> bool:
    """True when a Hydra config's trainer.project_name / experiment_name are `project` / `experiment`."""
    try:
        config = read_config_file(config_path)
    except UserError:
        return False
    return config.get("trainer.project_name") == project and config.get("trainer.experiment_name") == experiment


def flatten_mapping(mapping: dict, prefix: str = "") -> dict:
    """Nested dict -> {dotted.key: value}; more than MAX_CONFIG_KEYS keys (a config this large is no framework's,
    and YAML aliases can make a tiny file expand without bound) is a ValueError."""
    flat: dict = {}
    stack = [(prefix, iter(mapping.items()))]  # depth first, in the mapping's order, without recursion
    while stack:
        base, items = stack[-1]
        entry = next(items, None)
        if entry is None:
            stack.pop()
            continue
        key, value = entry
        if isinstance(value, dict):
            stack.append((f"{base}{key}.", iter(value.items())))
        else:
            flat[f"{base}{key}"] = value
        if len(flat) + len(stack) > MAX_CONFIG_KEYS:
            raise ValueError(f"more than {MAX_CONFIG_KEYS} config keys")
    return flat


def read_config_file(config_path: Path) -> dict:
    """Flattened contents of a YAML or JSON config file; UserError when it cannot be read. YAML is parsed with at
    most MAX_YAML_ALIASES aliases (Hydra and W&B write none), so an alias bomb is refused, not expanded."""
    text = read_input_text(config_path, max_bytes=MAX_CONFIG_BYTES)
    try:
        if config_path.suffix == ".json":
            data = json.loads(text)
        else:
            data = load_yaml_bounded(text)
    except ImportError:
        raise UserError(str(config_path), "reading YAML needs PyYAML", "pip install pyyaml, or pass JSON") from None
    except TooManyAliases:
        raise UserError(str(config_path), f"uses more than {MAX_YAML_ALIASES} YAML aliases (an alias bomb?)",
                        "pass the config the framework wrote (Hydra's config.yaml has no aliases)") from None
    except Exception as e:  # yaml.YAMLError or json.JSONDecodeError
        raise UserError(str(config_path), f"not valid YAML/JSON ({e})", "pass the framework's config file") from None
    if not isinstance(data, dict):
        raise UserError(str(config_path), "the config must be a mapping", "pass the framework's config file")
    try:
        return flatten_mapping(unwrap_wandb_config(data))
    except ValueError as e:
        raise UserError(str(config_path), f"expands to {e}", "pass the config the framework wrote") from None


class TooManyAliases(Exception):
    pass


def load_yaml_bounded(text: str):
    """yaml.safe_load, refusing more than MAX_YAML_ALIASES alias nodes (TooManyAliases)."""
    import yaml  # PyYAML: only needed for YAML configs

    class BoundedLoader(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    raise TooManyAliases
            return super().compose_node(parent, index)

    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def unwrap_wandb_config(data: dict) -> dict:
    """A W&B run's `files/config.yaml` holds each top-level key of the logged config as `{value: ...}` (older
    clients: `{desc: null, value: ...}`), beside `_wandb` and `wandb_version`; other mappings are returned as they
    are."""
    if "_wandb" not in data:
        return data
    return {key: item["value"] for key, item in data.items()
            if key not in ("_wandb", "wandb_version") and isinstance(item, dict) and "value" in item}


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
    if style == "trl" and "prompts_per_step" not in fields:
        derive_trl_prompts(config, fields, notes)
    if style == "verl" and not fields.get("prompts_per_step") and all(key in config for key in FULLY_ASYNC_KEYS):
        derive_fully_async_prompts(config, fields, notes)
    if style == "verl" and "samples_per_prompt" not in fields and "actor_rollout_ref.rollout.name" in config \
            and "actor_rollout_ref.rollout.n" not in config:
        fields["samples_per_prompt"] = 1
        notes.append("the config's rollout section has no n (verl before 2025-01-05, ppo_trainer.yaml): one response "
                     "per prompt, G = 1")
    return fields


def derive_trl_prompts(config: dict, fields: dict, notes: list[str]) -> None:
    """TRL's P from its training arguments, the batch's unit decided from the evidence (trl_batch.py)."""
    decide_trl_prompts(config, fields, notes)


def derive_fully_async_prompts(config: dict, fields: dict, notes: list[str]) -> None:
    """P of one logged step of verl's fully-async trainer (FULLY_ASYNC_KEYS): the prompts of the mini-batches it
    trains between two parameter syncs; updates_per_step follows from mini_batch_prompts."""
    try:
        trigger, require, mini_batch = (int(config[key]) for key in FULLY_ASYNC_KEYS)
    except (TypeError, ValueError):
        return
    if min(trigger, require, mini_batch) < 1:
        return
    fields["prompts_per_step"] = trigger * require * mini_batch
    notes.append(f"fully-async verl: a logged step is one parameter version, trigger_parameter_sync_step {trigger} x "
                 f"require_batches {require} x ppo_mini_batch_size {mini_batch} = {fields['prompts_per_step']} prompts "
                 "(data.train_batch_size is not used)")
