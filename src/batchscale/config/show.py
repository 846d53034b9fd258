"""The resolved config as TOML a person reads and a run loads back: `batchscale config show`.

Every key of every section in schema order, with its resolved value (file, then overrides, then the defaults where
both are silent); a value that differs from the schema's default says the default in a trailing comment. TOML has no
null, so an unset key (None) is a comment, and the batch plan derived from the config (`config.derived`: samples per
step, micro-batches, the scaled learning rate, the steps) follows as comments under `# [derived]`: saved to a file,
the output loads back as the same config (tests/test_config_show.py), never with keys the schema refuses.

Strings are TOML basic strings whose control, bidirectional and other invisible characters are \\u escapes, so a
hostile value neither breaks the document nor acts on the terminal that shows it.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import asdict

from pydantic import BaseModel

from batchscale.config.derived import BatchPlan
from batchscale.config.schema import Config

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_string(text: str) -> str:
    """A TOML basic string: `"` and `\\` escaped, every control, format or unassigned character as a \\u escape."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif unicodedata.category(char)[0] in "CZ" and char != " ":  # controls, bidi marks, line separators
            out.append(f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value) -> str:
    """One value in TOML: booleans, numbers, strings, lists (tuples too) and tables (inline), None entries of a table
    left out (TOML has no null)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):  # the schema refuses them; a plan's value could still be one
            return toml_string(str(value))
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items() if v is not None]
        return "{" + ", ".join(items) + "}" if items else "{}"
    return toml_string(str(value))


def _plain(value):
    """A config value as plain data (a nested section as a dict)."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _default(section: type[BaseModel], key: str):
    return _plain(section.model_fields[key].get_default(call_default_factory=True))


def config_toml(cfg: Config, plan: BatchPlan, source: str, threads_line: str | None = None) -> str:
    """The resolved config `cfg` (from `source`: its file and overrides, said in the header) as TOML, with the plan
    derived from it as comments."""
    lines = [f"# The resolved config of {source}: the file, then the overrides, then batchscale's defaults.",
             "# Saved as a file it loads back as the same config; '# default' names the value where none is given."]
    for name, field in Config.model_fields.items():
        section_model = field.annotation
        section = getattr(cfg, name)
        lines += ["", f"[{name}]"]
        for key in section_model.model_fields:
            value, default = _plain(getattr(section, key)), _default(section_model, key)
            if isinstance(value, tuple):
                value = list(value)
            if isinstance(default, tuple):
                default = list(default)
            if value is None:  # TOML has no null: a file that omits the key gets the default
                note = "" if default is None else (f" (default {toml_value(default)}; a file cannot unset it, an "
                                                   f"override can: {name}.{key}=null)")
                lines.append(f"# {toml_key(key)}: unset{note}")
                continue
            note = "" if value == default else f"  # default {'unset' if default is None else toml_value(default)}"
            lines.append(f"{toml_key(key)} = {toml_value(value)}{note}")
    lines += ["", "# [derived] what batchscale computes from the keys above (not keys of a config file)"]
    for key, value in asdict(plan).items():
        if value is None:
            continue
        lines.append(f"# {key} = {toml_value(value)}")
    if threads_line:
        lines.append(f"# {threads_line}")
    return "\n".join(lines) + "\n"
