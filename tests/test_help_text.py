"""Every command's --help shows its bracketed words (issue 45: `sweep --help` printed "base config, , , [], seeds",
rich markup having eaten `[set]`, `[grid]` and `[[points]]`). Walks the whole command tree, so a new help text with
brackets is checked too."""

from __future__ import annotations

import re

import click
import pytest
import typer.main

from batchscale.cli import app, main


def commands(group: click.Command, path: tuple[str, ...] = ()):
    yield path, group
    for name, sub in getattr(group, "commands", {}).items():
        yield from commands(sub, (*path, name))


def bracketed(text: str) -> list[str]:
    """What a reader should see in brackets: `[set]`, `[[points]]`, `[,feasible]`, with rich's `\\[` escape undone."""
    text = text.replace("\\[", "[")
    return re.findall(r"\[+[^\[\]\s]*\]+", text)


COMMANDS = [(path, command) for path, command in commands(typer.main.get_command(app)) if path]


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_shows_every_bracketed_word(path, command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per parameter: no wrapping inside a bracket
    sources = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
    wanted = [word for source in sources for word in bracketed(source)]
    assert main([*path, "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    missing = [word for word in wanted if word not in shown]
    assert not missing, f"{' '.join(path)} --help lost {missing}"


def test_the_sweep_help_names_the_sections(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["sweep", "--help"]) == 0
    assert "sweep TOML: base config, [set], [grid], [[points]], seeds" in capsys.readouterr().out
