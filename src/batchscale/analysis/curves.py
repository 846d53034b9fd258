"""Learning curves J(N): evaluation score against cumulative samples N, per seed and on a common sample grid.

The paper compares configurations at equal cumulative samples; each seed's eval points are placed on a shared grid by
linear interpolation *within that seed's observed sample range only* (no extrapolation: outside it the value is NaN), so
a mean over seeds is taken only where every seed was observed.

Smoothing (optional, default off; `analyze --smooth-window W`): a *centred* moving average over W eval points of a seed
(W odd; the window shrinks symmetrically at the ends, so the first and last evals stay raw). Centred, so it has zero lag by
construction: on a straight stretch of curve it changes nothing, and N* is not read late. (A trailing average, used before,
lags by (W-1)/2 eval spacings: 41% late at B = 64 with W = 3 in a 1,000-repeat simulation.) What remains is the curvature
term of any average: on a concave curve it lowers the score by about J''(N) * (W^2 - 1) / 24 spacings^2, small when the
evals are dense (docs/LOG.md). With window 1 (the default) the raw evals are used.

Step curves index the same evals by optimizer updates: N / samples_per_step * updates_per_step (PPO with epochs x
mini-batches makes several updates per step), from run.json.

Score (`analyze --score`): `eval` (default) reads the primary eval score of eval records; `train-reward` reads the
training reward `reward/mean` of step records instead, for runs that never evaluated (most TRL GRPO runs). The training
reward is measured on the prompts being trained on, so it is not a held-out score; analyze says so in every output.
"""

from __future__ import annotations

import numpy as np

from batchscale.rundir import LoadedRun, primary_eval_score


SCORES = ("eval", "train-reward")
TRAIN_REWARD_KEY = "reward/mean"


def extract_eval_curve(run: LoadedRun, smooth_window: int = 1, score: str = "eval") -> tuple[np.ndarray, np.ndarray]:
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


def extract_step_curve(run: LoadedRun, smooth_window: int = 1, score: str = "eval") -> tuple[np.ndarray, np.ndarray]:
    """(optimizer updates, scores): the same evals indexed by updates, N / samples_per_step * updates_per_step."""
    samples, scores = extract_eval_curve(run, smooth_window, score)
    return samples / run.samples_per_step * run.descriptor.updates_per_step, scores


def smooth_scores(scores: np.ndarray, smooth_window: int) -> np.ndarray:
    """Centred moving average over `smooth_window` (odd) points, the window shrinking symmetrically at the ends; window
    1 returns the input."""
    if smooth_window < 1 or smooth_window % 2 == 0:
        raise ValueError("smooth_window must be an odd number >= 1")
    if smooth_window == 1 or len(scores) == 0:
        return scores
    cumulative = np.concatenate([[0.0], np.cumsum(scores)])
    index = np.arange(len(scores))
    half = np.minimum.reduce([np.full(len(scores), smooth_window // 2), index, len(scores) - 1 - index])
    return (cumulative[index + half + 1] - cumulative[index - half]) / (2 * half + 1)


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
