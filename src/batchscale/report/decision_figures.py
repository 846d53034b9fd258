"""The two figures of what the report decides (issue 45): time-to-target against the batch, and the score against
wall-clock time.

- T/T_ref against B_train: each configuration's T/T_ref = rN / (q/q_ref) from plan.json, with the 95% interval of the
  test on ln T against the reference (`normalized_time_to_target_low`/`_high`, plan/resolve.py), on a log axis
  clipped to the point estimates (analysis.plot_axes). The reference sits at 1 (a diamond); a point with censored
  seeds is drawn at its lower bound (`normalized_time_to_target_at_least`) as an up-triangle with an arrow (nothing
  bounds it from above); one the budget cut (`budget_cut`) is marked "cut"; a point with no interval (one seed, no
  pooled spread) is its estimate alone. A point with no T at all (censored with no bound) is named in the caption.
- J against wall-clock seconds: each seed a thin line, per label one colour, the target a dashed horizontal line. The
  clock is the training loop's: `time/step` summed up to each eval (warm-up included, evals left out), the clock of
  q and of realized T, so a seed's line crosses the target at its realized T.
"""

from __future__ import annotations

from pathlib import Path

from batchscale.analysis.plot_axes import (dodge, draw_ratio_interval, plain_number, ratio_limits, set_batch_axis,
                                           set_ratio_axis)
from batchscale.analysis.plots import plt, save_figure
from batchscale.report.figure import Figure
from batchscale.report.inputs import ReportInputs

TIME_RATIO_FILE, WALL_CLOCK_FILE = "time_ratio_vs_batch.png", "j_vs_wall_clock.png"


def label_colours(plan: dict) -> dict[str, str]:
    """One matplotlib colour per label, in batch order (the order of every legend)."""
    ordered = sorted(plan["rows"], key=lambda r: (r.get("samples_per_step") or float("inf"), r["label"]))
    return {row["label"]: f"C{i % 10}" for i, row in enumerate(ordered)}


def time_ratio_points(plan: dict) -> tuple[list[dict], list[str]]:
    """(the rows drawn, each with `y`, its centre, and `kind`, how it is drawn; the labels with no T/T_ref to draw)."""
    drawn, missing = [], []
    for row in plan["rows"]:
        if row.get("samples_per_step") is None:
            missing.append(row["label"])
            continue
        if row["label"] == plan["reference"]:
            drawn.append({**row, "y": 1.0, "kind": "reference"})
        elif row.get("normalized_time_to_target_at_least") is not None:
            drawn.append({**row, "y": row["normalized_time_to_target_at_least"], "kind": "bounded"})
        elif row.get("normalized_time_to_target") is not None:
            kind = "bounded" if row.get("censoring") != "reached" else "measured"
            drawn.append({**row, "y": row["normalized_time_to_target"], "kind": kind})
        else:
            missing.append(row["label"])
    return drawn, missing


def draw_time_ratio_figure(inputs: ReportInputs, work_dir: Path):
    """T/T_ref against B_train with its intervals (module docstring); None when no row can be drawn."""
    plan = inputs.plan
    points, missing = time_ratio_points(plan)
    if not points:
        return None
    colours = label_colours(plan)
    limits = ratio_limits([p["y"] for p in points])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.axhline(1.0, color="k", ls="--", lw=1)
    clipped = 0
    points.sort(key=lambda p: (p["samples_per_step"], p["label"]))
    for p, x in zip(points, dodge([p["samples_per_step"] for p in points])):
        colour = colours[p["label"]]
        low, high = p.get("normalized_time_to_target_low"), p.get("normalized_time_to_target_high")
        if low is not None:
            clipped += draw_ratio_interval(ax, x, low, high, limits, colour)
        marker = {"reference": "D", "bounded": "^", "measured": "o"}[p["kind"]]
        note = {"reference": " (reference)", "bounded": " (at least)", "measured": ""}[p["kind"]]
        if p.get("budget_cut"):
            note += ", cut by the budget"
        ax.plot([x], [min(max(p["y"], limits[0]), limits[1])], marker, color=colour, ms=8, ls="none",
                mfc="none" if p["kind"] == "bounded" else colour, mec="k" if p["kind"] == "reference" else colour,
                label=f"{p['label']}{note}")
        if p.get("budget_cut"):
            ax.annotate("cut", (x, p["y"]), xytext=(6, -10), textcoords="offset points", fontsize=7, color=colour)
    set_batch_axis(ax, [p["samples_per_step"] for p in points], "B_train = P x G (samples per step)")
    set_ratio_axis(ax, limits, "T / T_ref (time to target, reference = 1)")
    caption = ("T/T_ref = rN / (q/q_ref) per configuration, below 1 faster than the reference; bars: the 95% interval "
               "of the test on ln T against the reference (the seed as the unit, the pooled seed spread); up-triangles: "
               "a point with censored seeds at its lower bound (its censored seeds counted at the samples they "
               "trained), an arrow up as nothing bounds it from above; a point without a bar has one seed or no "
               "pooled spread")
    if clipped:
        caption += "; an arrow at an edge is an interval end beyond the axis, its value written beside it"
    if missing:
        caption += f"; not drawn (no T/T_ref): {', '.join(missing)}"
    path = save_figure(fig, work_dir / f".{TIME_RATIO_FILE}.tmp")
    return Figure(TIME_RATIO_FILE, "Time to target relative to the reference vs batch", caption + ".", path, True)


def draw_wall_clock_figure(inputs: ReportInputs, work_dir: Path):
    """J against the training loop's seconds, each seed a thin line (module docstring); None without timed runs."""
    curves = inputs.wall_curves
    if not any(curves.values()):
        return None
    colours = label_colours(inputs.plan)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in sorted(curves, key=lambda label: list(colours).index(label) if label in colours else len(colours)):
        seeds, colour = curves[label], colours.get(label, "0.5")
        width = 1.6 if label == inputs.plan["reference"] else 0.9
        for i, (seed, seconds, scores) in enumerate(seeds):
            ax.plot(seconds, scores, "-", color=colour, lw=width, alpha=0.75, label=label if i == 0 else None)
    target = inputs.analysis.get("target")
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=1, label=f"target {plain_number(target)}")
    ax.set_xlabel("seconds of the training loop (time/step summed; evals left out)")
    ax.set_ylabel("eval score J")
    runs = sum(len(seeds) for seeds in curves.values())
    caption = (f"Each line one seed ({runs} runs), one colour per configuration, the reference thicker; dashed: the "
               "target. The clock is the one q and realized T use: time/step summed up to each eval, warm-up "
               "included, eval time left out, so a line crosses the target at its seed's realized T. This is the "
               "decision's axis: the configuration whose lines cross first reaches the target soonest")
    if inputs.untimed_runs:
        caption += (f"; {inputs.untimed_runs} run(s) with fewer than two evals on this clock (a step without "
                    "time/step) are not drawn")
    path = save_figure(fig, work_dir / f".{WALL_CLOCK_FILE}.tmp")
    return Figure(WALL_CLOCK_FILE, "Learning curves: J vs wall-clock seconds", caption + ".", path, True)
