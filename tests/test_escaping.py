"""Text that leaves batchscale is quoted or escaped (issue 30): launch scripts from hostile sweep file names run
nothing batchscale did not write, report.md shows hostile labels as text, and the console never reads a label as
rich markup."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_export import run_script, write_sweep

from batchscale.cli import main
from batchscale.markup import markdown_text

HOSTILE_NAMES = [
    "a\ntouch INJECTED\n",
    "$(touch INJECTED)",
    "`touch INJECTED`",
    "x;touch INJECTED;'\"",
    "x\r\ntouch INJECTED #",
    "x\u2028touch INJECTED",
    "--help; touch INJECTED &",
]
FAKE_TOUCH = """#!{python}
import os, sys
open(os.path.join(os.environ["CAPTURE_DIR"], "..", "TOUCH-RAN"), "a").write(" ".join(sys.argv) + "\\n")
"""


def hostile_sweep(tmp_path: Path, name: str) -> Path:
    good = write_sweep(tmp_path)
    path = tmp_path / f"{name}.toml"
    path.write_text(good.read_text())
    return path


@pytest.mark.parametrize("fmt", ["verl", "openrlhf"])
@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=[f"name{i}" for i in range(len(HOSTILE_NAMES))])
def test_scripts_from_hostile_file_names_run_only_what_batchscale_wrote(tmp_path, fmt, name):
    out = tmp_path / "export"
    assert main(["export", fmt, str(hostile_sweep(tmp_path, name)), "--out", str(out)]) == 0
    fake_bin = tmp_path / "fakebin"
    fake_bin.mkdir()
    (fake_bin / "touch").write_text(FAKE_TOUCH.format(python=sys.executable))  # shadows the real touch
    (fake_bin / "touch").chmod(0o755)
    for point in json.loads((out / "sweep.json").read_text())["points"]:
        script = out / point["script"]
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
        for line in script.read_text().split("\n"):  # the hostile command only ever sits in a comment
            assert "touch INJECTED" not in line or line.startswith("#"), line
        engine, imported, _ = run_script(script, tmp_path)
        assert engine[:2] in (["-m", "verl.trainer.main_ppo"], ["-m", "openrlhf.cli.train_ppo_ray"])
        assert imported[:2] in (["import", "verl"], ["import", "tensorboard"])
    assert not (tmp_path / "TOUCH-RAN").exists(), (tmp_path / "TOUCH-RAN").read_text()
    assert not list(tmp_path.rglob("INJECTED")) and not Path("INJECTED").exists()
    readme = (out / "README.md").read_text()
    assert "\ntouch INJECTED" not in readme and "<" not in readme.split("\n", 1)[0]


HOSTILE_LABEL = 'p4<script>alert(1)</script><img src=x onerror=alert(2)>[click](javascript:alert(3))![i](x)`[/]'


def test_markdown_escapes_html_links_and_images_but_keeps_labels_readable():
    text = markdown_text(HOSTILE_LABEL + "\nsecond | cell")
    assert "<" not in text and "](" not in text.replace("\\](", "")
    assert "\n" not in text and "\\|" in text
    assert markdown_text("p4_g8_sqrt") == "p4_g8_sqrt"
    assert markdown_text("a`b") == "a\\`b"


def hostile_sweep_dir(tmp_path: Path) -> Path:
    from batchscale.analysis.synthetic import write_synthetic_run

    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        write_synthetic_run(sweep / "runs" / f"small__s{seed}", HOSTILE_LABEL, seed, 4, 8, "sqrt", 1e-6)
        write_synthetic_run(sweep / "runs" / f"large__s{seed}", "[bold red]big[/]", seed, 16, 8, "sqrt", 2e-6)
    return sweep


def test_report_md_and_the_console_show_hostile_labels_as_text(tmp_path, capsys):
    sweep = hostile_sweep_dir(tmp_path)
    assert main(["analyze", str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "[bold red]big[/]" in out  # printed as it is, not as red text
    assert main(["report", str(sweep)]) == 0
    capsys.readouterr()
    for name in ("report.md",):
        markdown = (sweep / name).read_text()
        assert "<script>" not in markdown and "<img" not in markdown
        assert not re.search(r"(?<!\\)\]\(javascript:", markdown) and "![i](x)" not in markdown  # no live link
        assert "&lt;script>" in markdown
    html = (sweep / "report.html").read_text()
    assert "<script>alert(1)" not in html and "<img src=x" not in html


def test_plan_table_prints_a_label_holding_markup_as_text(tmp_path, capsys):
    table = tmp_path / "table.csv"
    table.write_text('label,samples_to_target,throughput\n"[/]",100,2\n"[bold]x[/bold]",150,4\n')
    assert main(["plan", "--table", str(table)]) == 0
    out = capsys.readouterr().out
    assert "[/]" in out and "[bold]x[/bold]" in out
