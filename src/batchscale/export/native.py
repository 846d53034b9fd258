"""batchscale itself as the engine of an export: `batchscale train` of each point's resolved config.

Each point gets `configs/<name>.toml`, its whole config as `batchscale sweep` would have run it (the sweep's base, its
[set], the point's grid values and seed), so the job needs neither the sweep file nor its base config; and a script
`<name>.sh` that trains it into `$SWEEP_DIR/runs/<name>`: a finished run (summary.json) is left as it is, an unfinished
one continues (`train --resume`: a preempted job that is started again goes on from its newest checkpoint), otherwise
the run starts. The run directory is the result: nothing to import. Paths inside the config (model.path, task.path)
are the sweep's as written; they must exist where the job runs.

TOML has no null: a setting that is None in the resolved config is left out, which gives it its default again (a
config file cannot set a None that is not the default, so nothing is lost; tests/test_export_launchers.py reads every
written config back and compares it with the point's).
"""

from __future__ import annotations

import json
import math
import re

from batchscale.export.settings import PointSettings, describe_settings
from batchscale.export.shell import comment_text

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
TARGET = "batchscale's own trainer (`batchscale train`), one device per run"


def toml_key(key: str) -> str:
    return key if BARE_KEY.match(key) else json.dumps(key)


def toml_value(value) -> str:
    """One TOML value: strings as basic strings (JSON's escapes are TOML's), floats at full precision."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
    raise TypeError(f"no TOML spelling for {type(value).__name__}")


def render_toml(data: dict, table: tuple[str, ...] = ()) -> str:
    """A nested dict of config values as TOML: leaves first, then one [table] per sub-dict; None leaves are left out."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in data.items() if v is not None and not isinstance(v, dict)]
    text = "\n".join(lines)
    for key, value in data.items():
        if isinstance(value, dict):
            name = (*table, key)
            body = render_toml(value, name)
            text += ("\n\n" if text else "") + f"[{'.'.join(toml_key(k) for k in name)}]" + ("\n" + body if body else "")
    return text


def render_config(s: PointSettings, config_data: dict, sweep_file: str) -> str:
    header = (f"# Point {s.name} (label {comment_text(s.label)}) of {comment_text(sweep_file)}, resolved by "
              "`batchscale export`: the whole config this point trains with.\n")
    return header + render_toml(config_data) + "\n"


def render_native_script(s: PointSettings, sweep_file: str) -> str:
    description = "\n".join(f"# {comment_text(line)}" for line in describe_settings(s).split("\n"))
    return "\n".join([
        "#!/usr/bin/env bash",
        f"# batchscale launcher for sweep point {s.name} (label {comment_text(s.label)}), exported by batchscale from "
        f"{comment_text(sweep_file)}.",
        "#",
        description,
        "#",
        f"# Run: bash {s.name}.sh [extra `batchscale train` options, e.g. --set run.device=cuda]",
        "# The config is configs/" + s.name + ".toml beside this script: the sweep's numbers, not to be edited.",
        "set -euo pipefail",
        "",
        'SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'SWEEP_DIR="${SWEEP_DIR:-$SCRIPT_DIR}"  # runs land in $SWEEP_DIR/runs/: `batchscale analyze $SWEEP_DIR`',
        f'RUN_DIR="$SWEEP_DIR/runs/{s.name}"',
        'if ! command -v batchscale >/dev/null 2>&1; then',
        '  echo "error: batchscale is not on PATH: install it where this job runs" >&2; exit 2',
        "fi",
        'if [[ -f "$RUN_DIR/summary.json" ]]; then',
        f'  echo "{s.name}: finished already ($RUN_DIR/summary.json)"; exit 0',
        'elif [[ -f "$RUN_DIR/config.json" && -f "$RUN_DIR/metrics.jsonl" ]]; then',
        '  batchscale train --resume "$RUN_DIR" "$@"  # a job started again: from the newest checkpoint',
        "else",
        f'  batchscale train "$SCRIPT_DIR/configs/{s.name}.toml" --out "$RUN_DIR" "$@"',
        "fi",
        "",
    ])
