"""Reading a config: TOML (or the defaults), then `--set` overrides, then validation: the schema's types and ranges
(`config.schema`, errors explained by `config.messages`), then the rules that span fields (`config.checks`). No side
effects."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

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
    except ValueError as e:  # valid TOML that Python will not build: an integer of more than 4,300 digits
        raise UserError(f"{field} {key.strip()}", f"its value cannot be read ({str(e).split(';')[0]})",
                        "give a value in the range the key allows") from None
    return key.strip().split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Each `dotted.key=value` set in `data`. An inline table given to a section (`run={budget_samples=8}`) is
    merged into it key by key, as if each were set alone: a --set changes what it names and never drops the
    section's other keys (the file's run.out_dir, say). A table given to a key whose value is a table
    (`task.params={...}`) replaces it: that table is one value."""
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError("--set", f"{item!r}: {part} is a value, not a section", "override a leaf key")
        merge_value(node, path, value)
    return data


def merge_value(node: dict, path: list[str], value) -> None:
    """node[path[-1]] = value, merged key by key where path names a section of Config (apply_overrides)."""
    key = path[-1]
    if isinstance(value, dict) and isinstance(node.get(key), dict) and is_section(path):
        for inner, item in value.items():
            merge_value(node[key], [*path, inner], item)
    else:
        node[key] = value


def is_section(path: list[str]) -> bool:
    model: type[BaseModel] = Config
    for part in path:
        field = model.model_fields.get(part)
        if field is None or not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return False
        model = field.annotation
    return True


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
    except ValueError as e:  # valid TOML that Python will not build: an integer of more than 4,300 digits
        raise UserError(str(path), f"holds a value that cannot be read ({str(e).split(';')[0]})",
                        "give every key a value in the range it allows") from None


def load_config(path: Path | None, overrides: list[str] = ()) -> Config:
    """Read TOML (or start from defaults), apply --set overrides, validate. No side effects."""
    data = read_toml(path) if path is not None else {}
    return validate_config(apply_overrides(data, list(overrides)))
