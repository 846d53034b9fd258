"""The report shows the decision and its certainty (issue 45): each kind of answer looks different at a glance in
report.html and report.md (a resolved winner, a tie, a near-optimal set not separated, "not resolved", the reference
alone), the figures of T/T_ref against B and of J against wall-clock are drawn from the plan's and the runs' own
numbers, the answers training fixed and broke are counted against a known truth, no path of this machine appears,
and the doubts appear. Sweeps designed to give each kind: report_fixtures.ANSWER_SWEEPS."""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from document_fixtures import write_training_profile
from report_fixtures import ANSWER_SWEEPS, answer_truth, make_answer_sweep, retime_run, write_generation_profile

from batchscale.plan.answer import classify_answer
from batchscale.report.build import write_report
from batchscale.rundir import TrainingProfile, read_document, read_run, write_document

KINDS = tuple(ANSWER_SWEEPS)
MARKS = {"winner": ("winner", "\u2605"), "tie": ("tie", "="), "near_optimal": ("near", "\u2248"),
         "unresolved": ("estimate", "?"), "reference_only": ("only", "\u25cb")}


class Page(HTMLParser):
    """The decision box's attributes and texts by id, and the decision table's rows (class, first cell)."""

    def __init__(self):
        super().__init__()
        self.box, self.texts, self.rows = {}, {}, []
        self._id, self._table, self._cell = None, False, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id") == "decision":
            self.box = attrs
        if tag == "p" and attrs.get("id"):
            self._id = attrs["id"]
            self.texts[self._id] = ""
        if tag == "table":
            self._table = attrs.get("id") == "decision-table"
        if tag == "tr" and self._table:
            self.rows.append([attrs.get("class"), None])
        if tag == "td" and self._table and self.rows and self.rows[-1][1] is None:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "p":
            self._id = None
        if tag == "td" and self._cell is not None:
            self.rows[-1][1], self._cell = self._cell, None

    def handle_data(self, data):
        if self._id:
            self.texts[self._id] += data
        if self._cell is not None:
            self._cell += data


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    """Per kind: the sweep (report written into it, with profiles outside it) and write_report's result."""
    root = tmp_path_factory.mktemp("answers")
    generation = write_generation_profile(root / "elsewhere" / "generation.json")
    training = write_training_profile(root / "elsewhere" / "training.json")
    built = {}
    for kind in KINDS:
        sweep = make_answer_sweep(root / kind, kind)
        built[kind] = (sweep, write_report(sweep, generation, training))
    return built


def page(sweep: Path) -> Page:
    parsed = Page()
    parsed.feed((sweep / "report.html").read_text(encoding="utf-8"))
    parsed.rows = [row for row in parsed.rows if row[1] is not None]  # the header row has no <td>
    return parsed


def test_each_answer_sweep_gives_its_kind(reports):
    for kind, (_, written) in reports.items():
        plan = written["plan"]
        assert classify_answer(plan).kind == kind, (kind, plan["answer"], plan["why_unresolved"])
    assert reports["tie"][1]["plan"]["equivalent"] is True and reports["near_optimal"][1]["plan"]["equivalent"] is False


@pytest.mark.parametrize("kind", KINDS)
def test_the_kind_of_answer_sets_the_box_and_the_tables_marks(reports, kind):
    sweep, written = reports[kind]
    plan, answer = written["plan"], classify_answer(written["plan"])
    parsed = page(sweep)
    assert parsed.box["data-answer"] == kind and f"kind-{kind}" in parsed.box["class"]
    assert parsed.texts["answer-badge"] == answer.badge and parsed.texts["headline"] == answer.heading
    css, mark = MARKS[kind]
    marked = sorted(cell for row_css, cell in parsed.rows if row_css == css)
    expected = {"winner": [plan["best"]], "tie": plan["near_optimal"], "near_optimal": plan["near_optimal"],
                "unresolved": [plan["best"]], "reference_only": [plan["reference"]]}[kind]
    shown = {label: label + (" (ref)" if label == plan["reference"] else "") for label in expected}
    assert marked == sorted(f"{mark} {shown[label]}" for label in expected)
    if kind != "winner":  # no green star, no green row, on anything but a resolved winner
        assert not any(row_css == "winner" or "\u2605" in cell for row_css, cell in parsed.rows)
    markdown = (sweep / "report.md").read_text(encoding="utf-8")
    assert f"## {answer.heading}" in markdown and f"> **Answer: {answer.badge}.**" in markdown
    table = [line for line in markdown.splitlines() if line.startswith("| ") and "| yes |" in line]
    starred = [line for line in table if "\u2605" in line]
    assert len(starred) == (1 if kind == "winner" else 0)
    for label in expected:
        cell = f"**{mark} {label}**" if kind == "winner" else f"{mark} {label}"
        assert any(line.startswith(f"| {cell} |") or line.startswith(f"| {cell} (ref) |") for line in table), label


CONSOLE_MARKS = {"winner": "* ", "tie": "= ", "near_optimal": "~ ", "unresolved": "? ", "reference_only": "o "}


