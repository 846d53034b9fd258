"""`build_report` and `batchscale report` on synthetic sweeps with a known winner (see report_fixtures.py): the decision
table and explanation in report.html and report.md, self-contained figures, all-or-nothing writes, clear errors."""

from __future__ import annotations

import base64
import html
import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_fixtures import MACHINE, WINNER, make_timed_sweep, write_generation_profile, write_training_profile

from batchscale.analysis.analyze import analyze
from batchscale.cli import main
from batchscale.markup import markdown_text
from batchscale.plan.make import make_plan
from batchscale.report.build import build_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LEARNING_PNGS = ("j_vs_samples.png", "j_vs_steps.png", "grad_norm_vs_batch.png", "r_n_vs_batch.png")
DECISION_PNGS = ("time_ratio_vs_batch.png", "j_vs_wall_clock.png")


class ReportParser(HTMLParser):
    """Collects <img> sources, the decision table's rows (cell texts) and their classes, and any <script>/<link>."""

    def __init__(self):
        super().__init__()
        self.images, self.rows, self.row_classes, self.external = [], [], [], []
        self._in_decision, self._cell = False, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        elif tag in ("script", "link", "iframe"):
            self.external.append(tag)
        elif tag == "table":
            self._in_decision = attrs.get("id") == "decision-table"
        elif tag == "tr" and self._in_decision:
            self.rows.append([])
            self.row_classes.append(attrs.get("class"))
        elif tag == "td" and self._in_decision:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_decision = False
        elif tag == "td" and self._cell is not None:
            self.rows[-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def parse(path: Path) -> ReportParser:
    parser = ReportParser()
    parser.feed(path.read_text(encoding="utf-8"))
    body = [i for i, cells in enumerate(parser.rows) if cells]  # the header row has <th> cells only
    parser.rows, parser.row_classes = [parser.rows[i] for i in body], [parser.row_classes[i] for i in body]
    return parser


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> Path:
    """A timed sweep with analysis.json and its PNGs (tests copy it before changing it)."""
    sweep = make_timed_sweep(tmp_path_factory.mktemp("report") / "sweep")
    analyze(sweep)
    return sweep


@pytest.fixture
def sweep(analysed, tmp_path) -> Path:
    return Path(shutil.copytree(analysed, tmp_path / "sweep"))


def test_html_decision_table_winner_explanation_and_embedded_figures(sweep, tmp_path):
    generation, training = write_generation_profile(tmp_path / "gen.json"), write_training_profile(tmp_path / "t.json")
    report_html = build_report(sweep, generation, training)
    assert report_html == sweep / "report.html"
    made = make_plan(path=sweep, generation_profile=generation)
    decision, explanation, regime = made.decision, made.explanation, made.regime
    assert decision.best == WINNER  # the plan itself picks the designed optimum
    parsed = parse(report_html)
    # the decision table: one row per label; the answer is a near-optimal set not separated (report_fixtures: P32,
    # P64 and P128 lie within 8% in T), so its members are marked \u2248, none starred, and the fastest's numbers are
    # the plan's
    assert decision.answer == "near_optimal" and not decision.equivalent
    assert len(parsed.rows) == len(decision.rows) == 6
    marked = [row for row, css in zip(parsed.rows, parsed.row_classes) if css == "near"]
    assert sorted(row[0] for row in marked) == sorted(f"\u2248 {label}" for label in decision.near_optimal)
    assert "winner" not in parsed.row_classes and not any("\u2605" in row[0] for row in parsed.rows)
    winners = [row for row in marked if row[0] == f"\u2248 {WINNER}"]
    won = decision.row(WINNER)
    assert winners[0][1:4] == ["64", "8", "512"]  # P, G, B_train
    assert winners[0][6] == f"{won.r_n:.2f}" and winners[0][7] == f"{won.throughput_gain:.2f}x"
    assert winners[0][9] != "-"  # realized T, beside T = N*/q
    assert winners[0][10] == f"{won.normalized_time_to_target:.2f}" and winners[0][12] == "yes"
    reference_n = decision.row(decision.reference).measurement.samples_to_target
    assert winners[0][11] == f"{won.measurement.budget_samples / reference_n:.2f}"  # budget / N*_ref
    text = report_html.read_text(encoding="utf-8")
    assert html.escape(explanation) in text and html.escape(regime.sentence) in text
    assert f"T/T_ref = {won.normalized_time_to_target:.2f}" in explanation  # the explanation names the deciding numbers
    assert "generation-knee-first" in text and "How this was measured" in text
    assert MACHINE["cpu"] in text and MACHINE["torch_version"] in text and "t-interval on log N*" in text
    assert "id=\"verdict\"" in text and ("Resolved" in text or "Unresolved:" in text)
    # eight figures, all inline PNGs: the file opens offline
    assert len(parsed.images) == 8 and parsed.external == []
    for src in parsed.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC)
    assert "http://" not in text and "https://" not in text
    # report.md carries the same table, the winner starred
    markdown = (sweep / "report.md").read_text(encoding="utf-8")
    # it replaces analyze's report.md, so it carries that content too: the learning table and the alignment statistic
    assert "## Learning side: samples-to-target, invariance, gradient noise" in markdown
    assert "aligned: D = mean |J_label - J_ref|" in markdown
    assert f"## Near-optimal set: any of {', '.join(decision.near_optimal)}" in markdown
    assert markdown_text(explanation) in markdown
    header = "| label | P | G | B_train | N* (samples) | q (samples/s) | rN | throughput gain q/q_ref | T = N*/q | realized T | T/T_ref |"
    assert header in markdown
    assert f"| \u2248 {WINNER} | 64 | 8 | 512 |" in markdown
    for name in (*DECISION_PNGS, *LEARNING_PNGS, "generation_throughput.png", "training_time.png"):
        assert f"]({name})" in markdown and (sweep / name).read_bytes().startswith(PNG_MAGIC)
    assert not [p.name for p in sweep.iterdir() if p.name.startswith(".") and p.name != ".batchscale"]  # no temporaries


