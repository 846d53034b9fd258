"""report.md for the learning side: the table behind analysis.json, the alignment verdicts with their statistic, where
alignment breaks, the gradient-noise summary, and every warning (censoring, target outside the scores, skipped runs).
Each number names how it was measured, as DESIGN.md asks. Labels, notes and warnings are data: escaped (markup.py),
never interpreted as Markdown or HTML.
"""

from __future__ import annotations

from pathlib import Path

from batchscale.analysis import alignment, intervals, signal, targets
from batchscale.analysis.plots import PLOT_FILES, ordered_labels, render_plots
from batchscale.analysis.prediction import prediction_lines
from batchscale.markup import markdown_text


def format_number(value, digits: int = 3) -> str:
    """Compact number; '-' for missing, so censored and undefined cells read as such."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def format_samples_to_target(n_star: dict, stopped: str | None = None) -> str:
    """mean [ci_low, ci_high] (reached/total), or the mean and why there is no interval ("one seed: uncertainty
    unknown"); a point a racing sweep stopped reads "stopped: cannot win (T > x s at N = y)" before the counts."""
    if stopped:
        return f"stopped: {stopped} ({n_star['reached']}/{n_star['reached'] + n_star['censored']})"
    text = format_number(n_star["mean"], 4)
    if n_star["ci_low"] is not None:
        text += f" [{format_number(n_star['ci_low'], 4)}, {format_number(n_star['ci_high'], 4)}]"
    elif n_star["mean"] is not None and n_star.get("interval"):
        text += f" ({n_star['interval']})"
    return text + f" ({n_star['reached']}/{n_star['reached'] + n_star['censored']})"


def format_target(result: dict) -> str:
    return "none" if result["target"] is None else f"{result['target']:.4g}"


def rollout_cell(config: dict) -> str:
    """"sync", or "async k=K (S)" with the mean staleness S of the samples the updates consumed."""
    if config.get("rollout_mode", "sync") == "sync":
        return "sync"
    staleness = config.get("staleness_mean")
    return f"async k={format_number(config.get('max_staleness'))} ({'-' if staleness is None else f'{staleness:.2f}'})"


def build_table_rows(result: dict, details: dict) -> list[list[str]]:
    """One row per label, in batch order: the columns the CLI table also shows."""
    rows = []
    for label in ordered_labels(result):
        config, extra = result["configs"][label], details["labels"][label]
        rows.append([
            label + (" (ref)" if label == result["reference"] else ""),
            format_number(config["samples_per_step"]),
            format_number(extra["lr_rule"]),
            format_number(config["lr"]),
            rollout_cell(config),
            format_samples_to_target(config["samples_to_target"], config.get("stopped")),
            format_number(config.get("time_to_target_realized")),
            format_number(config["r_n"]),
            format_number(config["updates_to_target"], 4),
            format_number(config["update_ratio"]),
            format_number(config["aligned"]) + f" (D={format_number(extra['alignment']['statistic'], 2)})",
            format_number(config["grad_norm_actor"]),
        ])
    return rows


TABLE_HEADER = ["label", "B", "lr rule", "lr", "rollout (mean staleness)", "N* mean [95% CI] (reached)",
                "realized T (s)", "rN", "updates", "update ratio", "aligned", "|g| actor"]


def render_report(result: dict, details: dict, figures: bool = True) -> str:
    """The markdown report; without `figures`, no figure links (the full report places the figures itself)."""
    lines = [
        "# Learning side: samples-to-target, invariance, gradient noise",
        "",
        f"Reference: {markdown_text(result['reference'])}. Target score: {format_target(result)} "
        f"({markdown_text(details['target_rule'])}).",
        "",
        *([f"**No learning signal: no verdict.** {markdown_text(result['why_no_signal'])}.", ""] if not result.get("learning_signal",
                                                                                               True) else []),
        "| " + " | ".join(TABLE_HEADER) + " |",
        "|" + "---|" * len(TABLE_HEADER),
        *("| " + " | ".join(map(markdown_text, row)) + " |" for row in build_table_rows(result, details)),
        "",
        "## How these were measured",
        f"- N*: first crossing of the target, found per seed, by linear interpolation between eval points"
        + (f" of a centred {result.get('smooth_window')}-eval moving average (zero lag)" if result.get("smooth_window", 1)
           > 1 else " (raw evals, no smoothing)") + f"; a seed that never reaches it is censored; a crossing between "
        f"evals more than {targets.WIDE_BRACKET_FRACTION:.0%} of N* apart is warned about (read late on a concave "
        f"curve). Mean over the seeds that reached it, and a {intervals.DEFAULT_CONFIDENCE:.0%} {intervals.INTERVAL_METHOD}"
        f" (Student's t, n-1 df; with one seed: \"{intervals.ONE_SEED}\"); '(reached/total)' counts them.",
        "- realized T: per seed, the sum of `time/step` up to the crossing (warm-up step included); mean over reached seeds.",
        "- rN = mean N*(label) / mean N*(reference); updates = N* / samples_per_step * updates_per_step; update ratio "
        "against the reference (ideal for a doubled batch: 0.5).",
        f"- aligned: D = mean |J_label - J_ref| / mean pooled seed sd over the common sample range; aligned when "
        f"D <= {alignment.ALIGNMENT_THRESHOLD}.",
        f"- default target rule: {targets.DEFAULT_TARGET_FRACTION:.0%} of the way from the reference's initial to best mean "
        f"score (used unless --target is given), offered only when the reference's mean curve rises at least "
        f"{signal.RISE_SIGMAS:g}x its eval noise above its start (seed spread or eval-to-eval scatter).",
        "",
        "## Batch-size invariance",
        f"Family compared (lr_rule of the reference): {', '.join(map(markdown_text, details['family']))}.",
    ]
    breaking = details.get("alignment_break") or {"status": "holds", "samples_per_step": None, "note": ""}
    lines.append({
        "breaks": f"Alignment breaks at samples_per_step = {breaking['samples_per_step']} "
                  f"({markdown_text(breaking['note'])}).",
        "holds": "Alignment does not break within the family measured (a break needs two consecutive failing batches).",
    }.get(breaking["status"], f"Where alignment breaks is undetermined ({markdown_text(breaking['note'])})."))
    for label in ordered_labels(result):
        measured, name = details["labels"][label]["alignment"], markdown_text(label)
        if label == result["reference"]:
            lines.append(f"- {name}: the reference")
        elif measured["statistic"] is None:
            lines.append(f"- {name}: undetermined ({markdown_text(measured['reason'])})")
        else:
            direction = "faster" if measured["signed"] > 0 else "slower"
            lines.append(f"- {name}: D = {measured['statistic']:.2f}, signed {measured['signed']:+.2f} "
                         f"({direction} per sample than the reference on average)")
    lines += ["", "## Gradient noise (critical training batch)",
              f"Proxy: mean gradient norm over step records up to {format_number(details.get('grad_window_samples'))} "
              "samples (the same window for every label); fit |g|^2 = a + b/B by relative least squares, with B the "
              "samples per optimizer update (run.json samples_per_update), B_simple = b/a (McCandlish et al. 2018)."]
    for network, fit in (details.get("grad_noise") or {}).items():
        if not fit:
            lines.append(f"- {network}: no `grad_norm/{network}` in the step records")
            continue
        low, high = fit["slope_range"]
        lines.append(f"- {network}: log-log slope {format_number(fit['slope'])} over B = {low:g}..{high:g} "
                     f"(pure noise: -0.5); a = {format_number(fit['a'])}, b = {format_number(fit['b'])}, "
                     f"B_simple = {format_number(fit['b_simple'])}" + (f" ({markdown_text(fit['note'])})" if fit["note"] else ""))
    lines += ["", *prediction_lines(result)]
    if details.get("warnings"):
        lines += ["", "## Warnings", *(f"- {markdown_text(message)}" for message in details["warnings"])]
    if figures:
        lines += ["", "## Figures", *(f"![{key}]({name})" for key, name in PLOT_FILES.items())]
    lines.append("")
    return "\n".join(lines)


def render_outputs(result: dict, details: dict, out_dir: Path) -> dict[str, Path]:
    """Plots and report.md under temporary names: {final file name: temporary path}."""
    files = render_plots(result, details, out_dir)
    temporary = out_dir / ".report.md.tmp"
    temporary.write_text(render_report(result, details))
    files["report.md"] = temporary
    return files
