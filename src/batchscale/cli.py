"""Command-line front end: thin wrappers over the library.

Every command accepts `--json` where it has a result, prints progress to stderr and results to stdout, and turns a
`UserError` into one line on stderr and exit code 2. Heavy imports (torch, transformers) happen inside the commands
that need them, so `analyze`, `plan` and `roofline` start fast and never touch the training stack.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from batchscale.errors import UserError
from batchscale.markup import inert

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


def _usage_error_types() -> tuple[type, ...]:
    """Click's usage errors; typer >= 0.29 vendors its own copy of click, so catch both."""
    import click

    types: list[type] = [click.ClickException]
    try:
        from typer._click.exceptions import ClickException as TyperClickException

        types.append(TyperClickException)
    except ImportError:
        pass
    return tuple(types)


def _format_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {inert(message)}\n"  # for people: no source location, no code line; data shown inert


def _usage_error_line(error) -> str:
    """A click usage error (unknown option, missing argument, bad value) as one line with where to look."""
    ctx = getattr(error, "ctx", None)
    command = ctx.command_path if ctx is not None else "batchscale"
    return f"{error.format_message()} (see '{command} --help')"


def _os_error_line(error: OSError) -> str:
    """An OSError no library code turned into a UserError (a full disk, a path that is a file): one line."""
    from batchscale.files import write_error

    if error.filename is not None:
        return str(write_error(error.filename, error)) if error.errno is not None else f"{error.filename}: {error}"
    return f"{error.strerror or error}"


def main(argv: list[str] | None = None) -> int:
    """Console entry point. Returns the exit code: 2 for bad input, with a one-line message and no traceback. A file
    that cannot be read or written (an OSError, a non-UTF-8 file) that no command caught is one line too; set
    BATCHSCALE_TRACEBACK=1 to see the traceback instead."""
    import warnings

    from batchscale.processes import Terminated, terminate_gracefully

    warnings.formatwarning = _format_warning
    try:
        with terminate_gracefully():  # SIGTERM runs the same cleanup as Ctrl-C
            result = app(args=argv, standalone_mode=False)
    except UserError as e:
        typer.echo(f"error: {inert(e)}", err=True)  # names and values from input: controls shown, never acted on
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        return 130
    except Terminated:
        typer.echo("terminated", err=True)
        return 143
    except _usage_error_types() as e:  # unknown option, missing argument, bad value
        if type(e).__name__ == "NoArgsIsHelpError":
            e.show()  # a bare command: its help
        else:
            typer.echo(f"error: {_usage_error_line(e)}", err=True)
        return 2
    except (OSError, UnicodeDecodeError) as e:
        if os.environ.get("BATCHSCALE_TRACEBACK"):
            raise
        line = _os_error_line(e) if isinstance(e, OSError) else f"a file is not UTF-8 text ({e})"
        typer.echo(f"error: {inert(' '.join(line.split()))}", err=True)
        return 2
    return result if isinstance(result, int) else 0


OVERRIDES_HELP = "overrides as other frameworks write them: batch.prompts_per_step=64 optim.lr=1e-5 (as --set; after it)"


def is_override(text: str) -> bool:
    """KEY=VALUE with a dotted key (`task.path=data/x.jsonl`: its value may hold '/'), not a path that holds '='."""
    key, sep, _ = text.partition("=")
    return bool(sep) and bool(key) and "/" not in key and os.sep not in key


def bare_overrides(items: list[str] | None) -> list[str]:
    """KEY=VALUE arguments after the config file, checked as --set checks its items (the same messages after this)."""
    from batchscale.config import parse_override

    for item in items or []:
        parse_override(item, field="KEY=VALUE")
    return list(items or [])


@app.command()
def train(
    config: Annotated[Optional[Path], typer.Argument(help="TOML run config (defaults if omitted)")] = None,
    overrides: Annotated[Optional[list[str]], typer.Argument(help=OVERRIDES_HELP, metavar="KEY=VALUE...",
                                                             show_default=False)] = None,
    set_: Annotated[list[str], typer.Option("--set", help="override a key: --set batch.prompts_per_step=64")] = [],
    out: Annotated[Optional[Path], typer.Option(help="run directory (default: the config's run.out_dir)")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing run directory")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="print the run summary as JSON on stdout")] = False,
    resume: Annotated[Optional[Path], typer.Option(help="continue this unfinished run from its newest checkpoint "
                                                        "(its own config; --set may grow run.budget_samples)")] = None,
):
    """Train one configuration to its sample budget and write its run directory."""
    from batchscale.config import load_config
    from batchscale.train.run_progress import train_with_progress

    if config is not None and is_override(str(config)) and not config.exists():  # no config file: overrides alone
        config, overrides = None, [str(config), *(overrides or [])]
    set_ = [*set_, *bare_overrides(overrides)]
    if resume is not None:
        from batchscale.train.resume import resume_config

        if out is not None or overwrite:
            raise UserError("--resume", "continues the run in RUN_DIR itself: --out and --overwrite do not apply",
                            "drop --out and --overwrite")
        cfg = resume_config(resume, config, set_)
        summary, run_dir = train_with_progress(cfg, resume, resume=True)
    else:
        from batchscale.rundir.ownership import check_inputs_outside

        cfg = load_config(config, set_)
        if overwrite and config is not None:  # --overwrite never deletes the config file it was given
            check_inputs_outside(out or Path(cfg.run.out_dir), {"CONFIG": config})
        summary, run_dir = train_with_progress(cfg, out or Path(cfg.run.out_dir), overwrite)  # --overwrite: at the end
    if json_out:
        print_json({"run_dir": str(run_dir), **summary})
    else:
        typer.echo(f"run directory: {run_dir}")


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="where the demo writes its sweep, profiles and report")] = Path("runs/demo"),
    quick: Annotated[bool, typer.Option(help="a smaller sweep and profiles (about 2 minutes, for CI)")] = False,
    time_budget: Annotated[Optional[float], typer.Option(help="seconds for the racing sweep (default: what leaves "
                                                              "the whole demo, install included, in 10 minutes)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the decision and timings as JSON on stdout")] = False,
):
    """The main job: the two-stage procedure end to end on the built-in default (sweep, profiles, analysis, plan, report).

    Rerunning with the same --out resumes the sweep: finished runs are kept.
    """
    from batchscale.demo import run_demo, summarize_demo

    if out.exists() and not out.is_dir():
        raise UserError("--out", f"{out} exists and is not a directory", "choose another --out")
    result = run_demo(out, quick, time_budget)
    if json_out:
        print_json(result)
    else:
        typer.echo(summarize_demo(result))


