"""`build_report`: plan the sweep, gather its figures, and write report.html and report.md, all or nothing.

Order: every input is read and validated first (a UserError leaves the output directory untouched), then every file is
rendered under a temporary name in a scratch directory inside the output directory, and only then moved into place with
os.replace. Written: report.html, report.md, and the PNGs the report drew itself (the decision's two, the systems
plots, and the learning plots when analysis.json's own were missing); the analysis's PNGs are reused where they are.
Note: `batchscale analyze` also writes a learning-side report.md; this one replaces it and carries its table.
"""

from __future__ import annotations

import os
from pathlib import Path

from batchscale.report.figures import DRAWN_FILES, collect_figures, make_work_dir
from batchscale.report.html import render_html
from batchscale.report.inputs import gather_inputs
from batchscale.report.markdown import render_markdown

HTML_FILE, MARKDOWN_FILE = "report.html", "report.md"
REPORT_OUTPUTS = (HTML_FILE, MARKDOWN_FILE, *DRAWN_FILES)  # what write_report may add to out_dir


def build_report(
    sweep_dir: Path,
    generation_profile: Path | None = None,
    training_profile: Path | None = None,
    out_dir: Path | None = None,
) -> Path:
    """Write report.html and report.md into `out_dir` (default: the sweep directory); return report.html's path."""
    return write_report(sweep_dir, generation_profile, training_profile, out_dir)["report_html"]


def write_report(sweep_dir: Path, generation_profile: Path | None = None, training_profile: Path | None = None,
                 out_dir: Path | None = None, allow_mixed: bool = False) -> dict:
    """As `build_report`, returning {"report_html", "report_md", "figures", "plan"} (paths as Path objects)."""
    inputs = gather_inputs(Path(sweep_dir), generation_profile, training_profile, allow_mixed)
    out_dir = Path(out_dir) if out_dir is not None else Path(sweep_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with make_work_dir(out_dir) as scratch:
        work_dir = Path(scratch)
        figures = collect_figures(inputs, work_dir)
        staged = {f.name: f.path for f in figures if f.drawn}
        for name, text in ((HTML_FILE, render_html(inputs, figures)), (MARKDOWN_FILE, render_markdown(inputs, figures,
                                                                                                     out_dir))):
            staged[name] = work_dir / f".{name}.tmp"
            staged[name].write_text(text, encoding="utf-8")
        for name, temporary in staged.items():  # the report files last, so they never point at a missing PNG
            if name not in (HTML_FILE, MARKDOWN_FILE):
                os.replace(temporary, out_dir / name)
        os.replace(staged[MARKDOWN_FILE], out_dir / MARKDOWN_FILE)
        os.replace(staged[HTML_FILE], out_dir / HTML_FILE)
    return {
        "report_html": out_dir / HTML_FILE,
        "report_md": out_dir / MARKDOWN_FILE,
        "figures": [out_dir / f.name if f.drawn else f.path for f in figures],
        "plan": inputs.plan,
    }
