"""What the policy said, and what training changed (issue 45): per label, how many eval answers its runs fixed (wrong
at the first eval, right at the last) and broke (right -> wrong), counted over every seed, with a few fixed and broken
examples side by side. Every eval scores the same fixed prompts, so a prompt's first and last responses compare
directly; this is how a reward being gamed, or a format the scorer rejects, shows.

What is counted is what samples.jsonl stores (rundir.samples): each eval writes its first `run.log_samples` examples
(4 by default), so the counts are over those prompts, not the whole eval set, and the section says how many; the
stored examples' accuracy at both evals is shown beside the runs' own eval/accuracy, so a stored subset that is not
representative shows. Right and wrong are the row's `correct` (what eval/accuracy counted); a samples.jsonl written
before `correct` existed has none, and then only the responses that changed are shown, uncounted.

Everything in these rows is model output or user data: control characters, terminal escapes and bidirectional
overrides are shown as visible escapes (markup.inert), then it is escaped for HTML and for Markdown (which passes raw
HTML through), newlines shown as the return symbol, and long texts cut to MAX_CHARS.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from batchscale.errors import DataWarning
from batchscale.markup import html_text, inert
from batchscale.markup import markdown_text as markup_text
from batchscale.rundir import find_run_dirs, primary_eval_score, read_run
from batchscale.rundir.samples import SampleRow, first_and_last_evals

MAX_CHARS = 200
MAX_SHOWN = 3  # fixed and broken examples shown per label
NEWLINE = "\u21b5"
MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")
COUNT_HEADER = ["label", "seeds", "prompts per eval", "fixed (wrong -> right)", "broken (right -> wrong)",
                "right at both", "wrong at both", "stored accuracy first -> last", "eval/accuracy first -> last"]
EXAMPLE_HEADER = ["change", "seed", "prompt", "answer", "first eval", "last eval"]


@dataclass(frozen=True)
class Change:
    """One prompt at a run's first and last eval."""

    seed: int
    first: SampleRow
    last: SampleRow

    @property
    def kind(self) -> str:
        """"fixed", "broken", "right", "wrong", or "unknown" (correctness not recorded at either eval)."""
        a, b = self.first.correct, self.last.correct
        if a is None or b is None:
            return "unknown"
        return {(False, True): "fixed", (True, False): "broken", (True, True): "right", (False, False): "wrong"}[(a, b)]


@dataclass
class LabelSamples:
    """A label's first-vs-last comparison over its seeds."""

    label: str
    seeds: list[int] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    prompts_per_eval: int = 0
    eval_accuracy: list[tuple[float, float]] = field(default_factory=list)  # per seed, eval/accuracy first and last

    def count(self, kind: str) -> int:
        return sum(c.kind == kind for c in self.changes)

    def examples(self, kind: str) -> list[Change]:
        """Up to MAX_SHOWN changes of `kind` ("changed": responses that differ, for rows without correctness)."""
        if kind == "changed":
            chosen = [c for c in self.changes if c.kind == "unknown" and c.first.response != c.last.response]
        else:
            chosen = [c for c in self.changes if c.kind == kind]
        return chosen[:MAX_SHOWN]

    def stored_accuracy(self) -> str:
        known = [c for c in self.changes if c.kind != "unknown"]
        if not known:
            return "not recorded"
        return f"{sum(c.first.correct for c in known) / len(known):.2f} -> {sum(c.last.correct for c in known) / len(known):.2f}"

    def counts(self) -> list[str]:
        """The counting table's cells for this label."""
        recorded = self.count("unknown") < len(self.changes)
        counted = (lambda kind: str(self.count(kind))) if recorded else (lambda kind: "not recorded")
        runs = [f"{a:.2f} -> {b:.2f}" for a, b in self.eval_accuracy]
        return [self.label, str(len(self.seeds)), str(self.prompts_per_eval), counted("fixed"), counted("broken"),
                counted("right"), counted("wrong"), self.stored_accuracy(), "; ".join(runs) or "-"]


def example_cells(kind: str, change: Change) -> list[str]:
    return [kind, str(change.seed), change.first.prompt, change.first.answer, said(change.first), said(change.last)]


def said(row: SampleRow) -> str:
    mark = "" if row.correct is None else (" right" if row.correct else " wrong")
    return f"{shorten(row.response)} (reward {row.reward:.3g}{mark}, step {row.step})"


