"""report.html: one self-contained file that opens offline. Plain HTML and a little CSS, no scripts, no network: every
figure is an <img> with a base64 `data:image/png` URI. Every text from the inputs is HTML-escaped.

Layout: the decision (winner, the one-sentence explanation, the regime), the decision table with the winner's row
highlighted, the figures, the learning-side table, and how each number was measured.

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
from batchscale.report.figures import Figure
from batchscale.report.inputs import ReportInputs
from batchscale.report.samples import samples_html
from batchscale.report.tables import (DECISION_HEADER, LEARNING_HEADER, decision_rows, headline, learning_rows, verdict,
                                      measurement_notes)

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
.decision { border: 2px solid #2e7d32; background: #f1f8e9; border-radius: 6px; padding: 0.8em 1.2em; margin: 1em 0; }
.decision.none { border-color: #c62828; background: #ffebee; }
.decision .winner { font-size: 1.3em; font-weight: 600; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
tr.winner td { background: #c8e6c9; font-weight: 600; }
tr.near td { background: #e8f5e9; }
tr.ineligible td { color: #888; }
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
    plan = inputs.plan
    regime = plan["regime"]
    css = "decision" if plan.get("best") else "decision none"
    return (
        f'<section class="{css}" id="decision">\n'
        f'<p class="winner" id="winner">{html_text(headline(plan))}</p>\n'
        f'<p id="explanation">{html_text(plan["explanation"])}</p>\n'
        f'<p id="verdict"><strong>{html_text(verdict(plan))}</strong></p>\n'
        f'<p id="regime"><strong>Regime ({html_text(regime["name"])}):</strong> {html_text(regime["sentence"])}</p>\n'
        f'<p class="muted">Reference {html_text(plan["reference"])}; T = N*/q is the time to reach the target score, '
        f"T/T_ref = rN / (q/q_ref).</p>\n</section>"
    )


def render_decision_table(inputs: ReportInputs) -> str:
    best, near = inputs.plan.get("best"), inputs.plan.get("near_optimal") or []
    rows = []
    for row, cells in decision_rows(inputs.plan):
        css = "winner" if row["label"] == best else (
            "near" if row["label"] in near else (None if row.get("eligible", True) else "ineligible"))
        mark = {"winner": "\u2605 ", "near": "\u2248 "}.get(css, "")
        rows.append((css, [mark + cells[0]] + cells[1:]))
    return render_table(DECISION_HEADER, rows, "decision-table")


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
        '<p class="muted">\u2605 the winner (the fastest, when the answer is a near-optimal set; \u2248 the set\'s '
        'other members). Grey rows cannot be named best: infeasible, censored in at least one seed, or stopped by a '
        'racing sweep; a censored one is ruled out only by its bound ("(cut)": the budget cut it, it was not '
        'beaten).</p>',
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
