"""report.html: one self-contained file that opens offline. Plain HTML and a little CSS, no scripts, no network: every
figure is an <img> with a base64 `data:image/png` URI. Every text from the inputs is HTML-escaped.

Layout: the decision (a box whose colour, badge and heading say the kind of answer, plan/answer.py; the
explanation, the verdict, the regime), the decision table with its rows marked by that kind, the doubts, the
figures, what the policy said, the learning-side table, and how each number was measured.

Why f-strings and not jinja2 templates (issue 46): the page is one screen of code, and every text reaches it through
markup.html_text (inert, then html.escape), which tests/test_escaping.py pins; jinja2's autoescape escapes
differently (`'` as &#39;, no inert step), so templates would run with it off and this filter on, a second language
for the same page with nothing gained.
"""

from __future__ import annotations

import base64

from batchscale.analysis.prediction import closing_note
from batchscale.files import TooLarge, read_bytes_capped, too_large
from batchscale.markup import html_text
from batchscale.report.figure import Figure
from batchscale.report.inputs import ReportInputs
from batchscale.report.samples import samples_html
from batchscale.plan.answer import classify_answer
from batchscale.report.tables import (DECISION_HEADER, LEARNING_HEADER, decision_rows, doubts_checked, learning_rows,
                                      measurement_notes, verdict)

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
.decision { border: 3px solid; border-radius: 6px; padding: 0.8em 1.2em; margin: 1em 0; }
.decision .badge { display: inline-block; color: #fff; font-weight: 700; font-size: 0.85em; letter-spacing: 0.04em;
                   text-transform: uppercase; padding: 0.15em 0.6em; border-radius: 3px; margin: 0; }
