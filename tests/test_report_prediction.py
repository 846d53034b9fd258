"""The report's closing note (issue 16): predicted vs measured rN for every label, the predicted and the measured best,
and the compute the prediction needed, from analysis.json's `prediction`; the rN figure draws both."""

from __future__ import annotations

import warnings

from report_fixtures import WINNER, make_timed_sweep

from batchscale.analysis.analyze import analyze
from batchscale.report.build import write_report


def test_closing_note_in_markdown_and_html(tmp_path):
    sweep = make_timed_sweep(tmp_path / "sweep")
    with warnings.catch_warnings(record=True):
        analysis = analyze(sweep)
        written = write_report(sweep)
    markdown = written["report_md"].read_text()
    note = markdown.split("## Closing note", 1)[1].split("##", 1)[0]
    for label in analysis["configs"]:
        assert label in note, label
    # the synthetic sweep's learning law is the noise-scale law with B_noise = 2048, so the prediction finds the winner
    assert f"Predicted best: {WINNER}" in note and f"measured best: {WINNER}" in note
    # the fixed-LR control is not of the reference's lr family: not predicted, never the predicted best (issue 38)
    controls = [label for label, config in analysis["configs"].items() if config["lr_rule"] != "sqrt"]
    assert controls and analysis["prediction"]["other_rule_labels"] == controls
    assert all(analysis["configs"][label]["r_n_predicted"] is None for label in controls)
    assert f"Not predicted, not ranked: {', '.join(controls)}" in " ".join(note.split())
    fraction = analysis["prediction"]["compute_fraction"]
    assert 0 < fraction < 1 and f"{fraction:.1%} of the sweep's compute" in note
    html = written["report_html"].read_text()
    assert 'id="prediction"' in html and f"Predicted best: {WINNER}" in html


def test_the_predicted_best_is_never_a_configuration_outside_the_references_lr_family():
    """The formula rN(B) holds along the retuned family only: a fixed-LR control with the smallest rN_predicted / q
    gain is not the predicted best (issue 38: the report named grpo-P32-G8-none)."""
    from batchscale.analysis.prediction import compare_best

    configs = {"ref": {"lr_rule": "sqrt", "r_n_predicted": 1.0}, "p32": {"lr_rule": "sqrt", "r_n_predicted": 1.3},
               "ctrl": {"lr_rule": "none", "r_n_predicted": 1.3}}
    analysis = {"reference": "ref", "configs": configs}
    plan = {"best": "p32", "rows": [{"label": "ref", "throughput_gain": 1.0, "eligible": True},
                                    {"label": "p32", "throughput_gain": 2.0, "eligible": True},
                                    {"label": "ctrl", "throughput_gain": 2.2, "eligible": True}]}
    assert compare_best(analysis, plan) == {"predicted": "p32", "measured": "p32"}
    configs["ctrl"]["lr_rule"] = "sqrt"  # the same numbers inside the family: then it would be
    assert compare_best(analysis, plan)["predicted"] == "ctrl"
