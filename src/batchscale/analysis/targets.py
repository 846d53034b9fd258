"""Samples-to-target N*, updates-to-target and the samples-to-target penalty rN (paper: T = N*/q, rN = N*(B)/N*(B_ref)).

N* of one seed is the *first* crossing of the target: the first eval whose score is >= target, linearly interpolated
between it and the eval before it. A curve that dips back below the target later keeps its first crossing (the paper's
"first N at which J reaches the target"); a seed that never reaches the target is censored (None), not dropped.
If the very first eval already meets the target, N* is that eval's sample count (usually 0).

Updates-to-target = N* / samples_per_step * updates_per_step (run.json: 1 for the paper's single pass; PPO epochs x
mini-batches otherwise).

Realized time-to-target of one seed: the sum of its `time/step` up to the crossing, the last step counted in proportion
(cumulative step time interpolated linearly in cumulative samples, from (0 samples, 0 s)). Unlike N*/q it keeps the
warm-up step and every straggler, so it is what the run actually spent; eval time is not in time/step and is left out.

A crossing read from evals far apart is read late on a concave curve (linear interpolation lies below it):
`find_crossing_bracket` gives the eval interval that holds the crossing, so the analysis can warn when it is wider than
`WIDE_BRACKET_FRACTION` of N*.

Default target (when the user gives none): 80% of the way from the reference's initial mean score to the best score its
seed-mean curve reaches. Anchoring on the reference keeps the target reachable by the configuration everything is compared
to, and 80% sits on the still-rising part of the curve, where N* separates configurations, rather than on a noisy plateau.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_TARGET_FRACTION = 0.8
WIDE_BRACKET_FRACTION = 0.25


def find_crossing_index(scores: np.ndarray, target: float) -> int | None:
    """Index of the first eval whose score is >= target; None if none is."""
    reached = np.flatnonzero(np.asarray(scores) >= target)
    return int(reached[0]) if reached.size else None


def find_samples_to_target(samples: np.ndarray, scores: np.ndarray, target: float) -> float | None:
    """First N at which the score reaches `target` (linear interpolation between evals); None if never (censored)."""
    i = find_crossing_index(scores, target)
    if i is None:
        return None
    if i == 0:
        return float(samples[0])
    n_before, n_after = samples[i - 1], samples[i]
    j_before, j_after = scores[i - 1], scores[i]
    # j_before < target <= j_after, so the slope is positive and the fraction lies in (0, 1].
    fraction = (target - j_before) / (j_after - j_before)
    return float(n_before + fraction * (n_after - n_before))


def find_crossing_bracket(samples: np.ndarray, scores: np.ndarray, target: float) -> tuple[float, float] | None:
    """(samples before, samples after) of the eval interval holding the first crossing; None if there is no interval
    (never reached, or reached at the first eval)."""
    i = find_crossing_index(scores, target)
    return None if not i else (float(samples[i - 1]), float(samples[i]))


def compute_updates_to_target(samples_to_target: float | None, samples_per_step: float,
                              updates_per_step: int = 1) -> float | None:
    """Optimizer updates needed to reach the target: N* / samples_per_step * updates_per_step."""
    if samples_to_target is None:
        return None
    return samples_to_target / samples_per_step * updates_per_step


def compute_realized_time(samples_to_target: float | None, steps: list[dict]) -> float | None:
    """Seconds of `time/step` spent up to N* (interpolated within the step that crosses); None when N* is None, a step
    is untimed, or the steps logged end before N*."""
    if samples_to_target is None:
        return None
    samples, seconds = [0.0], [0.0]
    for record in steps:
        step_s = record.get("time/step")
        if not isinstance(step_s, (int, float)) or isinstance(step_s, bool) or not math.isfinite(step_s):
            return None
        samples.append(float(record["samples"]))
        seconds.append(seconds[-1] + float(step_s))
    if samples_to_target > samples[-1]:
        return None
    return float(np.interp(samples_to_target, samples, seconds))


def compute_ratio(value: float | None, reference_value: float | None) -> float | None:
    """value / reference_value (rN for N*, update ratio for updates); None when either is missing or the reference is 0."""
    if value is None or reference_value is None or reference_value <= 0 or not math.isfinite(reference_value):
        return None
    return value / reference_value


def choose_default_target(grid: np.ndarray, mean_scores: np.ndarray, fraction: float = DEFAULT_TARGET_FRACTION) -> float:
    """`fraction` of the way from the reference's initial mean score to its best mean score."""
    initial, best = float(mean_scores[0]), float(np.max(mean_scores))
    return initial + fraction * (best - initial)