.decision .headline { font-size: 1.3em; font-weight: 600; margin: 0.4em 0 0.2em; }
.decision .meaning { margin-top: 0; }
.kind-winner { border-color: #2e7d32; background: #f1f8e9; } .kind-winner .badge { background: #2e7d32; }
.kind-tie { border-color: #1565c0; background: #e3f2fd; } .kind-tie .badge { background: #1565c0; }
.kind-near_optimal { border-color: #e65100; background: #fff3e0; } .kind-near_optimal .badge { background: #e65100; }
.kind-unresolved { border-color: #616161; border-style: dashed; background: #f5f5f5; }
.kind-unresolved .badge { background: #616161; }
.kind-reference_only { border-color: #6a1b9a; background: #f3e5f5; } .kind-reference_only .badge { background: #6a1b9a; }
.kind-none { border-color: #c62828; background: #ffebee; } .kind-none .badge { background: #c62828; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
tr.winner td { background: #c8e6c9; font-weight: 600; }
tr.tie td { background: #bbdefb; font-weight: 600; }
tr.near td { background: #ffe0b2; }
tr.estimate td { background: #eeeeee; font-style: italic; }
tr.only td { background: #e1bee7; }
tr.ineligible td { color: #888; }
.doubts { border-left: 5px solid #f9a825; background: #fffde7; padding: 0.2em 1em; margin: 1em 0; }
.doubts.none { border-left-color: #9e9e9e; background: #fafafa; }
.doubts h2 { margin: 0.4em 0; font-size: 1.2em; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 1em; }
figure { margin: 0; }
figure img { width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #555; }
.muted { color: #666; font-size: 0.9em; }
table.samples th, table.samples td.said { text-align: left; }
table.samples td.said { white-space: pre-wrap; font-family: ui-monospace, monospace; }
"""


MAX_FIGURE_BYTES = 64 * 2**20  # a PNG the analysis drew is a few hundred kB


def image_data_uri(figure: Figure) -> str:
    """The PNG inlined; read under a cap, since a figure reused from the sweep directory is a file like any other."""
    try:
        data = read_bytes_capped(figure.path, MAX_FIGURE_BYTES)
    except TooLarge as e:
        raise too_large(figure.path, e) from None
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def render_table(header: list[str], rows: list[tuple[str | None, list[str]]], table_id: str) -> str:
    """rows: (css class or None, cells)."""
    head = "".join(f'<th scope="col">{html_text(h)}</th>' for h in header)
    body = "\n".join(
        (f'<tr class="{css}">' if css else "<tr>") + "".join(f"<td>{html_text(c)}</td>" for c in cells) + "</tr>"
        for css, cells in rows
    )
    return f'<table id="{table_id}">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>'


def render_decision(inputs: ReportInputs) -> str:
    """The decision box: its colour, badge and heading follow the kind of answer (plan/answer.py)."""
    plan = inputs.plan
    regime, answer = plan["regime"], classify_answer(plan)
    return (
        f'<section class="decision kind-{answer.kind}" id="decision" data-answer="{answer.kind}">\n'
        f'<p class="badge" id="answer-badge">{html_text(answer.badge)}</p>\n'
        f'<p class="headline" id="headline">{html_text(answer.heading)}</p>\n'
        f'<p class="meaning" id="meaning">{html_text(answer.meaning)}</p>\n'
        f'<p id="explanation">{html_text(plan["explanation"])}</p>\n'
        f'<p id="verdict"><strong>{html_text(verdict(plan))}</strong></p>\n'
        f'<p id="regime"><strong>Regime ({html_text(regime["name"])}):</strong> {html_text(regime["sentence"])}</p>\n'
        f'<p class="muted">Reference {html_text(plan["reference"])}; T = N*/q is the time to reach the target score, '
        f"T/T_ref = rN / (q/q_ref).</p>\n</section>"
    )


def render_decision_table(inputs: ReportInputs) -> str:
    """The decision table, its rows marked and coloured by the kind of answer (plan/answer.py)."""
    answer = classify_answer(inputs.plan)
    rows = []
    for row, cells in decision_rows(inputs.plan):
        marked = answer.row(row)
        rows.append((marked.css, [f"{marked.mark} {cells[0]}" if marked.mark else cells[0]] + cells[1:]))
    return render_table(DECISION_HEADER, rows, "decision-table")


def render_doubts(inputs: ReportInputs) -> str:
    """The measurements to doubt (plan/doubts.py), each with what to do; what was checked when nothing was found."""
    if not inputs.doubts:
        return (f'<section class="doubts none" id="doubts">\n<h2>Doubts</h2>\n<p>None found. '
                f"{html_text(doubts_checked())}</p>\n</section>")
    items = "\n".join(f'<li class="doubt {html_text(d.kind)}"><strong>{html_text(d.finding)}.</strong> What to do: '
                      f"{html_text(d.action)}.</li>" for d in inputs.doubts)
    return (f'<section class="doubts" id="doubts">\n<h2>Doubts ({len(inputs.doubts)})</h2>\n'
            "<p>Measurements the decision rests on that should not be trusted as printed:</p>\n"
            f'<ul>\n{items}\n</ul>\n<p class="muted">{html_text(doubts_checked())}</p>\n</section>')


def render_figure(figure: Figure) -> str:
    return (f'<figure id="fig-{html_text(figure.name.removesuffix(".png"))}">\n<img src="{image_data_uri(figure)}" '
            f'alt="{html_text(figure.title)}">\n<figcaption><strong>{html_text(figure.title)}.</strong> '
            f"{html_text(figure.caption)}</figcaption>\n</figure>")


def render_html(inputs: ReportInputs, figures: list[Figure]) -> str:
    title = f"batchscale report: {inputs.sweep_dir.name}"
    learning = render_table(LEARNING_HEADER, [(None, cells) for cells in learning_rows(inputs.analysis)],
                            "learning-table")
    notes = "\n".join(f"<li>{html_text(note)}</li>" for note in measurement_notes(inputs))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        f'<head>\n<meta charset="utf-8">\n<title>{html_text(title)}</title>\n<style>{CSS}</style>\n</head>',
        "<body>",
        f"<h1>{html_text(title)}</h1>",
        '<p class="muted">Which batch configuration reaches the target score soonest in wall-clock time on this '
        "machine, and why (two-stage procedure of arXiv 2608.29296: align learning, then accelerate).</p>",
        render_decision(inputs),
        "<h2>Decision table</h2>",
        render_decision_table(inputs),
        f'<p class="muted" id="marks">{html_text(classify_answer(inputs.plan).legend())}</p>',
        render_doubts(inputs),
        "<h2>Figures</h2>",
        '<div class="figures">', *(render_figure(f) for f in figures), "</div>",
        *([section] if (section := samples_html(inputs.samples)) else []),
        "<h2>Learning side (analysis.json)</h2>",
        learning,
        *([f'<h2 id="prediction">Predicted from one run</h2>\n<p>{html_text(note)}</p>']
          if (note := closing_note(inputs.analysis, inputs.plan)) else []),
        '<h2 id="how-measured">How this was measured</h2>',
        f"<ul>\n{notes}\n</ul>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"
