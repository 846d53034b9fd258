"""Is there a learning signal to decide on? A label learns when its seed-mean curve rises clearly above its start.

Noise of one seed's eval score, the larger of two estimates (either can be missing):
- seed-to-seed spread along the curve: sqrt(mean over the common grid of the seed variance), ddof=1, with >= 2 seeds;
- eval-to-eval scatter within a seed: second differences of consecutive evals cancel a smooth trend, and for independent
  noise of sd sigma they have sd sigma * sqrt(6); sigma = 1.4826 * MAD(second differences) / sqrt(6), pooled over seeds
  (needs >= 3 evals). This is the same noise an accuracy's binomial standard error over the eval set describes
  (sqrt(p(1-p)/n)); the run log does not record the eval set's size, so it is measured rather than assumed.

Rule: the label learns when max(mean curve) - mean curve at its first point >= `RISE_SIGMAS` * noise. Three sigmas of one
seed (not of the mean): the maximum of k noisy evals of a flat curve already exceeds the start by about
sigma * sqrt(2 ln k) (2.6 sigma at 30 evals), so a smaller multiple would crown noise. The default target (targets.py)
then lies at least 2.4 sigma above the start, beyond the eval score's noise.
"""

from __future__ import annotations

import math

import numpy as np

RISE_SIGMAS = 3.0
MAD_TO_SD = 1.4826  # sd / MAD of a normal distribution


def estimate_score_noise(seed_curves: list[tuple[np.ndarray, np.ndarray]], summary: dict) -> float | None:
    """sd of one eval score of one seed (see the module docstring); None when neither estimate is possible."""
    estimates = []
    if len(seed_curves) > 1 and summary["std"].size:
        estimates.append(float(np.sqrt(np.mean(np.square(summary["std"])))))
    second_differences = np.concatenate([np.diff(j, n=2) for _, j in seed_curves if len(j) >= 3] or [np.array([])])
    if second_differences.size:
        deviation = np.median(np.abs(second_differences - np.median(second_differences)))
        estimates.append(float(MAD_TO_SD * deviation / math.sqrt(6)))
    return max(estimates) if estimates else None


def measure_learning_signal(seed_curves: list[tuple[np.ndarray, np.ndarray]], summary: dict) -> dict:
    """{learns, rise, noise, note} for one label: does its mean curve rise >= RISE_SIGMAS noise above its start?"""
    mean = summary["mean"]
    if mean.size < 2:
        return {"learns": False, "rise": None, "noise": None, "note": "fewer than 2 eval points in common over seeds"}
    rise = float(np.max(mean) - mean[0])
    noise = estimate_score_noise(seed_curves, summary)
    if noise is None:
        return {"learns": rise > 0, "rise": rise, "noise": None, "note": "eval noise unknown (too few evals and seeds)"}
    learns = rise > 0 and rise >= RISE_SIGMAS * noise
    note = f"rises {rise:.3g} above its start of {mean[0]:.3g}, eval noise {noise:.2g} per seed"
    return {"learns": bool(learns), "rise": rise, "noise": noise,
            "note": note + ("" if learns else f": less than {RISE_SIGMAS:g}x the noise")}
