"""Readable axes (issue 45): batch axes ticked in plain numbers at the batches measured, never colliding; an rN axis
not squashed by one wide two-seed interval (it is clipped, its end written); the knee and the critical batch each
labelled along its own line; generation throughput in samples/s, the unit of the decision's q."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from document_fixtures import generation_profile

import batchscale.analysis.plots as plots
import batchscale.report.figures as figures
from batchscale.analysis.plot_axes import dodge, draw_ratio_interval, ratio_limits, set_batch_axis, spaced
from batchscale.analysis.plots import plt


def labels_of(ax, axis="x") -> tuple[list[str], list[str]]:
    ax.figure.canvas.draw()
    target = ax.xaxis if axis == "x" else ax.yaxis
    major = [t.get_text() for t in target.get_ticklabels() if t.get_text()]
    minor = [t.get_text() for t in target.get_ticklabels(minor=True) if t.get_text()]
    return major, minor


def test_batch_ticks_are_the_batches_measured_in_plain_numbers_and_never_collide():
    fig, ax = plt.subplots()
    batches = [8, 16, 32, 36, 64, 1024]
    ax.plot(batches, [1, 2, 3, 4, 5, 6], "o")
    set_batch_axis(ax, batches, "B")
    major, minor = labels_of(ax)
    assert major == ["8", "16", "32", "64", "1024"] and minor == []  # 36 sits too close to 32 to be labelled
    assert spaced([32, 36, 48]) == [32.0, 48.0]
    plt.close(fig)


def test_points_that_share_a_batch_are_drawn_apart_around_it():
    drawn = dodge([128, 128, 256])
    assert drawn[0] < 128 < drawn[1] and drawn[2] == 256 and drawn[0] * drawn[1] == pytest.approx(128 * 128)


def test_a_wide_interval_is_clipped_with_its_ends_written_not_squashing_the_axis():
    limits = ratio_limits([0.8, 1.0, 1.3])
    assert limits == pytest.approx((0.8 / 1.6, 1.3 * 1.6))
    fig, ax = plt.subplots()
    assert draw_ratio_interval(ax, 8, 0.2, 6.4, limits, "C0") == 2
    assert sorted(t.get_text() for t in ax.texts) == ["0.2", "6.4"]
    assert draw_ratio_interval(ax, 16, 0.9, 1.1, limits, "C1") == 0
    plt.close(fig)


def test_the_rn_figure_follows_the_point_estimates(tmp_path, monkeypatch):
    kept = {}
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: kept.setdefault("fig", fig) and path)
    n_star = lambda mean, low, high: {"mean": mean, "ci_low": low, "ci_high": high}  # noqa: E731
    result = {"reference": "p4", "configs": {
        "p4": {"samples_per_step": 32, "r_n": 1.0, "aligned": True, "samples_to_target": n_star(1000, 900, 1100)},
        "p8": {"samples_per_step": 64, "r_n": 1.1, "aligned": True, "samples_to_target": n_star(1100, 200, 6400)},
        "p16": {"samples_per_step": 128, "r_n": 0.9, "aligned": True, "samples_to_target": n_star(900, 850, 950)}}}
    plots.plot_r_n(result, tmp_path / "r.png")
    ax = kept["fig"].axes[0]
    low, high = ax.get_ylim()
    assert high < 2.0 and low > 0.5  # P8's interval 0.2-6.4 no longer sets the axis
    assert {"0.2", "6.4"} <= {t.get_text() for t in ax.texts}
    assert labels_of(ax)[0] == ["32", "64", "128"]
    plt.close(kept["fig"])


def test_generation_is_drawn_in_samples_per_s_with_each_line_labelled_along_itself(tmp_path, monkeypatch):
    kept = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: kept.setdefault("fig", fig) and path)
    levels = [1, 2, 4, 8, 16, 32, 64]
    profile = generation_profile(levels, [1000.0 * b / (b + 8) for b in levels])
    inputs = SimpleNamespace(generation_profile=profile, plan={"regime": {"critical_training_batch": 75.0}})
    figure = figures.draw_generation_figure(inputs, tmp_path)
    ax = kept["fig"].axes[0]
    measured = ax.get_lines()[0]
    assert list(measured.get_ydata()) == pytest.approx([r.responses_per_s for r in profile.rows])
    assert ax.get_ylabel() == "samples/s" and "samples (responses) per second" in figure.caption
    texts = {t.get_text().strip(): t.get_position()[1] for t in ax.texts}
    knee = next(t for t in texts if t.startswith("knee B_90"))
    critical = next(t for t in texts if t.startswith("critical training batch B_simple 75"))
    assert texts[knee] != texts[critical]  # 72 and 75 lie close: their labels stand at different heights
    assert labels_of(ax)[0] == ["1", "2", "4", "8", "16", "32", "64"]
    plt.close(kept["fig"])