def shorten(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\n", NEWLINE)
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "\u2026"


def pair_evals(rows: list[SampleRow], seed: int) -> list[Change]:
    """The first eval's rows against the last eval's, prompt by prompt (both hold the eval set's first
    `run.log_samples` prompts, in order); [] when the run has one eval only."""
    first = [r for r in rows if r.step == rows[0].step]
    last = [r for r in rows if r.step == rows[-1].step]
    if rows[0].step == rows[-1].step:
        return []
    return [Change(seed, a, b) for a, b in zip(first, last) if a.prompt == b.prompt]


def first_and_last_accuracy(run) -> tuple[float, float] | None:
    scores = [s for s in (primary_eval_score(r) for r in run.evals) if s is not None]
    return (scores[0], scores[-1]) if len(scores) >= 2 else None


def collect_samples(sweep_dir: Path) -> list[LabelSamples]:
    """Per label (batch order), its seeds' first-vs-last comparisons, for the labels whose runs logged samples."""
    found: dict[str, LabelSamples] = {}
    batch: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # the analysis reported a run's torn lines already
        for run_dir in find_run_dirs(Path(sweep_dir)):
            rows = first_and_last_evals(run_dir)  # streamed: a long run's samples.jsonl is never held whole
            if not rows:
                continue
            run = read_run(run_dir)
            changes = pair_evals(rows, run.seed)
            if not changes:
                continue
            item = found.setdefault(run.label, LabelSamples(run.label))
            batch[run.label] = run.descriptor.samples_per_step
            item.seeds.append(run.seed)
            item.changes.extend(changes)
            item.prompts_per_eval = max(item.prompts_per_eval, len(changes))
            if (accuracy := first_and_last_accuracy(run)) is not None:
                item.eval_accuracy.append(accuracy)
    for item in found.values():
        order = sorted(range(len(item.seeds)), key=lambda i: item.seeds[i])
        item.seeds = [item.seeds[i] for i in order]
        item.changes.sort(key=lambda c: c.seed)
    return [found[label] for label in sorted(found, key=lambda label: (batch[label], label))]


def caption(items: list[LabelSamples]) -> str:
    most = max(item.prompts_per_eval for item in items)
    recorded = any(item.count("unknown") < len(item.changes) for item in items)
    text = (f"Each run's first eval against its last, prompt by prompt, summed over a label's seeds, over the {most} "
            f"prompt{'s' if most != 1 else ''} samples.jsonl keeps from each eval (its first run.log_samples; set "
            "run.log_samples to the eval set's size to count every prompt). Fixed: wrong at the first eval, right "
            "at the last; broken: the reverse (right = what eval/accuracy counted). The stored prompts' accuracy "
            "stands beside each seed's eval/accuracy: far apart, the stored prompts are not representative.")
    if not recorded:
        text += (" These samples.jsonl files record no correctness (written before `correct` was kept): nothing is "
                 "counted, and the examples are responses that changed.")
    return text


def sections(item: LabelSamples) -> list[tuple[str, list[Change]]]:
    if item.count("unknown") == len(item.changes):
        return [("changed", item.examples("changed"))]
    return [("fixed", item.examples("fixed")), ("broken", item.examples("broken"))]


def markdown_text(text: str) -> str:
    """Model output as Markdown: HTML-escaped, then every character Markdown could act on backslashed (stricter than
    markup.markdown_text, which the labels and the section's own words go through)."""
    return MARKDOWN_SPECIAL.sub(r"\\\1", escape(inert(text), quote=False)) or "(empty)"


def markdown_row(cells: list[str], text=markup_text) -> str:
    return "| " + " | ".join(text(cell) for cell in cells) + " |"


def samples_markdown(items: list[LabelSamples]) -> list[str]:
    if not items:
        return []
    lines = ["## What the policy said: answers fixed and broken", "", markup_text(caption(items)), "",
             markdown_row(COUNT_HEADER), "|" + "---|" * len(COUNT_HEADER), *(markdown_row(i.counts()) for i in items),
             ""]
    for item in items:
        shown = [(kind, c) for kind, changes in sections(item) for c in changes]
        if shown:
            lines += [f"### {markup_text(item.label)}", "", markdown_row(EXAMPLE_HEADER),
                      "|" + "---|" * len(EXAMPLE_HEADER),
                      *(markdown_row(example_cells(k, c), markdown_text) for k, c in shown), ""]
    return lines


def html_rows(rows: list[list[str]], css: str | None = None) -> str:
    cell = f'<td class="{css}">' if css else "<td>"
    return "\n".join("<tr>" + "".join(f"{cell}{html_text(c)}</td>" for c in cells) + "</tr>" for cells in rows)


def html_head(header: list[str]) -> str:
    return "".join(f'<th scope="col">{html_text(h)}</th>' for h in header)


def samples_html(items: list[LabelSamples]) -> str:
    if not items:
        return ""
    parts = ['<h2 id="samples">What the policy said: answers fixed and broken</h2>',
             f'<p class="muted">{html_text(caption(items))}</p>',
             f'<table id="samples-counts">\n<thead><tr>{html_head(COUNT_HEADER)}</tr></thead>\n<tbody>\n'
             f"{html_rows([i.counts() for i in items])}\n</tbody>\n</table>"]
    for item in items:
        shown = [example_cells(kind, c) for kind, changes in sections(item) for c in changes]
        if shown:
            parts += [f"<h3>{html_text(item.label)}</h3>",
                      f'<table class="samples">\n<thead><tr>{html_head(EXAMPLE_HEADER)}</tr></thead>\n<tbody>\n'
                      f'{html_rows(shown, "said")}\n</tbody>\n</table>']
    return "\n".join(parts)
