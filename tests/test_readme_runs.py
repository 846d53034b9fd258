"""README.md runs as written (issue 45, item 2), in a fresh copy of the repository.

What counts as a command (the extraction rule):
- every line of a fenced ```bash block, a line ending in a backslash joined with the next; a line that is only a
  comment is not a command;
- an indented (4+ spaces) code line outside a fence that starts with `batchscale` or `.venv/bin/batchscale`;
- the `$ ` lines of a fenced ```text block are error examples: each must exit 2 with the `error:` line the README
  shows after it (its wrapped lines joined).
Python blocks and commands quoted inline in prose are not extracted.

Which commands are not run (the convention, visible in the README): a command whose trailing comment says
`not run by the README test: WHY`, and every command after a comment line saying it in the same block. Each
command must be `batchscale` or `.venv/bin/batchscale` (after any `NAME=value` assignments) unless it is marked so.
Two more comments are read: `# Ctrl-C it after its first checkpoint` (the test sends SIGINT to the command's process
group once `<--out>/checkpoints/step-*` exists, and expects exit 130, as a terminal's Ctrl-C gives), and, on an
error example, `# on a machine without a GPU` (skipped where torch sees CUDA).

Two parts, both `slow`:
- test_readme_commands_parse (CI): every command, run or not, names a subcommand that exists and only options its
  `--help` lists; every train command's config is validated by `batchscale config show ... --json` (its `--set`s and
  bare overrides included, `--out` aside), every sweep's points by the sweep loader; the commands that train
  nothing (import, analyze, plan, report, roofline, export, config) run as written when every path they read is
  already there (not written by a training command), and so do the error examples.
- test_readme_runs_in_order (BATCHSCALE_TEST_README=1): every command that is not marked, in README order, as
  written, in one fresh copy, each checked for what the README promises it writes (`promised_outputs`).
  Small budgets are injected, in one documented way: `--set run.budget_samples=1024` (SMALL_BUDGET) is appended to
  a `train` whose resolved budget is larger and which neither resumes nor is to be interrupted, and to every
  `sweep` whose points have larger budgets. A resume keeps the README's own budget (a budget may only grow), and a
  command to be interrupted keeps its own (it must still be running at its first checkpoint).

The copy holds the files `git ls-files --cached --others --exclude-standard` lists (a clone's files, as they are in
the working tree), `.venv/bin/batchscale` as a wrapper around this interpreter (as `make install` would leave), with
that directory first on PATH, PYTHONPATH the copy's src and an empty BATCHSCALE_CACHE: a new user's first use.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SKIP_MARK = "not run by the README test"
INTERRUPT_MARK = "Ctrl-C it after its first checkpoint"
NO_GPU_MARK = "on a machine without a GPU"
PROGRAMS = ("batchscale", ".venv/bin/batchscale")
GROUPS = ("profile", "config")  # subcommands with subcommands of their own
READ_ONLY = ("import", "analyze", "plan", "report", "roofline", "export", "config")  # train nothing
SMALL_BUDGET = 1024
COMMAND_TIMEOUT_S = 1800
OPT_IN = "BATCHSCALE_TEST_README"


@dataclass(frozen=True)
class Command:
    line: int  # README line it starts on
    text: str  # as written, continuation lines joined, without its trailing comment
    comment: str  # its trailing comment ("" if none)
    skip: str  # why it is not run ("" if it is)

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def argv(self) -> list[str]:
        """The words after any leading NAME=value assignments."""
        words = self.words
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words = words[1:]
        return words

    @property
    def is_batchscale(self) -> bool:
        return bool(self.argv) and self.argv[0] in PROGRAMS

    @property
    def subcommand(self) -> list[str]:
        argv = self.argv
        return argv[1:3] if len(argv) > 2 and argv[1] in GROUPS else argv[1:2]

    def option(self, name: str) -> str | None:
        """The value of the last `name VALUE` or `name=VALUE` (None if absent)."""
        value, argv = None, self.argv
        for i, word in enumerate(argv):
            if word == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif word.startswith(name + "="):
                value = word.split("=", 1)[1]
        return value

    def setting(self, key: str) -> str | None:
        """The value a `--set key=v` or bare `key=v` gives (bare ones apply after --set, as batchscale does)."""
        sets = [w for p, w in zip(self.argv, self.argv[1:]) if p == "--set"]
        bare = [w for p, w in zip(self.argv, self.argv[1:]) if p != "--set" and "=" in w and not w.startswith("-")]
        value = None
        for word in [*sets, *bare]:
            if word.startswith(key + "="):
                value = word.split("=", 1)[1]
        return value

    def where(self) -> str:
        return f"README.md:{self.line}: {self.text}"


@dataclass(frozen=True)
class ErrorExample:
    line: int
    command: Command
    shown: str  # the error the README shows, its lines joined by single spaces


def split_comment(line: str) -> tuple[str, str]:
    """A shell line's command and its trailing comment: the first `#` outside quotes that starts a word."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def extract(text: str) -> tuple[list[Command], list[ErrorExample]]:
    """The README's commands and error examples, in order (the rule in the module docstring)."""
    commands: list[Command] = []
    examples: list[ErrorExample] = []
    lines = text.splitlines()
    fence, block_skip, pending, start = None, "", "", 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else (stripped[3:].strip() or "plain")
            block_skip, pending = "", ""
            continue
        if fence == "bash":
            if not pending:
                start = number
            if raw.rstrip().endswith("\\"):
                pending += raw.rstrip()[:-1] + " "
                continue
            command, comment = split_comment(pending + raw)
            pending = ""
            if not command.strip():
                if SKIP_MARK in comment:
                    block_skip = comment
                continue
            skip = comment if SKIP_MARK in comment else block_skip
            commands.append(Command(start, " ".join(command.split()), comment, skip))
        elif fence == "text" and stripped.startswith("$ "):
            command, comment = split_comment(stripped[2:])
            shown = []
            for following in lines[number:]:
                if not following.strip() or following.startswith("$ ") or following.startswith("```"):
                    break
                shown.append(following.strip())
            examples.append(ErrorExample(number, Command(number, command, comment, ""), " ".join(shown)))
        elif fence is None and re.match(r" {4,}(\.venv/bin/)?batchscale\s", raw):
            command, comment = split_comment(stripped)
            commands.append(Command(number, command, comment, comment if SKIP_MARK in comment else ""))
    return commands, examples


