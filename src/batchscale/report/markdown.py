"""report.md: the same content as report.html in Markdown, for reading in a terminal or on a code host.

Figures are linked by relative path (the PNGs sit in the output directory or next to analysis.json); the HTML is the
self-contained version. The heading, an "Answer:" line and the table's marks follow the kind of answer
(plan/answer.py): a resolved winner's row is starred and bold, a tie's members "=", a near-optimal set's "\u2248",
an unresolved answer's best estimate "?", the lone reference "\u25cb". Every text that came from input
(labels, names, paths, notes) is escaped (markup.py): raw HTML and link or image syntax in a label stays text.
"""

from __future__ import annotations

import os
from pathlib import Path

from batchscale.analysis.prediction import closing_note
from batchscale.markup import markdown_link, markdown_text
from batchscale.report.figure import Figure
from batchscale.report.inputs import ReportInputs
from batchscale.report.samples import samples_markdown
from batchscale.plan.answer import classify_answer
from batchscale.report.tables import DECISION_HEADER, decision_rows, doubts_checked, measurement_notes, verdict


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
    answer = classify_answer(plan)
    table = []
    for row, cells in decision_rows(plan):
        mark = answer.row(row).mark  # the cells are escaped by render_table; the marks and bold are ours
        if mark:
            cells = [f"**{mark} {cells[0]}**" if answer.kind == "winner" else f"{mark} {cells[0]}"] + cells[1:]
        table.append(cells)
    lines = [
        f"# batchscale report: {markdown_text(inputs.sweep_dir.name)}",
        "",
        f"## {markdown_text(answer.heading)}",
        "",
        f"> **Answer: {markdown_text(answer.badge)}.** {markdown_text(answer.meaning)}",
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
        markdown_text(answer.legend()),
        "",
        *doubts_markdown(inputs),
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


def doubts_markdown(inputs: ReportInputs) -> list[str]:
    """The doubts section (plan/doubts.py), each with what to do; what was checked when nothing was found."""
    if not inputs.doubts:
        return ["## Doubts", "", f"None found. {markdown_text(doubts_checked())}", ""]
    return [f"## Doubts ({len(inputs.doubts)})", "",
            "Measurements the decision rests on that should not be trusted as printed:", "",
            *(f"- **{markdown_text(d.finding)}.** What to do: {markdown_text(d.action)}." for d in inputs.doubts),
            "", markdown_text(doubts_checked()), ""]


def learning_detail(inputs: ReportInputs) -> list[str]:
    """The analysis's own report.md body (its table, alignment statistic, target rule, warnings), headings demoted
    one level. This file replaces that report.md in the sweep directory, so it must carry all of it."""
    from batchscale.analysis.report import render_report

    text = render_report(inputs.analysis, inputs.details, figures=False)  # the figures are above already
    return [f"#{line}" if line.startswith("#") else line for line in text.splitlines()]
