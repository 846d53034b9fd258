"""The report's figures as PNG files: the analysis's own learning-side plots, plus the two systems plots.

Learning side (J vs samples, J vs steps, gradient norm vs B, rN vs B): the PNGs `batchscale analyze` wrote next to
analysis.json are reused as they are; when they are missing (analysis.json copied alone) they are redrawn with the
analysis's own `render_plots` from the details the report computed once (report/inputs.py).
Systems side, drawn here because no other module draws them:
- generation throughput vs concurrency (log2 x axis), the profile's fitted q(B) = q_max * B / (B + B_half), B_90 and
  the doubling knee marked, and the critical training batch B_simple for comparison (the regime is which of the two
  comes first);
- training time per update vs samples per update, with the profile's linear fit seconds = seconds_fixed +
  seconds_per_token * tokens.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchscale.analysis.plots import PLOT_FILES, plt, save_figure
from batchscale.report.inputs import ReportInputs

GENERATION_FILE, TRAINING_FILE = "generation_throughput.png", "training_time.png"


@dataclass(frozen=True)
class Figure:
    name: str  # file name in the output directory
    title: str
    caption: str
    path: Path  # where the PNG is now (final for reused analysis plots, temporary for drawn ones)
    drawn: bool  # True when this report drew it (so it is written into the output directory)


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
    q = np.array([r.tokens_per_s for r in rows], dtype=float)
    knee = profile.knee
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(b, q, "o", label="measured tokens/s")
    caption = "Measured median throughput per concurrency level"
    if knee is not None:
        dense = np.geomspace(b.min(), max(b.max(), knee.b_90), 200)
        ax.plot(dense, knee.q_max * dense / (dense + knee.b_half), "-", label="fit q_max B / (B + B_half)")
        caption += f"; fit q(B) = {knee.q_max:.4g} * B / (B + {knee.b_half:.3g}), R^2 {knee.r2:.3f}"
        extrapolated = " (extrapolated)" if knee.extrapolated else ""
        ax.axvline(knee.b_90, color="C3", ls="--", lw=1, label=f"knee B_90 = {knee.b_90:.3g}{extrapolated}")
        caption += f"; knee B_90 = 9 B_half = {knee.b_90:.3g}{extrapolated}"
        if knee.doubling_knee is not None:
            ax.axvline(knee.doubling_knee, color="C4", ls=":", lw=1.5, label=f"doubling knee {knee.doubling_knee:g}")
            caption += (f"; doubling knee {knee.doubling_knee:g} (next doubling gains < "
                        f"{knee.doubling_threshold:.0%})")
    b_simple = inputs.plan["regime"]["critical_training_batch"]
    if b_simple is not None:
        ax.axvline(b_simple, color="k", ls="-.", lw=1, label=f"critical training batch B_simple {b_simple:.3g}")
        caption += f"; dash-dot: B_simple = {b_simple:.3g} samples/update from the gradient-noise fit"
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency (samples in flight)")
    ax.set_ylabel("tokens/s")
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
    ax.set_xlabel("samples_per_update")
    ax.set_ylabel("seconds per update")
    path = save_figure(fig, work_dir / f".{TRAINING_FILE}.tmp")
    return Figure(TRAINING_FILE, "Training time per update vs batch", caption + ".", path, True)


def collect_figures(inputs: ReportInputs, work_dir: Path) -> list[Figure]:
    """Learning figures first, then generation and training when their profiles are given."""
    figures = collect_learning_figures(inputs, work_dir)
    figures += [f for f in (draw_generation_figure(inputs, work_dir), draw_training_figure(inputs, work_dir)) if f]
    return figures


def make_work_dir(out_dir: Path) -> tempfile.TemporaryDirectory:
    """A scratch directory inside `out_dir`, so the final os.replace stays on one file system."""
    return tempfile.TemporaryDirectory(prefix=".report-", dir=out_dir)
