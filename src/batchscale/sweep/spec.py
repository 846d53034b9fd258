"""The sweep file: a base config, a grid of overrides, extra points, and seeds. Every point is validated up front.

    base = "grpo-tiny.toml"               # optional: a run config, relative to this file
    seeds = [0, 1]

    [set]                                 # overrides for every point (quoted dotted keys)
    "run.budget_samples" = 8192

    [grid]                                # the cartesian product of these lists
    "batch.prompts_per_step" = [4, 8, 16, 32, 64]

    [[points]]                            # extra points, each a small grid of its own (a list value expands)
    "batch.prompts_per_step" = 32
    "optim.lr_rule" = "none"

A point's run directory is `runs/<label>__s<seed>`, with the label from the resolved config (e.g. grpo-P16-G8-sqrt),
so seeds of one configuration share a label and analysis groups them.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from pathlib import Path

from batchscale.config import Config, derive_plan, read_toml, validate_config
from batchscale.errors import UserError

SWEEP_KEYS = {"base", "seeds", "set", "grid", "points"}


@dataclass(frozen=True)
class Point:
    name: str  # <label>__s<seed>, the run directory's name
    label: str
    seed: int
    config: Config

    @property
    def config_data(self) -> dict:
        return self.config.model_dump(mode="json")


def set_dotted(data: dict, key: str, value, where: str) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise UserError(f"{where}.{key}", f"{part} is a value, not a section", "override a leaf key like batch.prompts_per_step")
    node[parts[-1]] = value


def expand(table: dict, where: str) -> list[dict]:
    """{"a": [1, 2], "b": 3} -> [{"a": 1, "b": 3}, {"a": 2, "b": 3}]."""
    keys = list(table)
    values = [table[k] if isinstance(table[k], list) and not k.endswith("betas") else [table[k]] for k in keys]
    for key, options in zip(keys, values):
        if not options:
            raise UserError(f"{where}.{key}", "an empty list expands to no points", "give at least one value")
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def load_sweep(path: Path, overrides: list[str] = ()) -> list[Point]:
    path = Path(path)
    data = read_toml(path)
    unknown = set(data) - SWEEP_KEYS
    if unknown:
        raise UserError(f"{path.name}: {sorted(unknown)[0]}", "unknown key in a sweep file",
                        f"use {', '.join(sorted(SWEEP_KEYS))}; run settings go under [set]")
    base: dict = {}
    if "base" in data:
        base = read_toml(path.parent / data["base"])
    from batchscale.config import apply_overrides

    base = apply_overrides(base, list(overrides))
    for key, value in data.get("set", {}).items():
        set_dotted(base, key, value, "set")
    seeds = data.get("seeds", [base.get("run", {}).get("seed", 0)])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise UserError("seeds", f"must be a non-empty list of integers, got {seeds!r}", "write e.g. seeds = [0, 1]")
    combos = expand(data.get("grid", {}), "grid") if data.get("grid") else [{}]
    for i, extra in enumerate(data.get("points", [])):
        combos += expand(extra, f"points[{i}]")
    points: dict[str, Point] = {}
    for combo in combos:
        for seed in seeds:
            point_data = copy.deepcopy(base)
            for key, value in combo.items():
                set_dotted(point_data, key, value, "grid")
            set_dotted(point_data, "run.seed", seed, "seeds")
            config = _validate_point(point_data, combo, seed)
            label = derive_plan(config).label
            name = f"{label}__s{seed}"
            if name in points:
                raise UserError("grid", f"two points resolve to the same run {name}",
                                "give points that differ only in non-label keys a distinct run.label")
            points[name] = Point(name, label, seed, config)
    return list(points.values())


def _validate_point(point_data: dict, combo: dict, seed: int) -> Config:
    from batchscale.algorithms.specs import get_algorithm_spec

    name = point_data.get("algorithm", {}).get("name", "grpo")
    try:
        return validate_config(point_data, get_algorithm_spec(name).min_samples_per_prompt)
    except UserError as e:
        where = ", ".join(f"{k}={v}" for k, v in combo.items()) or "base"
        raise UserError(f"point ({where}, seed {seed}): {e.field}", e.rule, e.fix) from None
