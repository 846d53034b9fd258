"""`batchscale config show [FILE] [KEY=VALUE ...]`: the resolved config, as a run would train it.

The file (or the defaults), then `--set` and bare overrides, validated as `train` validates them (the same one-line
errors, exit 2), printed as TOML with the derived batch plan as comments (config.show), or with --json as a run's
config.json holds it. Registered on the main app by one line at the end of batchscale/cli.py; imports no torch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

config_app = typer.Typer(help="Print the resolved config (file, overrides, defaults) and what is derived from it.",
                         no_args_is_help=True)


@config_app.command("show")
def show(
    config: Annotated[Optional[Path], typer.Argument(help="TOML run config (defaults if omitted)")] = None,
    overrides: Annotated[Optional[list[str]], typer.Argument(help="overrides as train takes them: optim.lr=1e-5 "
                                                             r"run.trackers=\[wandb,mlflow]", metavar="KEY=VALUE...",
                                                             show_default=False)] = None,
    set_: Annotated[list[str], typer.Option("--set", help="override a key: --set batch.prompts_per_step=64")] = [],
    json_out: Annotated[bool, typer.Option("--json", help="print the config and its derived plan as JSON")] = False,
) -> None:
    """The config `train` would run: every key with its value (defaults included, those that differ marked), and the
    batch plan derived from it."""
    from batchscale.config import derive_plan, load_config, resolved_config
    from batchscale.config.load import file_and_overrides
    from batchscale.config.show import config_toml
    from batchscale.threads import choose_threads

    config, items = file_and_overrides(config, overrides, set_)
    cfg = load_config(config, items)
    plan = derive_plan(cfg)
    if json_out:
        sys.stdout.write(json.dumps(resolved_config(cfg, plan), indent=2) + "\n")
        return
    source = str(config) if config is not None else "the defaults"
    if items:
        source += f" with {len(items)} override{'s' if len(items) != 1 else ''}"
    threads = choose_threads(cfg.model.name, cfg.run.threads)
    note = f"threads = {threads.threads}  (on this machine: {threads.available.describe()}; {threads.why})"
    sys.stdout.write(config_toml(cfg, plan, source, note))
