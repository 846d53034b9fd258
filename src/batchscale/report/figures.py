"""The report's figures as PNG files: the two of the decision (report/decision_figures.py), the analysis's own
learning-side plots, and the two systems plots.

Learning side (J vs samples, J vs steps, gradient norm vs B, rN vs B): the PNGs `batchscale analyze` wrote next to
analysis.json are reused as they are; when they are missing (analysis.json copied alone) they are redrawn with the
analysis's own `render_plots` from the details the report computed once (report/inputs.py).
Systems side, drawn here because no other module draws them:
- generation throughput vs concurrency in samples/s, the unit of the decision's q (each level's responses/s; the
  profile's fit q(B) = q_max * B / (B + B_half) is made on tokens/s and drawn divided by the median tokens per response
  over the levels), the x axis ticked at the levels measured; B_90, the doubling knee and the critical training batch
  B_simple (the regime is which of the two comes first) each a vertical line labelled along itself, at staggered
  heights, so close lines stay legible;
- training time per update vs samples per update, with the profile's linear fit seconds = seconds_fixed +
  seconds_per_token * tokens.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import numpy as np

from batchscale.analysis.plot_axes import draw_marked_lines, plain_number, set_batch_axis
from batchscale.analysis.plots import PLOT_FILES, plt, save_figure
from batchscale.report.decision_figures import (TIME_RATIO_FILE, WALL_CLOCK_FILE, draw_time_ratio_figure,
                                                draw_wall_clock_figure)
from batchscale.report.figure import Figure
from batchscale.report.inputs import ReportInputs

GENERATION_FILE, TRAINING_FILE = "generation_throughput.png", "training_time.png"
DRAWN_FILES = (TIME_RATIO_FILE, WALL_CLOCK_FILE, GENERATION_FILE, TRAINING_FILE)  # what this report may draw


LEARNING_TITLES = {
    "curves_samples": ("Learning curves: J vs cumulative samples", "Seed mean per label, band +-1 seed sd; dashed: the "
                       "target. Aligned curves overlap on this axis; a lagging curve pays a sample penalty rN > 1."),
    "curves_steps": ("Learning curves: J vs optimizer updates", "The same runs indexed by updates: larger batches look "
                     "faster here, which is why the decision uses samples and wall-clock, not steps."),
    "grad_norm": ("Gradient norm vs samples per update (log-log)", "Mean actor gradient norm per label with the fitted "
                  "slope (pure noise: -0.5) and sqrt(a + b/B); B_simple = b/a is the critical training batch."),
    "r_n": ("Samples-to-target penalty rN vs samples per step", "rN = N*(B) / N*(B_ref) with the t-interval of N* on log scale; "
            "o aligned, x not aligned; open squares: rN predicted from the reference run's own gradient noise scale."),
}


def collect_learning_figures(inputs: ReportInputs, work_dir: Path) -> list[Figure]:
    """The analysis PNGs next to analysis.json, redrawn into `work_dir` when any is missing."""
    analysis_dir = inputs.analysis_path.parent
    paths = {key: analysis_dir / name for key, name in PLOT_FILES.items()}
    drawn = not all(p.is_file() for p in paths.values())
    if drawn:
        paths = redraw_learning_plots(inputs, work_dir)
    return [Figure(PLOT_FILES[key], *LEARNING_TITLES[key], paths[key], drawn) for key in PLOT_FILES]


def redraw_learning_plots(inputs: ReportInputs, work_dir: Path) -> dict[str, Path]:
    from batchscale.analysis.plots import render_plots

    by_name = render_plots(inputs.analysis, inputs.details, work_dir)
    return {key: by_name[name] for key, name in PLOT_FILES.items()}


def draw_generation_figure(inputs: ReportInputs, work_dir: Path) -> Figure | None:
    profile = inputs.generation_profile
    if profile is None:
        return None
    rows = sorted(profile.rows, key=lambda r: r.concurrency)
    b = np.array([r.concurrency for r in rows], dtype=float)
    q = np.array([r.responses_per_s for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(b, q, "o", label="measured samples/s")
    caption = "Measured median throughput per concurrency level, in samples (responses) per second, as q is"
    knee, marks = profile.knee, []
    if knee is not None:
        tokens_per_sample = statistics.median(r.tokens / r.responses for r in rows if r.responses)
        dense = np.geomspace(b.min(), max(b.max(), knee.b_90), 200)
        ax.plot(dense, knee.q_max * dense / (dense + knee.b_half) / tokens_per_sample, "-",
                label="fit q_max B / (B + B_half)")
        caption += (f"; fit on tokens/s q(B) = {knee.q_max:.4g} * B / (B + {knee.b_half:.3g}), R^2 {knee.r2:.3f}, "
                    f"drawn divided by the median {tokens_per_sample:.3g} tokens per response")
        extrapolated = " (extrapolated)" if knee.extrapolated else ""
        marks.append((knee.b_90, f"knee B_90 {plain_number(knee.b_90)}{extrapolated}",
                      {"color": "C3", "ls": "--", "lw": 1}))
        caption += f"; knee B_90 = 9 B_half = {knee.b_90:.3g}{extrapolated}"
        if knee.doubling_knee is not None:
            marks.append((knee.doubling_knee, f"doubling knee {plain_number(knee.doubling_knee)}",
                          {"color": "C4", "ls": ":", "lw": 1.5}))
            caption += (f"; doubling knee {knee.doubling_knee:g} (next doubling gains < "
                        f"{knee.doubling_threshold:.0%})")
    b_simple = inputs.plan["regime"]["critical_training_batch"]
    if b_simple is not None:
        marks.append((b_simple, f"critical training batch B_simple {plain_number(b_simple)}",
                      {"color": "k", "ls": "-.", "lw": 1}))
        caption += f"; dash-dot: B_simple = {b_simple:.3g} samples/update from the gradient-noise fit"
    draw_marked_lines(ax, marks)
    set_batch_axis(ax, b, "concurrency (samples in flight)")
    ax.set_ylabel("samples/s")
    path = save_figure(fig, work_dir / f".{GENERATION_FILE}.tmp")
    return Figure(GENERATION_FILE, "Generation throughput vs concurrency", caption + ".", path, True)


def draw_training_figure(inputs: ReportInputs, work_dir: Path) -> Figure | None:
    profile = inputs.training_profile
    if profile is None:
        return None
    rows = sorted(profile.rows, key=lambda r: r.samples_per_update)
    x = np.array([r.samples_per_update for r in rows], dtype=float)
    y = np.array([r.seconds for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(x, y, "o", label="measured seconds per update")
    caption = "Measured median seconds per update per samples_per_update"
    fit = profile.fit
    if fit is not None:
        tokens = np.array([r.tokens for r in rows], dtype=float)
        ax.plot(x, fit.seconds_fixed + fit.seconds_per_token * tokens, "-", label="fit a + b tokens")
        caption += (f"; profile's fit seconds = {fit.seconds_fixed:.3g} + {fit.seconds_per_token:.3g} * tokens, "
                    f"R^2 {fit.r2:.3f}")
    set_batch_axis(ax, x, "samples_per_update")
    ax.set_ylabel("seconds per update")
    path = save_figure(fig, work_dir / f".{TRAINING_FILE}.tmp")
    return Figure(TRAINING_FILE, "Training time per update vs batch", caption + ".", path, True)


def collect_figures(inputs: ReportInputs, work_dir: Path) -> list[Figure]:
    """The decision's figures first (T/T_ref vs B, J vs wall-clock), then the learning figures, then generation and
    training when their profiles are given."""
    decision = [draw_time_ratio_figure(inputs, work_dir), draw_wall_clock_figure(inputs, work_dir)]
    systems = [draw_generation_figure(inputs, work_dir), draw_training_figure(inputs, work_dir)]
    return [f for f in decision if f] + collect_learning_figures(inputs, work_dir) + [f for f in systems if f]


def make_work_dir(out_dir: Path) -> tempfile.TemporaryDirectory:
    """A scratch directory inside `out_dir`, so the final os.replace stays on one file system."""
    return tempfile.TemporaryDirectory(prefix=".report-", dir=out_dir)