# ---- the copy and how its commands run ----

def make_copy(dest: Path) -> Path:
    """The repository's files as a clone would hold them (working-tree contents), a .venv/bin/batchscale wrapper."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    wrapper = dest / ".venv" / "bin" / "batchscale"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m batchscale "$@"\n')
    wrapper.chmod(0o755)
    return dest


def environment(copy: Path, cache: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(copy / "src"), BATCHSCALE_CACHE=str(cache), COLUMNS="200", TERM="dumb",
               PATH=f"{copy / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("FORCE_COLOR", None)
    return env


def run(copy: Path, env: dict, text: str, timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", text], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout_s)


def failure(command: Command, ran: str, result) -> str:
    return (f"{command.where()}\nran: {ran}\nexit {result.returncode}\nstdout (end): {result.stdout[-2000:]}\n"
            f"stderr (end): {result.stderr[-3000:]}")


def help_text(copy: Path, env: dict, subcommand: list[str], cache: dict) -> str:
    key = " ".join(subcommand)
    if key not in cache:
        result = run(copy, env, f"batchscale {key} --help", 120)
        assert result.returncode == 0, f"batchscale {key} --help: exit {result.returncode}\n{result.stderr[-2000:]}"
        cache[key] = result.stdout
    return cache[key]


def check_parses(copy: Path, env: dict, command: Command, helps: dict) -> None:
    """The subcommand exists and every --option the line names (inside [...] too) is one its --help lists."""
    helped = help_text(copy, env, command.subcommand, helps)
    for option in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command.text))):
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", helped), \
            f"{command.where()}\n{option} is not an option of batchscale {' '.join(command.subcommand)} (--help)"


def is_placeholder(word: str) -> bool:
    """SWEEP_DIR, RUN_DIR, P.json, [--json], ...: text that stands for something, which no run can take as written."""
    return word.startswith("[") or word.endswith("]") or "..." in word \
        or bool(re.fullmatch(r"[A-Z][A-Z_]*(\.[a-z]+)?", word))


def resolved_config(copy: Path, env: dict, command: Command) -> dict:
    """`batchscale config show` of a train command's config and overrides (--out aside): validated, no compute."""
    argv, shown, i = command.argv[2:], [], 0
    while i < len(argv):
        if argv[i] == "--out":
            i += 2
            continue
        shown.append(argv[i])
        i += 1
    ran = shlex.join(["batchscale", "config", "show", *shown, "--json"])
    result = run(copy, env, ran, 120)
    assert result.returncode == 0, failure(command, ran, result)
    return json.loads(result.stdout)


