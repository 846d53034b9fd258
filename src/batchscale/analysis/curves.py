"""Learning curves J(N): evaluation score against cumulative samples N, per seed and on a common sample grid.

The paper compares configurations at equal cumulative samples; each seed's eval points are placed on a shared grid by
linear interpolation *within that seed's observed sample range only* (no extrapolation: outside it the value is NaN), so
a mean over seeds is taken only where every seed was observed.

Smoothing (optional, default off): a trailing moving average over the last `smooth_window` eval points of a seed. Trailing,
not centred, so a smoothed score at N never uses evals after N and a first crossing is never pulled earlier by the future.
With window 1 (the default) the raw evals are used, as the issue defines N* on raw eval points.

Score (`analyze --score`): `eval` (default) reads the primary eval score of eval records; `train-reward` reads the
training reward `reward/mean` of step records instead, for runs that never evaluated (most TRL GRPO runs). The training
reward is measured on the prompts being trained on, so it is not a held-out score; analyze says so in every output.
"""

from __future__ import annotations

import numpy as np

from batchscale.rundir import Run, primary_eval_score


SCORES = ("eval", "train-reward")
TRAIN_REWARD_KEY = "reward/mean"


def extract_eval_curve(run: Run, smooth_window: int = 1, score: str = "eval") -> tuple[np.ndarray, np.ndarray]:
    """(samples, scores) of one run's scored eval records (or, with score "train-reward", of its step records'
    training reward), sorted by samples, optionally smoothed."""
    if score == "train-reward":
        points = [(float(r["samples"]), r.get(TRAIN_REWARD_KEY)) for r in run.steps]
    else:
        points = [(float(r["samples"]), primary_eval_score(r)) for r in run.evals]
    points = [(n, j) for n, j in points if j is not None]
    samples = np.array([n for n, _ in points], dtype=float)
    scores = np.array([j for _, j in points], dtype=float)
    return samples, smooth_scores(scores, smooth_window)


def extract_step_curve(run: Run, smooth_window: int = 1, score: str = "eval") -> tuple[np.ndarray, np.ndarray]:
    """(optimizer steps, scores): the same evals indexed by updates instead of samples (N / samples_per_step)."""
    samples, scores = extract_eval_curve(run, smooth_window, score)
    return samples / run.samples_per_step, scores


def smooth_scores(scores: np.ndarray, smooth_window: int) -> np.ndarray:
    """Trailing moving average over `smooth_window` points (shorter at the start); window 1 returns the input."""
    if smooth_window < 1:
        raise ValueError("smooth_window must be >= 1")
    if smooth_window == 1 or len(scores) == 0:
        return scores
    cumulative = np.concatenate([[0.0], np.cumsum(scores)])
    ends = np.arange(1, len(scores) + 1)
    starts = np.maximum(ends - smooth_window, 0)
    return (cumulative[ends] - cumulative[starts]) / (ends - starts)


def build_common_grid(curves: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Union of the curves' sample points inside the range every curve observed (empty when the ranges do not overlap)."""
    if not curves:
        return np.array([])
    low = max(samples[0] for samples, _ in curves)
    high = min(samples[-1] for samples, _ in curves)
    if low > high:
        return np.array([])
    grid = np.unique(np.concatenate([samples for samples, _ in curves]))
    return grid[(grid >= low) & (grid <= high)]


def interpolate_on_grid(samples: np.ndarray, scores: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Linear interpolation of one seed's curve at `grid`; NaN outside the seed's observed range."""
    values = np.interp(grid, samples, scores)
    values[(grid < samples[0]) | (grid > samples[-1])] = np.nan
    return values


def stack_seed_curves(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> np.ndarray:
    """Matrix (seeds, grid points) of interpolated scores."""
    return np.array([interpolate_on_grid(s, j, grid) for s, j in curves]).reshape(len(curves), len(grid))


def summarize_seed_curves(curves: list[tuple[np.ndarray, np.ndarray]]) -> dict:
    """Mean and seed standard deviation (ddof=1; 0 with one seed) of a label's curves on its common grid."""
    grid = build_common_grid(curves)
    matrix = stack_seed_curves(curves, grid)
    mean = matrix.mean(axis=0) if len(curves) else np.array([])
    std = matrix.std(axis=0, ddof=1) if len(curves) > 1 else np.zeros_like(mean)
    return {"grid": grid, "mean": mean, "std": std}
