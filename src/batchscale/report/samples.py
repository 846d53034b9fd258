"""What the policy said: per label, the examples of its first and its last eval (samples.jsonl, rundir.samples) from
the label's lowest seed that logged any, side by side, since every eval scores the same fixed prompts. This is how
a reward being gamed, or a format the scorer rejects, shows.

Everything in these rows is model output or user data: control characters, terminal escapes and bidirectional
overrides are shown as visible escapes (markup.inert), then it is escaped for HTML and for Markdown (which passes raw
HTML through), newlines shown as the return symbol, and long texts cut to MAX_CHARS.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from html import escape
from pathlib import Path

from batchscale.errors import DataWarning
from batchscale.markup import html_text, inert
from batchscale.rundir import find_run_dirs
from batchscale.rundir.run import read_descriptor
from batchscale.rundir.samples import SampleRow, first_and_last_evals

MAX_CHARS = 200
NEWLINE = "\u21b5"
MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")
HEADER = ["prompt", "answer", "first eval", "last eval"]


@dataclass(frozen=True)
class LabelSamples:
    label: str
    seed: int
    first: list[SampleRow]  # the rows of the label's first eval
    last: list[SampleRow]  # and of its last

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(prompt, answer, first response, last response), each response with its reward."""
        return [(first.prompt, first.answer, said(first), said(last) if last is not None else "")
                for first, last in zip(self.first, self.last + [None] * (len(self.first) - len(self.last)))]

    def caption(self) -> str:
        first, last = self.first[0], self.last[0]
        return (f"{self.label}, seed {self.seed}: greedy responses at step {first.step} ({first.samples:,} samples) "
                f"and at step {last.step} ({last.samples:,} samples), each with its reward")


def said(row: SampleRow) -> str:
    return f"{shorten(row.response)} (reward {row.reward:.3g})"


def shorten(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\n", NEWLINE)
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "\u2026"


def collect_samples(sweep_dir: Path) -> list[LabelSamples]:
    """Per label (sorted), the first and last eval's samples of its lowest seed that logged any."""
    chosen: dict[str, tuple[int, list[SampleRow]]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # the analysis reported a run's torn lines already
        for run_dir in find_run_dirs(Path(sweep_dir)):
            rows = first_and_last_evals(run_dir)  # streamed: a long run's samples.jsonl is never held whole
            if not rows:
                continue
            descriptor = read_descriptor(run_dir)
            if descriptor.label not in chosen or descriptor.seed < chosen[descriptor.label][0]:
                chosen[descriptor.label] = (descriptor.seed, rows)
    found = []
    for label, (seed, rows) in sorted(chosen.items()):
        first_step, last_step = rows[0].step, rows[-1].step
        found.append(LabelSamples(label, seed, [r for r in rows if r.step == first_step],
                                  [r for r in rows if r.step == last_step]))
    return found


def markdown_text(text: str) -> str:
    return MARKDOWN_SPECIAL.sub(r"\\\1", escape(inert(text), quote=False)) or "(empty)"


def samples_markdown(items: list[LabelSamples]) -> list[str]:
    if not items:
        return []
    lines = ["## What the policy said", ""]
    for item in items:
        lines += [f"### {markdown_text(item.label)}", "", markdown_text(item.caption()), "",
                  "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER),
                  *("| " + " | ".join(markdown_text(cell) for cell in cells) + " |" for cells in item.rows()), ""]
    return lines


def samples_html(items: list[LabelSamples]) -> str:
    if not items:
        return ""
    parts = ['<h2 id="samples">What the policy said</h2>']
    for item in items:
        head = "".join(f'<th scope="col">{html_text(h)}</th>' for h in HEADER)
        body = "\n".join("<tr>" + "".join(f'<td class="said">{html_text(cell)}</td>' for cell in cells) + "</tr>"
                         for cells in item.rows())
        parts += [f"<h3>{html_text(item.label)}</h3>", f'<p class="muted">{html_text(item.caption())}</p>',
                  f'<table class="samples">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>']
    return "\n".join(parts)
