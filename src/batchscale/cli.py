"""Command-line front end: thin wrappers over the library.

Every command accepts `--json` where it has a result, prints progress to stderr and results to stdout, and turns a
`UserError` into one line on stderr and exit code 2. Heavy imports (torch, transformers) happen inside the commands
that need them, so `analyze`, `plan` and `roofline` start fast and never touch the training stack.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from batchscale.errors import UserError

app = typer.Typer(
    name="batchscale",
    help="When do larger batches help LLM RL? Measure samples-to-target and throughput, then pick the batch.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def print_json(obj) -> None:
    """Write one JSON document to stdout (the machine-readable result of a command)."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Console entry point. Returns the exit code (2 for bad input, with a one-line message and no traceback)."""
    try:
        app(args=argv, standalone_mode=False)
    except UserError as e:
        typer.echo(f"error: {e}", err=True)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        return 130
    except Exception as e:  # click usage errors (unknown option, missing argument)
        import click

        if isinstance(e, click.ClickException):
            e.show()
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
