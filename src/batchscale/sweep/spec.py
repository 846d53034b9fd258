"""The sweep file: a base config, a grid of overrides, extra points, and seeds. Every point is validated up front.

    base = "grpo-tiny.toml"               # optional: a run config, relative to this file
    seeds = [0, 1]

    [set]                                 # overrides for every point (quoted dotted keys); a --set on the
                                          # command line wins over it, and may not name a key the sweep varies
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

from batchscale.config import BatchPlan, Config, derive_plan, read_toml, validate_config
from batchscale.errors import UserError
from batchscale.rundir import run_dir_name

SWEEP_KEYS = {"base", "seeds", "set", "grid", "points"}


@dataclass(frozen=True)
class Point:
    name: str  # <label>__s<seed>, the run directory's name
    label: str
    seed: int
    config: Config
    plan: BatchPlan  # derive_plan(config), derived once when the point is made

    @classmethod
    def of(cls, config: Config) -> "Point":
        """The point that trains `config`: its plan derived, its name and label from the plan."""
        plan = derive_plan(config)
        return cls(run_dir_name(plan.label, config.run.seed), plan.label, config.run.seed, config, plan)

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
    if isinstance(value, dict):  # TOML read "a.b" = {...} or an unquoted a.b = ... as a table
        raise UserError(f"{where}.{key}", f"must be a value, got the table {value!r:.60}",
                        'quote dotted keys: "batch.prompts_per_step" = 8')
    node[parts[-1]] = value


def expand(table: dict, where: str) -> list[dict]:
    """{"a": [1, 2], "b": 3} -> [{"a": 1, "b": 3}, {"a": 2, "b": 3}]."""
    keys = list(table)
    values = [table[k] if isinstance(table[k], list) and not k.endswith("betas") else [table[k]] for k in keys]
    for key, options in zip(keys, values):
        if not options:
            raise UserError(f"{where}.{key}", "an empty list expands to no points", "give at least one value")
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


# What each top-level key must be: (python type, how the message names it, an example)
SWEEP_KEY_TYPES = {
    "base": (str, "a string (a run config's path, relative to the sweep file)", 'base = "grpo-tiny.toml"'),
    "seeds": (list, "an array of integers >= 0", "seeds = [0, 1]"),
    "set": (dict, "a table of dotted keys", '[set] then "run.budget_samples" = 8192'),
    "grid": (dict, "a table of dotted keys to arrays", '[grid] then "batch.prompts_per_step" = [4, 8]'),
    "points": (list, "an array of tables", '[[points]] then "optim.lr_rule" = "none"'),
}


def check_sweep_types(data: dict, path: Path) -> None:
    """Every top-level key of a sweep file has the type it must have, and so does every point."""
    for key, (kind, expected, example) in SWEEP_KEY_TYPES.items():
        if key in data and not isinstance(data[key], kind):
            raise UserError(f"{path.name}: {key}", f"must be {expected}, got {type(data[key]).__name__} "
                            f"{data[key]!r:.60}", f"write e.g. {example}")
    for i, point in enumerate(data.get("points", [])):
        if not isinstance(point, dict):
            raise UserError(f"{path.name}: points[{i}]", f"must be a table of dotted keys, got "
                            f"{type(point).__name__} {point!r:.60}", 'write [[points]] then "optim.lr_rule" = "none"')
    seeds = data.get("seeds")
    if seeds is not None and (not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                   for s in seeds)):
        raise UserError(f"{path.name}: seeds", f"must be a non-empty array of integers >= 0, got {seeds!r:.60}",
                        "write e.g. seeds = [0, 1]")


def load_sweep_spec(path: Path, overrides: list[str] = ()) -> list[Point]:
    path = Path(path)
    data = read_toml(path)
    unknown = set(data) - SWEEP_KEYS
    if unknown:
        raise UserError(f"{path.name}: {sorted(unknown)[0]}", "unknown key in a sweep file",
                        f"use {', '.join(sorted(SWEEP_KEYS))}; run settings go under [set]")
    check_sweep_types(data, path)
    base: dict = {}
    if "base" in data:
        base = read_toml(path.parent / data["base"])
    from batchscale.config import apply_overrides

    for key, value in data.get("set", {}).items():
        set_dotted(base, key, value, "set")
    check_overrides_not_swept(overrides, data)
    base = apply_overrides(base, list(overrides))  # the command line wins over the file's [set] and base
    run_section = base.get("run", {})
    seeds = data.get("seeds", [run_section.get("seed", 0) if isinstance(run_section, dict) else 0])
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
            point = Point.of(_validate_point(point_data, combo, seed))
            if point.name in points:
                raise UserError("grid", f"two points resolve to the same run {point.name}",
                                "give points that differ only in non-label keys a distinct run.label")
            points[point.name] = point
    return list(points.values())


def check_overrides_not_swept(overrides: list[str], data: dict) -> None:
    """A --set key the sweep file varies ([grid], [[points]], seeds) cannot win for every point without merging
    them: an error, never one side silently dropped."""
    from batchscale.config import parse_override

    swept = set(data.get("grid", {}))
    for extra in data.get("points", []):
        swept |= set(extra)
    if "seeds" in data:
        swept.add("run.seed")
    for item in overrides:
        key = ".".join(parse_override(item)[0])
        if key in swept:
            raise UserError(f"--set {key}", "is a key the sweep file varies ([grid], [[points]] or seeds), so one "
                            "value for every point would merge them", f"drop --set {key}, or change the sweep file")


def _validate_point(point_data: dict, combo: dict, seed: int) -> Config:
    try:
        return validate_config(point_data)
    except UserError as e:
        where = ", ".join(f"{k}={v}" for k, v in combo.items()) or "base"
        raise UserError(f"point ({where}, seed {seed}): {e.field}", e.rule, e.fix) from None
