"""The report's figures as PNG files: the analysis's own learning-side plots, plus the two systems plots.

Learning side (J vs samples, J vs steps, gradient norm vs B, rN vs B): the PNGs `batchscale analyze` wrote next to
analysis.json are reused as they are; when they are missing (analysis.json copied alone, or written with --out elsewhere)
they are redrawn with the analysis's own `compute_analysis` + `render_plots` for the same target and reference.
Systems side, drawn here because no other module draws them:
- generation throughput vs concurrency (log2 x axis), the fitted q(B) = q_max * B / (B + B_half) from the profile's knee
  (refitted with `systems.knee` when the profile carries none), B_90 and the doubling knee marked, and the critical training
  batch B_simple for comparison (the regime is which of the two comes first);
- training time per update vs samples per step, with the profile's linear fit time_s = a + b * tokens when its rows give
  tokens, else a fit of time_s = a + b * samples_per_step (`systems.knee.fit_training_cost`).
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchscale.analysis.plots import PLOT_FILES, plt, save_figure
from batchscale.report.inputs import ReportInputs

GENERATION_FILE, TRAINING_FILE = "generation_throughput.png", "training_time.png"
BATCH_KEYS = ("samples_per_step", "batch_size", "batch", "samples", "concurrency")
TIME_KEYS = ("seconds", "time_s", "seconds_per_update", "update_s", "step_s", "time/train")


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
    "curves_steps": ("Learning curves: J vs optimizer steps", "The same runs indexed by updates: larger batches look "
                     "faster here, which is why the decision uses samples and wall-clock, not steps."),
    "grad_norm": ("Gradient norm vs samples per step (log-log)", "Mean actor gradient norm per label with the fitted "
                  "slope (pure noise: -0.5) and sqrt(a + b/B); B_simple = b/a is the critical training batch."),
    "r_n": ("Samples-to-target penalty rN vs samples per step", "rN = N*(B) / N*(B_ref) with the bootstrap CI; "
            "o aligned, x not aligned."),
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
    from batchscale.analysis.analyze import compute_analysis
    from batchscale.analysis.plots import render_plots

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # analyze already reported them when it wrote analysis.json
        result, details = compute_analysis(inputs.sweep_dir, inputs.analysis.get("target"),
                                           inputs.analysis.get("reference"), 1, 0)
    by_name = render_plots(result, details, work_dir)
    return {key: by_name[name] for key, name in PLOT_FILES.items()}


def draw_generation_figure(inputs: ReportInputs, work_dir: Path) -> Figure | None:
    profile = inputs.generation_profile
    if profile is None:
        return None
    knee = profile.get("knee") if isinstance(profile.get("knee"), dict) else {}
    metric = knee.get("metric", "tokens_per_s")
    points = sorted((r["concurrency"], r[metric]) for r in profile["rows"]
                    if _is_number(r.get("concurrency")) and _is_number(r.get(metric)))
    if not points:
        return None
    b, q = np.array(points, dtype=float).T
    if not (_is_number(knee.get("q_max")) and _is_number(knee.get("b_half"))) and len(np.unique(b)) >= 2:
        from batchscale.systems.knee import fit_saturating_throughput

        knee = {"metric": metric, **fit_saturating_throughput(b, q).to_dict()}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(b, q, "o", label=f"measured {metric}")
    caption = "Measured median throughput per concurrency level"
    if _is_number(knee.get("q_max")) and _is_number(knee.get("b_half")):
        dense = np.geomspace(b.min(), max(b.max(), knee.get("b_90") or 0), 200)
        ax.plot(dense, knee["q_max"] * dense / (dense + knee["b_half"]), "-", label="fit q_max B / (B + B_half)")
        caption += (f"; fit q(B) = {knee['q_max']:.4g} * B / (B + {knee['b_half']:.3g})"
                    + (f", R^2 {knee['r2']:.3f}" if _is_number(knee.get("r2")) else ""))
    if _is_number(knee.get("b_90")):
        extrapolated = " (extrapolated)" if knee.get("extrapolated") else ""
        ax.axvline(knee["b_90"], color="C3", ls="--", lw=1, label=f"knee B_90 = {knee['b_90']:.3g}{extrapolated}")
        caption += f"; knee B_90 = 9 B_half = {knee['b_90']:.3g}{extrapolated}"
    if _is_number(knee.get("doubling_knee")):
        ax.axvline(knee["doubling_knee"], color="C4", ls=":", lw=1.5, label=f"doubling knee {knee['doubling_knee']:g}")
        caption += f"; doubling knee {knee['doubling_knee']:g} (next doubling gains < " \
                   f"{knee.get('doubling_threshold', 0.1):.0%})"
    b_simple = inputs.plan["regime"].get("critical_training_batch")
    if _is_number(b_simple):
        ax.axvline(b_simple, color="k", ls="-.", lw=1, label=f"critical training batch B_simple {b_simple:.3g}")
        caption += f"; dash-dot: B_simple = {b_simple:.3g} samples/step from the gradient-noise fit"
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency (samples in flight)")
    ax.set_ylabel(metric.replace("_per_s", "/s"))
    path = save_figure(fig, work_dir / f".{GENERATION_FILE}.tmp")
    return Figure(GENERATION_FILE, "Generation throughput vs concurrency", caption + ".", path, True)


def draw_training_figure(inputs: ReportInputs, work_dir: Path) -> Figure | None:
    profile = inputs.training_profile
    if profile is None:
        return None
    rows = profile["rows"]
    x_key = next((k for k in BATCH_KEYS if all(_is_number(r.get(k)) for r in rows)), None)
    y_key = next((k for k in TIME_KEYS if all(_is_number(r.get(k)) for r in rows)), None)
    if x_key is None or y_key is None:
        return None
    rows = sorted(rows, key=lambda r: r[x_key])
    x, y = np.array([r[x_key] for r in rows], dtype=float), np.array([r[y_key] for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(x, y, "o", label=f"measured {y_key}")
    caption = f"Measured {y_key} (seconds per update) per {x_key}"
    fit = profile.get("fit") if isinstance(profile.get("fit"), dict) else {}
    tokens = [r.get("tokens") for r in rows]
    if _is_number(fit.get("a_s")) and _is_number(fit.get("b_s_per_token")) and all(_is_number(t) for t in tokens):
        predicted_s = fit["a_s"] + fit["b_s_per_token"] * np.array(tokens, dtype=float)
        ax.plot(x, predicted_s, "-", label="profile fit a + b tokens")
        caption += (f"; profile's fit time_s = {fit['a_s']:.3g} + {fit['b_s_per_token']:.3g} * tokens"
                    + (f", R^2 {fit['r2']:.3f}" if _is_number(fit.get("r2")) else ""))
    elif len(np.unique(x)) >= 2:
        from batchscale.systems.knee import fit_training_cost

        line = fit_training_cost(x, y)
        dense = np.linspace(x.min(), x.max(), 100)
        ax.plot(dense, line.a_s + line.b_s_per_token * dense, "-", label=f"fit a + b {x_key}")
        caption += f"; fit time_s = {line.a_s:.3g} + {line.b_s_per_token:.3g} * {x_key}, R^2 {line.r2:.3f}"
    ax.set_xlabel(x_key)
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


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and bool(np.isfinite(x))