def test_cli_analyses_first_and_prints_json(analysed, tmp_path, capsys):
    sweep = make_timed_sweep(tmp_path / "fresh")  # no analysis.json yet
    code = main(["report", str(sweep), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["best"] == WINNER and doc["reference"] == "p8_g8_sqrt"
    assert Path(doc["report_html"]) == sweep / "report.html" and Path(doc["report_md"]) == sweep / "report.md"
    assert {"explanation", "regime", "rows"} <= doc.keys() and len(doc["figures"]) == 6
    assert (sweep / "analysis.json").is_file() and "analysing the runs first" in captured.err
    assert doc["regime"]["name"] == "unknown"  # no generation profile given or found
    code = main(["report", str(sweep)])  # human output: the path on stdout
    assert code == 0 and capsys.readouterr().out.strip() == str(sweep / "report.html")


def test_profiles_found_in_sweep_dir_and_missing_pngs_redrawn(sweep, tmp_path):
    write_generation_profile(sweep / "profiles" / "generation.json")
    write_training_profile(sweep / "profiles" / "training.json")
    (sweep / "j_vs_samples.png").unlink()  # analysis.json present, one of its plots gone: all four are redrawn
    out = tmp_path / "out"
    report_html = build_report(sweep, None, None, out_dir=out)
    assert report_html == out / "report.html" and not (sweep / "report.html").exists()
    assert len(parse(report_html).images) == 8
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*DECISION_PNGS, *LEARNING_PNGS, "generation_throughput.png", "training_time.png", "report.html", "report.md"])
    assert "generation-knee-first" in report_html.read_text()


@pytest.mark.parametrize("case", ["empty", "missing", "bad-profile", "no-runs-with-analysis"])
def test_bad_input_exits_2_and_writes_nothing(analysed, tmp_path, capsys, case):
    target = tmp_path / "sweep"
    args = []
    if case == "empty":
        target.mkdir()
    elif case == "bad-profile":
        make_timed_sweep(target)
        args = ["--generation-profile", str(tmp_path / "nope.json")]
    elif case == "no-runs-with-analysis":
        target.mkdir()
        shutil.copy(analysed / "analysis.json", target / "analysis.json")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code = main(["report", str(target), *args])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "Fix:" in captured.err and "Traceback" not in captured.err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_report_never_imports_torch():
    code = ("import sys, batchscale.report, batchscale.report.cli, batchscale.report.figures; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_each_rollout_mode_is_a_label_with_its_staleness_in_analysis_and_report(tmp_path):
    """An asynchronous label carries its mode, its bound k and the mean staleness its updates saw (known here: k/2)
    into analysis.json and into both reports' learning tables; a synchronous one says "sync"."""
    from batchscale.analysis.analyze import analyze
    from batchscale.analysis.synthetic import write_synthetic_run
    from batchscale.report.build import build_report

    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        write_synthetic_run(sweep / "runs" / f"sync__s{seed}", "p8-sync", seed, 8)
        write_synthetic_run(sweep / "runs" / f"async__s{seed}", "p8-async-k2", seed, 8, max_staleness=2)
    result = analyze(sweep)
    sync, asynchronous = result["configs"]["p8-sync"], result["configs"]["p8-async-k2"]
    assert (sync["rollout_mode"], sync["max_staleness"], sync["staleness_mean"]) == ("sync", None, None)
    assert (asynchronous["rollout_mode"], asynchronous["max_staleness"]) == ("async", 2)
    assert asynchronous["staleness_mean"] == pytest.approx(1.0)
    assert "| async k=2 (1.00) |" in (sweep / "report.md").read_text()
    build_report(sweep)
    report = (sweep / "report.md").read_text()
    assert "async k=2 (1.00)" in report and "| sync |" in report


def test_how_this_was_measured_names_no_path_of_this_machine(sweep, tmp_path):
    """Issue 45: a report is shared, so its files are named relative to the sweep directory (analysis.json, runs/,
    a profile inside it) or by their names (a profile elsewhere), never by absolute paths."""
    inside = write_generation_profile(sweep / "generation_profile.json")
    (tmp_path / "elsewhere").mkdir()
    outside = write_training_profile(tmp_path / "elsewhere" / "training.json")
    build_report(sweep, inside, outside)
    for name in ("report.html", "report.md"):
        text = (sweep / name).read_text(encoding="utf-8")
        notes = text[text.index("How this was measured"):]
        assert str(tmp_path) not in notes and str(sweep) not in notes, name
        assert "analysis.json" in notes and "runs/" in notes
        assert "Generation profile (generation_profile.json)" in notes and "Training profile (training.json)" in notes
