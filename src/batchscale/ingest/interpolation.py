"""Hydra's `${...}` interpolations in a framework's config (verl's `.hydra/config.yaml` keeps them unresolved),
resolved with OmegaConf, the library Hydra and verl resolve them with, but only the kind that reads nothing but the
file itself and cannot grow.

Resolved: a value that is exactly one node reference, absolute or relative (`${data.train_batch_size}`,
`${.ppo_mini_batch_size}`, `${..lr}`, `${a.b[0]}`), followed through chains of such references to a scalar. This is how
verl's configs tie one batch size or learning rate to another, and how users override one key with another's value.

Left as written (the config reader then notes each one it needed as an unresolved interpolation and ignores it):
- any resolver call: `${oc.env:...}` (a hostile file must not read the environment into a run descriptor),
  `${oc.decode:...}`, Hydra's `${now:...}`, a custom `${name:...}`. No resolver is ever called: such a value is
  replaced by an inert placeholder before OmegaConf sees the config, so whatever resolvers this process has
  registered (OmegaConf's built-in ones, a user's) never run on a file's contents, and none is registered here;
- string interpolation (`"run_${trainer.n}"`): a chain of them can double a string's length at each level (an
  expansion bomb in a few lines), and no field batchscale reads is built that way;
- a reference to a mapping or list (each would copy a subtree: the same bomb), to a missing key, or around a cycle;
- every interpolation of a config with more than MAX_RESOLVED_VALUES values (OmegaConf's cost per value).

Departure from Hydra: Hydra resolves all of the above; batchscale resolves the safe subset and says so. Needs the
`import` extra (omegaconf); without it every interpolation stays unresolved, as before.
"""

from __future__ import annotations

import re

# ${path}: optional leading dots (relative), then keys separated by dots, or [index]; no ':' (a resolver) and no
# text around it (string interpolation)
NODE_REFERENCE = re.compile(r"\$\{\.*[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*|\[\d+\])*\}")
PLACEHOLDER = "<batchscale: not resolved>"
# OmegaConf builds a node per value (tens of microseconds each): a config larger than this (verl's whole config is
# about a thousand values) is left unresolved rather than let a file hold an import up for minutes
MAX_RESOLVED_VALUES = 10_000


def resolve_interpolations(data: dict) -> dict:
    """`data` with every safe node reference replaced by the scalar it points to (module docstring); every other
    value as it was. `data` itself is not changed."""
    references: list[tuple] = []
    try:
        inert = _inert_copy(data, (), references)
    except RecursionError:  # nested deeper than anything a framework writes: resolve nothing
        return data
    if not references or _count_values(inert) > MAX_RESOLVED_VALUES:
        return data
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:
        return data
    try:
        config = OmegaConf.create(inert)
    except Exception:  # a value or key OmegaConf cannot hold (a YAML timestamp, a null key): resolve nothing
        return data
    resolved = _copy(data)
    for path in references:
        try:
            node = config
            for key in path[:-1]:
                node = node[key]
            value = node[path[-1]]
        except Exception:  # a missing key, a cycle, a reference into a placeholder
            continue
        if isinstance(value, (DictConfig, ListConfig)) or value == PLACEHOLDER:
            continue
        target = resolved
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return resolved


def _inert_copy(value, path: tuple, references: list[tuple]):
    """A copy in which only node references remain interpolations (their paths collected); every other string with
    `${` becomes PLACEHOLDER."""
    if isinstance(value, dict):
        return {key: _inert_copy(item, (*path, key), references) for key, item in value.items()}
    if isinstance(value, list):
        return [_inert_copy(item, (*path, i), references) for i, item in enumerate(value)]
    if isinstance(value, str) and "${" in value:
        if NODE_REFERENCE.fullmatch(value):
            references.append(path)
            return value
        return PLACEHOLDER
    return value


def _count_values(value) -> int:
    if isinstance(value, dict):
        return sum(_count_values(item) for item in value.values()) + 1
    if isinstance(value, list):
        return sum(_count_values(item) for item in value) + 1
    return 1


def _copy(value):
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value
