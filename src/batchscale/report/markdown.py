"""report.md: the same content as report.html in Markdown, for reading in a terminal or on a code host.

Figures are linked by relative path (the PNGs sit in the output directory or next to analysis.json); the HTML is the
self-contained version. The winner's row is marked with a star and bold label. Every text that came from input
(labels, names, paths, notes) is escaped (markup.py): raw HTML and link or image syntax in a label stays text.
"""

from __future__ import annotations

import os
from pathlib import Path

from batchscale.analysis.prediction import closing_note
from batchscale.markup import markdown_link, markdown_text
from batchscale.report.figures import Figure
from batchscale.report.inputs import ReportInputs
from batchscale.report.samples import samples_markdown
from batchscale.report.tables import DECISION_HEADER, decision_rows, headline, measurement_notes, verdict


def _cell(text: str) -> str:
    return markdown_text(text)


def render_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(_cell(c) for c in cells) + " |" for cells in rows)]


def figure_link(figure: Figure, out_dir: Path) -> str:
    """Relative path from the report to the PNG: the drawn ones are written into out_dir, the reused ones stay put."""
    target = out_dir / figure.name if figure.drawn else figure.path
    return Path(os.path.relpath(target, out_dir)).as_posix()


def render_markdown(inputs: ReportInputs, figures: list[Figure], out_dir: Path) -> str:
    plan = inputs.plan
    best, near = plan.get("best"), plan.get("near_optimal") or []
    table = []
    for row, cells in decision_rows(plan):
        if row["label"] == best:  # the cells are escaped by render_table; the star and bold are ours
            cells = [f"**\u2605 {cells[0]}**"] + cells[1:]
        elif row["label"] in near:
            cells = [f"\u2248 {cells[0]}"] + cells[1:]
        table.append(cells)
    lines = [
        f"# batchscale report: {markdown_text(inputs.sweep_dir.name)}",
        "",
        f"## {markdown_text(headline(plan))}",
        "",
        markdown_text(plan["explanation"]),
        "",
        f"**{markdown_text(verdict(plan))}**",
        "",
        f"**Regime ({markdown_text(plan['regime']['name'])}):** {markdown_text(plan['regime']['sentence'])}",
        "",
        f"Reference {markdown_text(plan['reference'])}; T = N*/q is the time to reach the target score, T/T_ref = rN / (q/q_ref).",
        "",
        "## Decision table",
        "",
        *render_table(DECISION_HEADER, table),
        "",
        ("\u2605 the winner (the fastest, when the answer is a near-optimal set; \u2248 the set's other members). "
         "Rows that cannot be named best: infeasible, censored in at least one seed, or stopped by a racing sweep; a "
         "censored one is ruled out only by its bound (\"(cut)\": the budget cut it, it was not beaten)."),
        "",
        "## Figures",
        "",
    ]
    for figure in figures:
        link = figure_link(figure, out_dir)
        title = markdown_text(figure.title)
        lines += [f"### {title}", "", f"![{title}]({markdown_link(link)})", "", markdown_text(figure.caption), ""]
    note = closing_note(inputs.analysis, plan)
    lines += [*samples_markdown(inputs.samples), *learning_detail(inputs),
              *(["", "## Closing note", "", markdown_text(note)] if note else []),
              "", "## How this was measured", "",
              *(f"- {markdown_text(note)}" for note in measurement_notes(inputs)), ""]
    return "\n".join(lines)


def learning_detail(inputs: ReportInputs) -> list[str]:
    """The analysis's own report.md body (its table, alignment statistic, target rule, warnings), headings demoted
    one level. This file replaces that report.md in the sweep directory, so it must carry all of it."""
    from batchscale.analysis.report import render_report

    text = render_report(inputs.analysis, inputs.details, figures=False)  # the figures are above already
    return [f"#{line}" if line.startswith("#") else line for line in text.splitlines()]