@app.command()
def sweep(
    sweep_file: Annotated[Path, typer.Argument(help="sweep TOML: base config, [set], [grid], [[points]], seeds")],
    overrides: Annotated[Optional[list[str]], typer.Argument(help=OVERRIDES_HELP + ", for every point",
                                                             metavar="KEY=VALUE...", show_default=False)] = None,
    out: Annotated[Optional[Path], typer.Option(help="sweep directory (default: runs/<sweep file name>)")] = None,
    executor: Annotated[str, typer.Option(help="local (process pool) or ray")] = "local",
    workers: Annotated[int, typer.Option(help="runs at once (local executor)")] = 1,
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address (default: start a local one)")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="override a key of every point")] = [],
    adaptive: Annotated[bool, typer.Option(help="race: stop points that can no longer win, give seeds to the "
                                                "contenders (README: the racing rule)")] = False,
    initial_seeds: Annotated[int, typer.Option(help="--adaptive: seeds every point starts with")] = 2,
    max_seeds: Annotated[Optional[int], typer.Option(help="--adaptive: most seeds a contender gets (default: "
                                                          "the sweep file's seeds)")] = None,
    time_budget: Annotated[Optional[float], typer.Option(help="--adaptive: seconds; no seed starts that would "
                                                              "overrun them")] = None,
    target: Annotated[Optional[float], typer.Option(help="--adaptive: the score runs stop at (default: the default "
                                                         "rule on the reference's first seeds)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the sweep's summaries as JSON on stdout")] = False,
):
    """Run every point of a sweep as an ordinary run under DIR/runs/; rerunning resumes."""
    from batchscale.sweep.driver import run_sweep
    from batchscale.sweep.race import RaceSettings
    from batchscale.sweep.spec import load_sweep_spec

    if not adaptive and (max_seeds is not None or time_budget is not None):
        raise UserError("--max-seeds/--time-budget", "apply to a racing sweep only", "add --adaptive")
    points = load_sweep_spec(sweep_file, [*set_, *bare_overrides(overrides)])
    race = None
    if adaptive:
        file_seeds = len({p.seed for p in points})
        race = RaceSettings(initial_seeds, max_seeds or max(file_seeds, initial_seeds), time_budget)
    result = run_sweep(points, out or Path("runs") / sweep_file.stem, executor, workers, address, race=race,
                       target=target)
    if json_out:
        print_json(result)
    elif race is not None:
        facts = result["race"]
        typer.echo(f"{result['runs']} runs in {result['sweep_dir']}/runs ({result['skipped']} were already finished); "
                   f"race: {facts['ended']}; {facts['samples_trained']:,.0f} samples trained, "
                   f"{facts['samples_trained'] / facts['full_grid_samples']:.0%} of the full grid")
    else:
        typer.echo(f"{result['runs']} runs in {result['sweep_dir']}/runs ({result['skipped']} were already finished)")


# Commands that read run directories, tables and presets: they import no torch.
from batchscale.systems.cli import roofline as _roofline; app.command("roofline")(_roofline)  # noqa: E402, E702
from batchscale.plan.cli import plan as _plan; app.command("plan")(_plan)  # noqa: E402, E702
from batchscale.plan.predict_cli import predict as _predict; app.command("predict")(_predict)  # noqa: E402, E702
from batchscale.analysis.cli import analyze as _analyze; app.command("analyze")(_analyze)  # noqa: E402, E702
from batchscale.ingest.cli import import_run as _import_run; app.command("import")(_import_run)  # noqa: E402, E702
from batchscale.report.cli import report as _report; app.command("report")(_report)  # noqa: E402, E702
from batchscale.profile.cli import profile_app as _profile; app.add_typer(_profile, name="profile")  # noqa: E402, E702
from batchscale.export.cli import export_launchers as _export; app.command("export")(_export)  # noqa: E402, E702


if __name__ == "__main__":
    sys.exit(main())
