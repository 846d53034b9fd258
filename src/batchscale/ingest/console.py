"""What every console-log reader shares: undoing what Ray, colour codes and progress bars do to printed lines, numbers
printed as Python/numpy reprs, and Python literals (a pprinted config, a status dict) read with `ast.literal_eval`.

Ray prefixes each line a worker prints with `(ActorName pid=N[, ip=A.B.C.D])` (the name may be several words:
`(VGNd5CWorkerDict_0:0 WorkerDict pid=65860)`, or absent: `(pid=934604)`) and collapses repeats into
`... [repeated Nx across cluster]`; loggers may colour lines with ANSI escapes; tqdm bars share a line with printed text,
separated by carriage returns. `clean_segments` yields the printed text with all of that removed.

Ray's log monitor interleaves the processes' output: one process's line may stop mid-way and another's prefix follow on
the same line (verl v0.1's console: `... 'experiment_name': 'gemma2b_function_rm',(pid=934604) `), the first process
resuming on a later line of its own. So a line is split at every prefix, and each printed text keeps the process that
printed it (its `pid`, "" without a prefix); a literal printed by one process (a config dict) is read from that
process's lines only, skipping the others' (at most MAX_INTERLEAVED_LINES of them).
"""

from __future__ import annotations

import ast
import re
from typing import NamedTuple

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RAY_PREFIX = re.compile(r"\((?:[\w.:<>-]+ )*pid=(?P<pid>\d+)(?:, ip=[0-9A-Fa-f.:]+)?\)\s?")  # anywhere in a line
RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
NUMPY_REPR = re.compile(r"^np\.(?:float|int|uint)\d+\((.*)\)$")  # numpy >= 2 reprs: np.float64(0.5), np.int64(3)
MAX_LITERAL_LINES = 5000  # a pprinted verl config is a few hundred lines
MAX_INTERLEAVED_LINES = 2000  # other processes' lines skipped inside one literal (verl v0.1: about 60)
QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")  # a Python string repr on one line


class PrintedLine(NamedTuple):
    """One printed text of a console log: its 1-based line number, the text, and the Ray process that printed it
    (the prefix's pid; "" for a line without one)."""

    number: int
    text: str
    process: str = ""


def split_processes(line: str) -> list[tuple[str, str]]:
    """(process, text) pieces of one raw line: split at every Ray prefix, each piece keeping the prefix's pid (text
    before the first prefix: "")."""
    pieces, process, start = [], "", 0
    for match in RAY_PREFIX.finditer(line):
        pieces.append((process, line[start:match.start()]))
        process, start = match.group("pid"), match.end()
    pieces.append((process, line[start:]))
    return pieces


def clean_segments(line: str):
    """(process, printed text) pairs of one raw log line (split at carriage returns and at Ray prefixes), without
    the prefixes and ANSI codes."""
    for segment in ANSI.sub("", line).split("\r"):
        for process, piece in split_processes(segment):
            text = RAY_REPEATED.sub("", piece).rstrip()
            if text.strip():
                yield process, text


def clean_lines(text: str) -> list[PrintedLine]:
    """Every printed text in a console log, in order (see PrintedLine)."""
    return [PrintedLine(number, segment, process) for number, line in enumerate(text.split("\n"), start=1)
            for process, segment in clean_segments(line)]


def parse_printed_number(text: str) -> float | None:
    """A number printed by Python or numpy (`0.5`, `np.float64(0.5)`, `True`); None when it is not one."""
    text = text.strip()
    wrapped = NUMPY_REPR.match(text)
    if wrapped:
        text = wrapped.group(1)
    if text in ("True", "np.True_"):
        return 1.0
    if text in ("False", "np.False_"):
        return 0.0
    try:
        return float(text)
    except ValueError:
        return None


def bracket_balance(text: str) -> int:
    """Opening minus closing brackets of one printed line, outside its quoted strings (pprint closes every string
    piece on its own line)."""
    bare = QUOTED.sub("", text)
    return sum(bare.count(c) for c in "([{") - sum(bare.count(c) for c in ")]}")


def continued(text: str) -> bool:
    """pprint indents every line after a literal's first one: a line that does not start with a space ends it."""
    return text[:1].isspace()


def cut_mid_line(text: str) -> bool:
    """Inside a literal pprint ends every line with a comma or an opening bracket; a line ending otherwise was cut by
    the process's output (verl 0.3's console: `'wrap_policy': {'min_num_params': ` then, on the next line of the same
    process, `0}},`), and its next line continues it whatever its indent."""
    return not text.rstrip().endswith((",", "{", "[", "("))


def next_of_process(lines: list, index: int, start: int) -> int | None:
    """The index of the next line after `index` printed by the process of `lines[start]`, skipping (at most
    MAX_INTERLEAVED_LINES) lines of other processes; None past the end or the limits. A line without a process
    follows only its immediate predecessor (nothing tells its lines from others')."""
    process = line_process(lines[start])
    skipped = 0
    while True:
        index += 1
        if index >= len(lines) or index - start >= MAX_LITERAL_LINES:
            return None
        if not process or line_process(lines[index]) == process:
            return index
        skipped += 1
        if skipped > MAX_INTERLEAVED_LINES:
            return None


def line_process(line) -> str:
    return line[2] if len(line) > 2 else ""


def read_literal(lines: list, start: int, opener: str = "{"):
    """(value, index after it) of the Python literal starting at `lines[start]` (its text from the first `opener`),
    possibly spanning lines as pprint prints it (continuation lines indented, read from the same process's lines:
    module docstring); None when it does not close within MAX_LITERAL_LINES or does not parse. Each line is scanned
    once and the literal parsed once: linear in the log."""
    first = lines[start][1]
    parts = [first[first.index(opener):]]
    depth = bracket_balance(parts[0])
    index = start
    while depth > 0:
        index = next_of_process(lines, index, start)
        if index is None or not (continued(lines[index][1]) or cut_mid_line(parts[-1])):
            return None
        parts.append(lines[index][1])
        depth += bracket_balance(parts[-1])
    try:
        return ast.literal_eval(unwrap_numpy_reprs("\n".join(parts))), index + 1
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def read_printed_string(lines: list, start: int) -> tuple[str, int] | None:
    """(text, index after it) of a string pprint printed from `lines[start]` on: a repr in quotes, or, when longer
    than a line, adjacent quoted pieces in parentheses on indented lines; None when it cannot be read."""
    first = lines[start][1]
    opening = [first.find(c) for c in "(\"'" if c in first]
    if not opening:
        return None
    parts = [first[min(opening):]]
    index = start
    if parts[0].startswith("("):
        while not parts[-1].rstrip().endswith(")"):
            index = next_of_process(lines, index, start)
            if index is None or not continued(lines[index][1]):
                return None
            parts.append(lines[index][1])
    try:
        value = ast.literal_eval("\n".join(parts).strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    return (value, index + 1) if isinstance(value, str) else None


def unwrap_numpy_reprs(text: str) -> str:
    """`np.float64(0.5)` -> `0.5` inside a literal, so `ast.literal_eval` (never `eval`) can read it."""
    return re.sub(r"np\.(?:float|int|uint)\d+\(([^()]*)\)", r"\1", text)