@pytest.mark.parametrize("kind", KINDS)
def test_the_console_table_marks_the_kind_too(reports, kind, capsys):
    """`plan`'s console says the kind's badge and heading, marks the same labels as the report with its ASCII mark,
    and calls an unresolved best an estimate: no "Best:" line and no star where nothing is resolved."""
    from batchscale.cli import main

    sweep, written = reports[kind]
    answer = classify_answer(written["plan"])
    assert main(["plan", str(sweep)]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    assert answer.heading in flat and (answer.badge.lower() in flat.lower())
    cells = [line.split("\u2502")[1].strip() for line in out.splitlines() if line.startswith("\u2502")]
    marked = {cell[2:].removesuffix(" (ref)") for cell in cells if cell.startswith(CONSOLE_MARKS[kind])}
    assert marked == set(answer.marked)
    assert any(cell.startswith("* ") for cell in cells) == (kind == "winner")
    assert ("Best estimate:" in flat) == (not answer.recommends) and ("Best:" in flat) == answer.recommends


def test_the_kinds_read_differently(reports):
    answers = [classify_answer(written["plan"]) for _, written in reports.values()]
    assert len({a.badge for a in answers}) == len({a.heading.split(":")[0] for a in answers}) == len(KINDS)
    unresolved = classify_answer(reports["unresolved"][1]["plan"])
    assert unresolved.heading.startswith("Not resolved") and "not a recommendation" in unresolved.meaning


def test_none_and_an_old_plan_json_are_read_from_the_plan_not_guessed():
    rows = [{"label": "a", "eligible": False, "normalized_time_to_target": 1.0},
            {"label": "b", "eligible": True, "normalized_time_to_target": 0.5}]
    none = classify_answer({"reference": "a", "best": None, "answer": "none", "rows": rows})
    assert none.kind == "none" and none.marked == () and "No configuration" in none.heading
    old = {"reference": "a", "best": "b", "resolved": True, "rows": rows}  # before `answer`: read from `resolved`
    assert classify_answer(old).kind == "winner"
    assert classify_answer({**old, "resolved": False}).kind == "unresolved"
    alone = {"reference": "b", "best": "b", "answer": "winner", "rows": rows}  # every other row beaten by its bound
    assert classify_answer(alone).kind == "reference_only" and "resolved" in classify_answer(alone).badge.lower()


def capture_figures(monkeypatch) -> dict:
    """The matplotlib figures the decision figures save, by file name, kept open for inspection."""
    import batchscale.report.decision_figures as decision_figures

    kept = {}

    def keep(fig, temporary):
        kept[temporary.name.strip(".").removesuffix(".tmp")] = fig
        fig.savefig(temporary, format="png")
        return temporary

    monkeypatch.setattr(decision_figures, "save_figure", keep)
    return kept


def test_the_time_ratio_figure_draws_the_plans_ratios_and_intervals(reports, tmp_path, monkeypatch):
    for kind in ("winner", "reference_only", "unresolved"):
        sweep = shutil.copytree(reports[kind][0], tmp_path / kind)
        kept = capture_figures(monkeypatch)
        plan = write_report(sweep)["plan"]
        ax = kept["time_ratio_vs_batch.png"].axes[0]
        bottom, top = ax.get_ylim()
        points = {line.get_label().split(" (")[0]: (line.get_xdata()[0], line.get_ydata()[0], line.get_marker())
                  for line in ax.get_lines() if line.get_label() and not line.get_label().startswith("_")}
        for row in plan["rows"]:
            x, y, marker = points[row["label"]]
            assert x == pytest.approx(row["samples_per_step"], rel=0.1)  # dodged a little where two share a batch
            if row["label"] == plan["reference"]:
                assert (y, marker) == (1.0, "D")
            elif row["normalized_time_to_target_at_least"] is not None:  # censored: its lower bound, a triangle
                assert marker == "^" and y == pytest.approx(min(row["normalized_time_to_target_at_least"], top))
            else:
                assert marker == "o" and y == pytest.approx(row["normalized_time_to_target"])
        segments = [seg for coll in ax.collections for seg in coll.get_segments()]
        for row in plan["rows"]:  # every interval drawn, clipped to the axis
            if row["normalized_time_to_target_low"] is not None:
                low = max(row["normalized_time_to_target_low"], bottom)
                high = min(row["normalized_time_to_target_high"] or top, top)
                assert any(seg[0][1] == pytest.approx(low) and seg[1][1] == pytest.approx(high) for seg in segments)
        # the axis follows the point estimates, never one wide interval (the unresolved sweep's reach 0.27-3.4)
        estimates = [r["normalized_time_to_target_at_least"] or r["normalized_time_to_target"] for r in plan["rows"]
                     if r["normalized_time_to_target_at_least"] or r["normalized_time_to_target"]]
        assert top <= max(estimates) * 1.7 and bottom >= min(estimates) / 1.7
        if kind == "unresolved":
            written = [t.get_text() for t in ax.texts]
            assert any(float(t) > top for t in written if re.fullmatch(r"[0-9.]+", t))  # the clipped end, written


def test_the_wall_clock_figure_draws_every_seed_on_the_training_clock(reports, tmp_path, monkeypatch):
    sweep = shutil.copytree(reports["winner"][0], tmp_path / "winner")
    kept = capture_figures(monkeypatch)
    plan = write_report(sweep)["plan"]
    ax = kept["j_vs_wall_clock.png"].axes[0]
    lines = [line for line in ax.get_lines() if len(line.get_xdata()) > 2]
    runs = [read_run(d) for d in sorted((sweep / "runs").iterdir())]
    assert len(lines) == len(runs)  # one thin line per seed
    for run in runs:  # step times are constant: each eval sits at (its samples / B) x time/step
        step_s = run.steps[-1]["time/step"]
        expected = [e["samples"] / run.samples_per_step * step_s for e in run.evals]
        assert any(list(line.get_xdata()) == pytest.approx(expected) for line in lines), run.label
    target = [line for line in ax.get_lines() if line.get_label().startswith("target")]
    assert target and target[0].get_ydata()[0] == pytest.approx(read_analysis_target(sweep))
    assert plan["best"] in [line.get_label() for line in ax.get_lines()]


def read_analysis_target(sweep: Path) -> float:
    import json

    return json.loads((sweep / "analysis.json").read_text())["target"]


def test_answers_fixed_and_broken_are_counted_against_the_known_truth(reports):
    sweep, _ = reports["winner"]
    html = (sweep / "report.html").read_text(encoding="utf-8")
    markdown = (sweep / "report.md").read_text(encoding="utf-8")
    labels, seeds, _ = ANSWER_SWEEPS["winner"]
    for label in labels:
        truth = [answer_truth(label, seed) for seed in seeds]
        fixed = sum(not a and b for first, last in truth for a, b in zip(first, last))
        broken = sum(a and not b for first, last in truth for a, b in zip(first, last))
        both = sum(a and b for first, last in truth for a, b in zip(first, last))
        neither = sum(not a and not b for first, last in truth for a, b in zip(first, last))
        row = f"| {label} | {len(seeds)} | 32 | {fixed} | {broken} | {both} | {neither} |"
        assert row in markdown, row
        assert f"<tr><td>{label}</td><td>{len(seeds)}</td><td>32</td><td>{fixed}</td><td>{broken}</td>" in html
    assert "over the 32 prompts samples.jsonl keeps from each eval" in markdown  # what was counted, said
    truth = [answer_truth(label, seed) for seed in seeds]
    first, last = (sum(map(sum, part)) / (32 * len(seeds)) for part in zip(*truth))
    assert f"{first:.2f} -&gt; {last:.2f}" in html  # the stored prompts' accuracy, first -> last
    # examples of each kind, lowest seed first, the model's text escaped strictly (a "+" is backslashed)
    assert "| fixed | 0 | 4\\+4= | 8 | 9 \\(reward 0 wrong, step 0\\) | 8 \\(reward 1 right, step" in markdown
    assert "| broken | 0 | 0\\+0= | 0 | 0 \\(reward 1 right, step 0\\) | 1 \\(reward 0 wrong, step" in markdown


def test_no_path_of_this_machine_appears_anywhere(reports):
    for kind, (sweep, _) in reports.items():
        root = str(sweep.parent)
        for name in ("report.html", "report.md"):
            assert root not in (sweep / name).read_text(encoding="utf-8"), (kind, name)


def test_doubts_appear_with_what_to_do(reports, tmp_path):
    sweep = shutil.copytree(reports["winner"][0], tmp_path / "winner")
    slow = sweep / "runs" / "p16__s1"
    retime_run(slow, 2.0 * read_run(slow).steps[-1]["time/step"])  # one seed at half the speed of its siblings
    profile = read_document(write_training_profile(tmp_path / "training.json"), TrainingProfile).to_json()
    profile["compute_dtype"] = "bfloat16"  # the runs trained in float32 (report_fixtures.MACHINE)
    profile["fit"] = {**profile["fit"], "seconds_fixed": -0.02, "r2": 0.29}
    bad = write_document(tmp_path / "training-bf16.json", TrainingProfile.model_validate(profile))
    write_report(sweep, None, bad)
    html = (sweep / "report.html").read_text(encoding="utf-8")
    markdown = (sweep / "report.md").read_text(encoding="utf-8")
    section = markdown[markdown.index("## Doubts"):markdown.index("## Figures")]
    assert section.startswith("## Doubts (3)")
    assert "p16: its 3 seeds ran at" in section and "--workers 1" in section  # the scatter, with what to do
    assert "R^2 0.29" in section and "negative fixed cost" in section  # the poor fit
    assert "measured bfloat16 training arithmetic, the runs trained in float32" in section
    assert "--compute-dtype float32" in section and section.count("What to do:") == 3
    assert html.count('<li class="doubt ') == 3 and 'id="doubts"' in html
    assert html.index('id="doubts"') < html.index("<h2>Figures</h2>")  # seen before the evidence
    clean = (reports["winner"][0] / "report.md").read_text(encoding="utf-8")
    assert "## Doubts\n\nNone found. Checked:" in clean  # said even when nothing was found
