"""The launch-script skeleton every exporter shares: variables, checks, the command, and the import line.

A script is `#!/usr/bin/env bash` + `set -euo pipefail`. Every value that came from input reaches it quoted: command
words through `shlex.quote`, comment text with its control characters escaped (`comment_text`), so no file name,
label or config value can end a line and start a command of its own (tests/test_export_quoting.py). The user sets MODEL_PATH, TRAIN_FILES, VAL_FILES (and an
engine's own required inputs) at the top or in the environment; everything the sweep decided is written literally
into the command. Extra engine options given to the script (`bash point.sh key=value ...`) are appended to the command.
The last line is the `batchscale import` that turns the engine's log into `$SWEEP_DIR/runs/<name>/`, so a finished
sweep is analysed with `batchscale analyze $SWEEP_DIR` like a native one.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from batchscale.export.settings import PointSettings, describe_settings

SAFE_DEFAULT = re.compile(r"^[A-Za-z0-9_.,:/@%+=-]*$")  # usable unquoted inside "${VAR:-...}"


class Shell(str):
    """Shell text expanded at run time (e.g. `$MODEL_PATH`); rendered inside double quotes, never escaped."""


@dataclass(frozen=True)
class Variable:
    name: str
    default: str  # "" for a value the user must set
    comment: str
    required: bool = False


def comment_text(text) -> str:
    """Text for a `# ...` comment line: every character that is not printable (a newline above all, which would end
    the comment and make the rest a command) written as its escape, so the comment stays one line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def format_value(value) -> str:
    """A sweep value as the engine reads it: floats at full precision, booleans as True/False."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def quote_word(word) -> str:
    """One shell word: Shell text in double quotes, anything else single-quoted when it needs to be."""
    if isinstance(word, Shell):
        return f'"{word}"'
    return shlex.quote(format_value(word))


def render_command(program: list[str], words: list) -> str:
    """`program word word ... "$@"`, one option per line."""
    lines = [" ".join(program)] + [quote_word(w) if not isinstance(w, tuple) else " ".join(map(quote_word, w))
                                   for w in words]
    return " \\\n  ".join(lines + ['"$@"'])


def render_import_line(fmt: str, log_path: str, s: PointSettings) -> str:
    """The exact `batchscale import` command that brings this point's log back as `$SWEEP_DIR/runs/<name>`."""
    words = ["batchscale", "import", fmt, f'"{log_path}"', "--out", f'"$SWEEP_DIR/runs/{s.name}"',
             "--label", shlex.quote(s.label), "--prompts-per-step", str(s.prompts_per_step),
             "--samples-per-prompt", str(s.samples_per_prompt), "--seed", str(s.seed),
             "--lr-rule", shlex.quote(s.lr_rule), "--overwrite"]
    return " ".join(words)


def render_variables(variables: list[Variable]) -> list[str]:
    lines = []
    for v in variables:
        if not SAFE_DEFAULT.match(v.default):
            raise ValueError(f"default of {v.name} needs quoting: {v.default!r}")
        lines.append(f'{v.name}="${{{v.name}:-{v.default}}}"  # {v.comment}')
    return lines


def render_script(*, s: PointSettings, engine: str, target: str, sweep_file: str, user_variables: list[Variable],
                  execution_variables: list[Variable], setup: list[str], command: str, log_path: str,
                  import_format: str) -> str:
    """The whole launch script for one sweep point."""
    required = [v.name for v in user_variables if v.required]
    description = "\n".join(f"# {comment_text(line)}" for line in describe_settings(s).split("\n"))
    parts = [
        "#!/usr/bin/env bash",
        f"# {engine} launcher for sweep point {s.name} (label {comment_text(s.label)}), exported by batchscale from "
        f"{comment_text(sweep_file)}.",
        "#",
        description,
        "#",
        f"# Targets {comment_text(target)}.",
        f"# Run: bash {s.name}.sh [extra {engine} options, appended to the command]",
        "# Set the inputs below (or export them); do not edit the command's batch, lr or seed: they are the sweep.",
        "set -euo pipefail",
        "",
        "# --- Inputs: set these ---",
        *render_variables(user_variables),
        "# --- Execution only: how the run is laid out on the machines, never what an update computes ---",
        *render_variables(execution_variables),
        "",
        f"for var in {' '.join(required)}; do",
        '  if [[ -z "${!var}" ]]; then echo "error: set $var at the top of $0 or export it" >&2; exit 2; fi',
        "done",
        "",
        'SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'SWEEP_DIR="${SWEEP_DIR:-$SCRIPT_DIR}"  # imports land in $SWEEP_DIR/runs/: `batchscale analyze $SWEEP_DIR`',
        f'RUN_DIR="$SWEEP_DIR/work/{s.name}"  # the engine\'s own logs, config and checkpoints',
        'mkdir -p "$RUN_DIR"',
        *setup,
        "",
        command,
        "",
        "# Bring the log back as a batchscale run directory.",
        f'if [[ ! -e "{log_path}" ]]; then echo "error: no log at {log_path}; did the run start?" >&2; exit 1; fi',
        "if ! command -v batchscale >/dev/null 2>&1; then",
        '  echo "batchscale is not on PATH: run the last line of $0 where it is installed" >&2; exit 0',
        "fi",
        render_import_line(import_format, log_path, s),
        "",
    ]
    return "\n".join(parts)
