"""What every console-log reader shares: undoing what Ray, colour codes and progress bars do to printed lines, numbers
printed as Python/numpy reprs, and Python literals (a pprinted config, a status dict) read with `ast.literal_eval`.

Ray prefixes each line a worker prints with `(ActorName pid=N[, ip=A.B.C.D])` and collapses repeats into
`... [repeated Nx across cluster]`; loggers may colour lines with ANSI escapes; tqdm bars share a line with printed text,
separated by carriage returns. `clean_segments` yields the printed text with all of that removed.
"""

from __future__ import annotations

import ast
import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RAY_PREFIX = re.compile(r"^\s*\((?:[\w.:<>-]+ )?pid=\d+(?:, ip=[0-9A-Fa-f.:]+)?\)\s?")
RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
NUMPY_REPR = re.compile(r"^np\.(?:float|int|uint)\d+\((.*)\)$")  # numpy >= 2 reprs: np.float64(0.5), np.int64(3)
MAX_LITERAL_LINES = 5000  # a pprinted verl config is a few hundred lines
QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")  # a Python string repr on one line


def clean_segments(line: str):
    """The printed texts in one raw log line (split at carriage returns), without Ray prefixes and ANSI codes."""
    for segment in ANSI.sub("", line).split("\r"):
        text = RAY_REPEATED.sub("", RAY_PREFIX.sub("", segment)).rstrip()
        if text.strip():
            yield text


def clean_lines(text: str) -> list[tuple[int, str]]:
    """(1-based line number, cleaned text) for every printed text in a console log."""
    return [(number, segment) for number, line in enumerate(text.split("\n"), start=1)
            for segment in clean_segments(line)]


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


def read_literal(lines: list[tuple[int, str]], start: int, opener: str = "{"):
    """(value, index after it) of the Python literal starting at `lines[start]` (its text from the first `opener`),
    possibly spanning lines as pprint prints it (continuation lines indented); None when it does not close within
    MAX_LITERAL_LINES or does not parse. Each line is scanned once and the literal parsed once: linear in the log."""
    first = lines[start][1]
    parts = [first[first.index(opener):]]
    depth = bracket_balance(parts[0])
    index = start
    while depth > 0:
        index += 1
        if index >= len(lines) or index - start >= MAX_LITERAL_LINES or not continued(lines[index][1]):
            return None
        parts.append(lines[index][1])
        depth += bracket_balance(parts[-1])
    try:
        return ast.literal_eval(unwrap_numpy_reprs("\n".join(parts))), index + 1
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def read_printed_string(lines: list[tuple[int, str]], start: int) -> tuple[str, int] | None:
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
            index += 1
            if index >= len(lines) or index - start >= MAX_LITERAL_LINES or not continued(lines[index][1]):
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
