"""report.html opens in a real browser: headless Chromium (Debian package `chromium`) renders it offline and the decision
table is in the rendered DOM. Skipped when Chromium is not installed; CI installs it (`apt-get install -y chromium`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from report_fixtures import WINNER, make_timed_sweep, write_generation_profile

from batchscale.analysis.analyze import analyze
from batchscale.report.build import build_report

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser"))
                 if p and Path(p).is_file()), None)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install -y chromium)")
def test_html_renders_decision_table_in_headless_chromium(tmp_path):
    sweep = make_timed_sweep(tmp_path / "sweep")
    analyze(sweep)
    report_html = build_report(sweep, write_generation_profile(tmp_path / "gen.json"), None)
    dom = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", "--dump-dom", report_html.as_uri()],
        capture_output=True, text=True, timeout=180, check=True,
    ).stdout
    assert '<table id="decision-table">' in dom
    table = dom.split('<table id="decision-table">', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr") == 7  # header + six configurations
    assert '<tr class="near">' in table and f"\u2248 {WINNER}" in table  # a near-optimal set, not separated
    assert 'data-answer="near_optimal"' in dom and "Near-optimal set: any of" in dom
    assert dom.count('src="data:image/png;base64,') == 7  # the decision's two, four learning, the generation profile
