"""samples.jsonl (rundir.samples) and what the report shows of it (report.samples): rows round-trip; a torn last line
is dropped with a warning and a corrupt one is refused naming the line; a resume cuts the file back to the
checkpoint's step; rows keep whether eval/accuracy counted the response (`correct`, unknown in older files); the
report compares each seed's first and last eval, escaped (it is model output) in report.html and report.md (the
counts of answers fixed and broken: tests/test_report_answers.py)."""

from __future__ import annotations

import html
import json
import shutil

import pytest
from report_fixtures import make_timed_sweep

from batchscale.analysis.analyze import analyze
from batchscale.errors import DataWarning, UserError
from batchscale.report.build import build_report
from batchscale.rundir.samples import SAMPLES_FILE, SamplesLog, read_samples, rewind_samples, sample_rows

HOSTILE = '<script>alert("x")</script> | **bold** [link](http://x)\nsecond line'


def write_rows(run_dir, evals: list[tuple[int, int]], responses=("12", HOSTILE)) -> None:
    log = SamplesLog(run_dir)
    for step, samples in evals:
        log.write(sample_rows(step, samples, [(f"{i}+0=", f"{r}@{step}", str(i + step), 0.5)
                                              for i, r in enumerate(responses)]))
    log.close()


def test_rows_round_trip_and_a_resume_cuts_back_to_the_checkpoint(tmp_path):
    write_rows(tmp_path, [(0, 0), (2, 24), (4, 48)])
    rows = read_samples(tmp_path)
    assert [(r.step, r.samples) for r in rows] == [(0, 0), (0, 0), (2, 24), (2, 24), (4, 48), (4, 48)]
    assert rows[1].response == f"{HOSTILE}@0" and rows[1].answer == "1" and rows[1].correct is None  # not given
    kept = rewind_samples(tmp_path, 3)
    assert [r.step for r in kept] == [0, 0, 2, 2] and read_samples(tmp_path) == kept
    assert rewind_samples(tmp_path, None) == [] and read_samples(tmp_path) == []
    assert not [p.name for p in tmp_path.iterdir() if p.name != SAMPLES_FILE]  # no temporary left behind
    (tmp_path / "new").mkdir()
    log = SamplesLog(tmp_path / "new")
    log.write(sample_rows(0, 0, [("1+1=", "2", "2", 1.0, True), ("1+2=", "4", "3", 0.0, False)]))
    log.close()
    assert [r.correct for r in read_samples(tmp_path / "new")] == [True, False]


def test_a_torn_last_line_is_dropped_and_a_corrupt_one_refused(tmp_path):
    write_rows(tmp_path, [(0, 0)])
    path = tmp_path / SAMPLES_FILE
    path.write_bytes(path.read_bytes() + b'{"step": 1, "samp')
    with pytest.warns(DataWarning, match="truncated last line 3"):
        assert len(read_samples(tmp_path)) == 2
    assert len(rewind_samples(tmp_path, 5)) == 2 and path.read_bytes().endswith(b"}\n")  # the torn line is cut
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], json.dumps({"step": "zero"}), lines[1]]) + "\n")
    with pytest.raises(UserError, match=f"{SAMPLES_FILE} line 2"):
        read_samples(tmp_path)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    sweep = make_timed_sweep(tmp_path_factory.mktemp("samples-report") / "sweep")
    analyze(sweep)
    return sweep


def test_the_report_shows_responses_that_changed_escaped_when_correctness_was_not_recorded(analysed, tmp_path):
    """A samples.jsonl written before `correct` existed: nothing is counted as fixed or broken, the responses that
    changed between each seed's first and last eval are shown, escaped (it is model output)."""
    sweep = shutil.copytree(analysed, tmp_path / "sweep")
    runs = sorted((sweep / "runs").iterdir())
    label = runs[0].name.split("__")[0]
    write_rows(sweep / "runs" / f"{label}__s1", [(0, 0), (9, 99)], responses=("seed one",))
    write_rows(sweep / "runs" / f"{label}__s0", [(0, 0), (5, 40), (10, 80)])
    build_report(sweep)
    page = (sweep / "report.html").read_text(encoding="utf-8")
    assert "What the policy said" in page and "<script>" not in page
    assert html.escape(f"{HOSTILE.replace(chr(10), chr(0x21b5))}@10 (reward 0.5, step 10)") in page  # the last eval
    assert "@0 (reward 0.5, step 0)" in page and "@5" not in page  # first against last, never between
    assert "seed one@9 (reward 0.5, step 9)" in page  # every seed is compared
    assert "record no correctness" in page and "not recorded" in page
    markdown = (sweep / "report.md").read_text(encoding="utf-8")
    section = markdown[markdown.index("## What the policy said"):]
    row = next(line for line in section.splitlines() if "script" in line)
    assert "<script>" not in row and "&lt;script&gt;" in row
    assert row.count(" | ") == 5  # the response's own | is escaped: the row keeps its six cells
    assert "\\*\\*bold\\*\\*" in row and "\\[link\\]\\(http://x\\)" in row and "\n" not in row
    assert [line for line in section.splitlines() if line.startswith("### ")][:1] == [f"### {label}"]


def test_a_sweep_without_samples_has_no_samples_section(analysed, tmp_path):
    sweep = shutil.copytree(analysed, tmp_path / "sweep")
    build_report(sweep)
    assert "What the policy said" not in (sweep / "report.html").read_text(encoding="utf-8")
    assert "What the policy said" not in (sweep / "report.md").read_text(encoding="utf-8")