def sweep_points(copy: Path, command: Command) -> list:
    from batchscale.sweep.spec import load_sweep_spec

    overrides = [w for p, w in zip(command.argv, command.argv[1:]) if p == "--set"]
    overrides += [w for p, w in zip(command.argv[2:], command.argv[3:]) if p != "--set" and "=" in w
                  and not w.startswith("-")]
    return load_sweep_spec(copy / command.argv[2], overrides)


def read_paths(command: Command) -> list[str]:
    """The paths a command names other than where it writes (after --out), e.g. a log, a sweep file, a run."""
    argv = command.argv[1:]
    return [w for p, w in zip(["", *argv], argv) if p != "--out" and "/" in w and not w.startswith(("-", "http"))
            and "=" not in w]


# ---- what each command promises ----

def out_dir(copy: Path, env: dict, command: Command) -> Path:
    sub = command.subcommand[0]
    if sub == "train":
        if command.option("--resume"):
            return copy / command.option("--resume")
        return copy / (command.option("--out") or resolved_config(copy, env, command)["run"]["out_dir"])
    if sub == "sweep":
        return copy / (command.option("--out") or f"runs/{Path(command.argv[2]).stem}")
    if sub in ("analyze", "report", "plan"):
        return copy / (command.option("--out") or command.argv[2])
    return copy / command.option("--out") if command.option("--out") else copy


def promised_outputs(copy: Path, env: dict, command: Command, result) -> None:
    """What the README says the command writes, where it says it."""
    sub, where = command.subcommand[0], out_dir(copy, env, command)
    def have(*names: str) -> None:
        missing = [n for n in names if not (where / n).exists()]
        assert not missing, f"{command.where()}\nmissing in {where}: {missing}"
    if sub == "train":
        have("run.json", "metrics.jsonl", "config.json", "summary.json", ".batchscale")
        summary = json.loads((where / "summary.json").read_text())
        budget = command.setting("run.budget_samples")
        if command.option("--resume") and budget is not None:  # "the budget may grow": the run trained to it
            assert summary["samples"] >= int(budget), (command.where(), summary["samples"])
        config = json.loads((where / "config.json").read_text())
        if config["run"].get("save_policy", True):
            have("policy")
    elif sub == "sweep":
        points = sweep_points(copy, command)
        if "--adaptive" in command.argv:
            have("sweep.json")
        else:
            finished = sorted(p.parent.name for p in (where / "runs").glob("*/summary.json"))
            assert len(finished) == len(points), (command.where(), finished)
    elif sub == "analyze":
        have("analysis.json")
    elif sub == "report":
        have("report.html", "report.md")
    elif sub == "import":
        have("run.json", "metrics.jsonl", "summary.json")
    elif sub == "export":
        have("README.md")
        assert len(list(where.glob("*.sh"))) >= 1, command.where()
    else:
        assert result.stdout.strip(), f"{command.where()}\nprinted nothing"


# ---- the two parts ----

@pytest.fixture(scope="module")
def readme():
    return extract(README.read_text(encoding="utf-8"))


def test_extraction_finds_the_readme_commands(readme):
    """The rule finds what a reader sees: the train block, the resume pair, the sweep chain, the error examples; and
    every command that is not marked is one batchscale can take as written."""
    commands, examples = readme
    texts = [c.text for c in commands]
    assert ".venv/bin/batchscale train examples/grpo-tiny.toml" in texts
    assert "batchscale import verl examples/logs/verl_demo.log --out runs/verl-p256" in texts
    assert any(c.comment.startswith(INTERRUPT_MARK) for c in commands)
    assert {c.text.split()[0] for c in commands if c.skip} >= {"make", "cd"}
    assert len(examples) >= 2 and all(e.shown.startswith("error: ") for e in examples)
    for command in commands:
        if command.skip:
            continue
        assert command.is_batchscale, f"{command.where()}\nnot batchscale: mark it ({SKIP_MARK}: why)"
        placeholders = [w for w in command.words if is_placeholder(w)]
        assert not placeholders, f"{command.where()}\n{placeholders} cannot run as written: mark it ({SKIP_MARK})"
    shipped = ROOT / "examples" / "logs" / "verl_demo.log"  # its provenance is the fixture's (examples/logs/README.md)
    fixture = ROOT / "tests" / "fixtures" / "real_logs" / "verl_v0.1_qwen2.5-0.5b_gsm8k_interleaved.log"
    assert shipped.read_bytes() == fixture.read_bytes()


