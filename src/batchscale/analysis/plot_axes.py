"""Axes that stay readable (issue 45): batch axes ticked at the batches measured, ratio axes clipped to where the
points are.

- `set_batch_axis`: a log2 axis whose ticks are the batch sizes actually measured, labelled as plain numbers ("64",
  not "2^6" or "6x10^1"), minor ticks unlabelled, so neighbouring labels never run into each other (a tick whose label
  would sit closer than `MIN_TICK_RATIO` to the previous one is left unlabelled).
- `set_ratio_axis` and `draw_ratio_interval`: ratios (rN, T/T_ref) on a log axis (a ratio's interval is symmetric on
  it, the t-interval being on log N* or log T) whose range is set by the point estimates and 1, widened by
  `RATIO_MARGIN`, never by one wide interval: a two-seed interval 0.2-6.4 would otherwise squash every other point
  against the reference line. An interval end outside the range is drawn as an arrow at the edge, with its value
  written beside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter, NullLocator

MIN_TICK_RATIO = 1.3  # labelled ticks at least this factor apart on a log axis
RATIO_MARGIN = 1.6  # the ratio axis reaches this factor beyond the outermost point estimate (and 1)


def plain_number(value: float) -> str:
    """64 -> "64", 0.5 -> "0.5", 1536 -> "1536": no exponents, no trailing zeros."""
    if value >= 100 or float(value).is_integer():
        return f"{value:.0f}"
    return f"{value:.3g}" if value >= 0.01 else f"{value:.2g}"


def spaced(values: Iterable[float], ratio: float = MIN_TICK_RATIO) -> list[float]:
    """The sorted positive values, each at least `ratio` above the last one kept."""
    kept: list[float] = []
    for v in sorted({float(v) for v in values if v and v > 0}):
        if not kept or v >= kept[-1] * ratio:
            kept.append(v)
    return kept


def set_batch_axis(ax, batches: Iterable[float], label: str, axis: str = "x") -> None:
    """A log2 batch axis ticked (and labelled in plain numbers) at the measured `batches`."""
    ticks = spaced(batches)
    scale = ax.set_xscale if axis == "x" else ax.set_yscale
    scale("log", base=2)
    target = ax.xaxis if axis == "x" else ax.yaxis
    if ticks:
        target.set_major_locator(FixedLocator(ticks))
        target.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v)))
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())
    (ax.set_xlabel if axis == "x" else ax.set_ylabel)(label)


def set_plain_log_axis(ax, axis: str = "y") -> None:
    """A log10 axis over the data already drawn, ticked at round numbers (1, 1.5, 2, 3, 5, 7 x 10^k, at least
    MIN_TICK_RATIO apart) labelled plainly, no minor labels: never "3x10^1 4x10^1" running together."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    low, high = ax.get_xlim() if axis == "x" else ax.get_ylim()
    if low > 0 and high > low:
        decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        ticks = spaced(m * 10.0 ** k for k in decades for m in (1, 1.5, 2, 3, 5, 7) if low <= m * 10.0 ** k <= high)
        if len(ticks) < 2:
            ticks = [t for t in MaxNLocator(4).tick_values(low, high) if low <= t <= high and t > 0]
        target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v)))
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())


def ratio_limits(estimates: Iterable[float], margin: float = RATIO_MARGIN) -> tuple[float, float]:
    """(low, high) of a ratio axis: the point estimates and 1, widened by `margin` each way."""
    values = [v for v in estimates if v is not None and v > 0 and math.isfinite(v)] + [1.0]
    return min(values) / margin, max(values) * margin


def set_ratio_axis(ax, limits: tuple[float, float], label: str) -> None:
    """A log ratio axis over `limits`, ticked at plain ratios inside them."""
    ax.set_yscale("log")
    ax.set_ylim(*limits)
    candidates = (0.05, 0.1, 0.2, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0, 50.0)
    inside = [t for t in candidates if limits[0] <= t <= limits[1]]
    ax.yaxis.set_major_locator(FixedLocator(spaced(inside, 1.2) or [1.0]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel(label)


def draw_ratio_interval(ax, x: float, low: float | None, high: float | None, limits: tuple[float, float],
                        color: str, width: float = 1.2) -> int:
    """A vertical interval [low, high] at `x` clipped to `limits`: an end beyond them becomes an arrow at the edge,
    its value written beside it; an end that is None (no upper bound, say) is an arrow to the edge, unwritten.
    Returns how many ends were clipped."""
    bottom, top = limits
    clipped = 0
    shown_low = bottom if low is None or low < bottom else low
    shown_high = top if high is None or high > top else high
    ax.vlines(x, shown_low, shown_high, color=color, lw=width)
    for value, edge, marker, va in ((low, bottom, "v", "bottom"), (high, top, "^", "top")):
        if value is None or (value < bottom if marker == "v" else value > top):
            clipped += 1
            ax.plot([x], [edge], marker=marker, color=color, ms=7, clip_on=False, ls="none")
            if value is not None:
                ax.annotate(plain_number(value), (x, edge), xytext=(5, 6 if va == "bottom" else -6),
                            textcoords="offset points", fontsize=7, color=color, va=va)
        else:
            ax.plot([x], [value], marker="_", color=color, ms=8, ls="none")
    return clipped


def draw_marked_lines(ax, marks: list[tuple[float, str, dict]]) -> None:
    """Vertical lines, each labelled by its own text along it (no legend to match up): (x, text, line style). The
    texts are written at staggered heights, so lines close together (a knee and a critical batch within a few
    percent) keep legible labels; a line drawn over another is offset by its style, not hidden."""
    heights = (0.97, 0.62, 0.30)
    for i, (x, text, style) in enumerate(sorted(marks, key=lambda m: m[0])):
        ax.axvline(x, **style)
        ax.text(x, heights[i % len(heights)], f" {text}", transform=ax.get_xaxis_transform(), rotation=90,
                va="top", ha="right", fontsize=7, color=style.get("color", "k"),
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})


DODGE_FACTOR = 1.07  # labels at one batch are drawn this factor apart on a log batch axis, so neither hides


def dodge(batches: list[float]) -> list[float]:
    """Each batch as drawn: the k labels that share one spread symmetrically around it by DODGE_FACTOR (the tick
    stays at the batch itself)."""
    shared: dict[float, int] = {}
    for b in batches:
        shared[b] = shared.get(b, 0) + 1
    seen: dict[float, int] = {}
    drawn = []
    for b in batches:
        k, i = shared[b], seen.get(b, 0)
        seen[b] = i + 1
        drawn.append(b * DODGE_FACTOR ** (i - (k - 1) / 2))
    return drawn
