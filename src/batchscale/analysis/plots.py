"""The four learning-side figures of the paper, as PNGs (matplotlib, Agg backend: no display needed).

- J vs samples: seed-mean curve per label with a +-1 seed-sd band and the target line (the invariance picture);
- J vs steps: the same curves indexed by optimizer updates (larger batches look faster here; that is the point);
- gradient norm vs samples_per_update on log-log axes, with the fitted slope over its range and sqrt(a + b/B);
- rN vs samples_per_step with the N* t-interval (log scale) propagated as ci / mean N*(reference), and rN = 1; beside it,
  the rN predicted from the reference run's own gradient noise scale (analysis.prediction).
Batch axes are ticked at the batches measured, in plain numbers, and the rN axis is clipped to the point estimates
(analysis.plot_axes), so neither colliding tick labels nor one wide two-seed interval make a figure unreadable.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend must be chosen first)
import numpy as np  # noqa: E402

from batchscale.analysis.plot_axes import (dodge, draw_ratio_interval, ratio_limits, set_batch_axis,  # noqa: E402
                                           set_plain_log_axis, set_ratio_axis)
from batchscale.analysis.prediction import plot_predicted_penalty  # noqa: E402

PLOT_FILES = {
    "curves_samples": "j_vs_samples.png",
    "curves_steps": "j_vs_steps.png",
    "grad_norm": "grad_norm_vs_batch.png",
    "r_n": "r_n_vs_batch.png",
}


def save_figure(fig, temporary: Path) -> Path:
    """Save as PNG under a temporary name (the extension does not say PNG, so the format is explicit)."""
    for ax in fig.axes:
        if ax.get_legend_handles_labels()[0]:  # an empty legend only draws a warning
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(temporary, format="png", dpi=120)
    plt.close(fig)
    return temporary


def ordered_labels(result: dict) -> list[str]:
    """Labels by samples_per_step, then name: legends read small to large."""
    return sorted(result["configs"], key=lambda label: (result["configs"][label]["samples_per_step"], label))


def plot_curves(result: dict, details: dict, curve_key: str, xlabel: str, temporary: Path) -> Path:
    """Seed-mean score curves with +-1 sd bands; the reference is drawn thicker."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in ordered_labels(result):
        curve = details["labels"][label][curve_key]
        if curve["grid"].size == 0:
            continue
        width = 2.5 if label == result["reference"] else 1.3
        (line,) = ax.plot(curve["grid"], curve["mean"], lw=width, label=label)
        ax.fill_between(curve["grid"], curve["mean"] - curve["std"], curve["mean"] + curve["std"], alpha=0.15,
                        color=line.get_color())
    if result["target"] is not None:
        ax.axhline(result["target"], color="k", ls="--", lw=1, label=f"target {result['target']:.3g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("eval score J")
    return save_figure(fig, temporary)


def plot_grad_norm(details: dict, temporary: Path) -> Path:
    """Gradient-norm proxy vs batch (log-log) for actor and critic, with fitted slope and noise-scale curves."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for network, fit in (details.get("grad_noise") or {}).items():
        if not fit:
            continue
        batches, norms = np.array(fit["samples_per_update"]), np.array(fit["grad_norm"])
        (points,) = ax.plot(batches, norms, "o", label=f"{network} |g|")
        if fit["slope"] is not None:
            low, high = fit["slope_range"]
            in_range = (batches >= low) & (batches <= high)
            anchor_b, anchor_g = np.exp(np.mean(np.log(batches[in_range]))), np.exp(np.mean(np.log(norms[in_range])))
            span = np.array([low, high])
            ax.plot(span, anchor_g * (span / anchor_b) ** fit["slope"], "-", color=points.get_color(),
                    label=f"{network} slope {fit['slope']:.3f}")
        if fit["a"] is not None and fit["a"] > 0 and fit["b"] is not None and fit["b"] > 0:
            dense = np.geomspace(batches.min(), batches.max(), 100)
            ax.plot(dense, np.sqrt(fit["a"] + fit["b"] / dense), ":", color=points.get_color(),
                    label=f"{network} fit, B_simple {fit['b_simple']:.3g}")
    set_batch_axis(ax, [b for fit in (details.get("grad_noise") or {}).values() if fit
                        for b in fit["samples_per_update"]], "samples_per_update B")
    set_plain_log_axis(ax, "y")
    ax.set_ylabel("mean gradient norm")
    return save_figure(fig, temporary)


def plot_r_n(result: dict, temporary: Path) -> Path:
    """rN per label against its batch size, marked by aligned / not aligned, on a log axis clipped to the point
    estimates (plot_axes: an interval reaching beyond is an arrow at the edge with its end written)."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    reference_n = result["configs"][result["reference"]]["samples_to_target"]["mean"]
    shown = [(label, result["configs"][label]) for label in ordered_labels(result)
             if result["configs"][label]["r_n"] is not None]
    limits = ratio_limits([c["r_n"] for _, c in shown] + [c.get("r_n_predicted") for _, c in shown])
    clipped = 0
    for i, ((label, config), x) in enumerate(zip(shown, dodge([c["samples_per_step"] for _, c in shown]))):
        color = f"C{i % 10}"
        n_star = config["samples_to_target"]
        if n_star["ci_low"] is not None and reference_n:
            clipped += draw_ratio_interval(ax, x, n_star["ci_low"] / reference_n, n_star["ci_high"] / reference_n,
                                           limits, color)
        marker = "o" if config["aligned"] else "x"
        ax.plot(x, config["r_n"], marker, color=color, label=label, ls="none")
    plot_predicted_penalty(ax, result)
    ax.axhline(1.0, color="k", ls="--", lw=1)
    set_batch_axis(ax, [c["samples_per_step"] for _, c in shown], "samples_per_step B")
    set_ratio_axis(ax, limits, "rN = N*(B) / N*(B_ref)")
    if clipped:
        ax.set_title("arrows: interval ends beyond the axis (value written)", fontsize=8)
    return save_figure(fig, temporary)


def render_plots(result: dict, details: dict, out_dir: Path) -> dict[str, Path]:
    """All four PNGs under temporary names; returns {final file name: temporary path}."""
    def temporary(key: str) -> Path:
        return out_dir / f".{PLOT_FILES[key]}.tmp"

    return {
        PLOT_FILES["curves_samples"]: plot_curves(result, details, "curve", "cumulative samples N",
                                                  temporary("curves_samples")),
        PLOT_FILES["curves_steps"]: plot_curves(result, details, "step_curve", "optimizer updates", temporary("curves_steps")),
        PLOT_FILES["grad_norm"]: plot_grad_norm(details, temporary("grad_norm")),
        PLOT_FILES["r_n"]: plot_r_n(result, temporary("r_n")),
    }