@pytest.mark.slow
def test_readme_commands_parse(readme, tmp_path):
    """Every command parses; train and sweep configs validate; the commands that train nothing run as written."""
    commands, examples = readme
    copy = make_copy(tmp_path / "repo")
    env = environment(copy, tmp_path / "cache")
    helps: dict = {}
    for command in commands:
        if not command.is_batchscale:
            continue
        check_parses(copy, env, command, helps)
        if command.skip:
            continue
        sub = command.subcommand[0]
        if sub == "train" and not command.option("--resume"):
            resolved_config(copy, env, command)
        elif sub == "sweep":
            assert sweep_points(copy, command), command.where()
        elif sub in READ_ONLY and all((copy / p).exists() for p in read_paths(command)):
            result = run(copy, env, command.text)
            assert result.returncode == 0, failure(command, command.text, result)
            promised_outputs(copy, env, command, result)
    for example in examples:
        check_error_example(copy, env, example)


def check_error_example(copy: Path, env: dict, example: ErrorExample) -> None:
    if NO_GPU_MARK in example.command.comment:
        import torch

        if torch.cuda.is_available():
            return
    result = run(copy, env, example.command.text, 300)
    assert result.returncode == 2, failure(example.command, example.command.text, result)
    said = " ".join(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert " ".join(said.split()) == example.shown, f"README.md:{example.line}\nREADME: {example.shown}\ngot: {said}"


def injected(copy: Path, env: dict, command: Command) -> str:
    """The command as the test runs it: as written, with SMALL_BUDGET appended where the module docstring says."""
    sub = command.subcommand[0]
    if sub == "train" and not command.option("--resume") and not command.comment.startswith(INTERRUPT_MARK):
        if resolved_config(copy, env, command)["run"]["budget_samples"] > SMALL_BUDGET:
            return f"{command.text} --set run.budget_samples={SMALL_BUDGET}"
    if sub == "sweep" and max(p.config.run.budget_samples for p in sweep_points(copy, command)) > SMALL_BUDGET:
        return f"{command.text} --set run.budget_samples={SMALL_BUDGET}"
    return command.text


def run_interrupted(copy: Path, env: dict, command: Command) -> None:
    """Start it, Ctrl-C it (SIGINT to its process group) once its first checkpoint is in place: exit 130, unfinished."""
    where = copy / command.option("--out")
    process = subprocess.Popen(["bash", "-c", command.text], cwd=copy, env=env, start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + COMMAND_TIMEOUT_S
    while not list((where / "checkpoints").glob("step-*")) and process.poll() is None:
        assert time.monotonic() < deadline, f"{command.where()}\nno checkpoint in {COMMAND_TIMEOUT_S} s"
        time.sleep(0.1)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 130, f"{command.where()}\nexit {process.returncode}\n{output[-3000:]}"
    assert not (where / "summary.json").exists(), command.where()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get(OPT_IN) != "1",
                    reason=f"trains every README command (minutes on 2 cores): {OPT_IN}=1 runs it")
def test_readme_runs_in_order(readme, tmp_path):
    """Every command not marked, in README order, in one fresh copy: exit 0 (130 where interrupted) and the outputs
    the README promises."""
    commands, _ = readme
    copy = make_copy(tmp_path / "repo")
    env = environment(copy, tmp_path / "cache")
    timings = []
    for command in commands:
        if command.skip:
            continue
        started = time.monotonic()
        if command.comment.startswith(INTERRUPT_MARK):
            run_interrupted(copy, env, command)
        else:
            ran = injected(copy, env, command)
            result = run(copy, env, ran)
            assert result.returncode == 0, failure(command, ran, result)
            promised_outputs(copy, env, command, result)
        timings.append(f"{time.monotonic() - started:7.1f} s  README.md:{command.line}")
    print("\n".join(timings))
