"""Reading a config: TOML (or the defaults), then `--set` overrides, then validation: the schema's types and ranges
(`config.schema`, errors explained by `config.messages`), then the rules that span fields (`config.checks`). No side
effects."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from batchscale.config.checks import check_combinations
from batchscale.config.messages import explain_validation_error
from batchscale.config.schema import Config
from batchscale.errors import UserError
from batchscale.files import read_text_utf8


def parse_override(item: str, field: str = "--set") -> tuple[list[str], Any]:
    """'a.b=value' -> (['a', 'b'], value), the value read as a TOML value when it is one ('64', '1e-4', 'true'),
    else kept as a plain string ('sqrt'). `field`: how an error names where the item came from."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise UserError(field, f"{item!r} is not of the form dotted.key=value", "write e.g. batch.prompts_per_step=64")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError("--set", f"{item!r}: {part} is a value, not a section", "override a leaf key")
        node[path[-1]] = value
    return data


def validate_config(data: dict) -> Config:
    """The config of `data` (a TOML document's tables), its types, ranges and cross-field rules checked."""
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        raise explain_validation_error(e.errors(), Config) from None
    check_combinations(cfg)
    return cfg


def read_toml(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise UserError("CONFIG", f"no config file at {path}", "pass the path of a TOML file, e.g. examples/grpo-tiny.toml")
    try:
        return tomllib.loads(read_text_utf8(path))
    except tomllib.TOMLDecodeError as e:
        raise UserError(str(path), f"is not valid TOML ({e})", "fix the syntax at the line named") from None


def load_config(path: Path | None, overrides: list[str] = ()) -> Config:
    """Read TOML (or start from defaults), apply --set overrides, validate. No side effects."""
    data = read_toml(path) if path is not None else {}
    return validate_config(apply_overrides(data, list(overrides)))
