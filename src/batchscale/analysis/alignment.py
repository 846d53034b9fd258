"""Batch-size invariance as a statistic: does a label's mean curve stay inside the seed-to-seed band of the reference?

The paper calls a family batch-size invariant when its sample-indexed trajectories align, and reads alignment by eye against
seed variability. Our statistic makes that reading explicit. On a uniform grid of `GRID_POINTS` sample counts spanning the
range observed by every seed of both the label and the reference:

    D = mean_N |J_label(N) - J_ref(N)| / mean_N sd(N)

J are seed means; sd(N) is the seed standard deviation pooled over the reference's and the label's seeds (pooled variance,
ddof=1 per label). Pooling is the efficient estimate under the very hypothesis being checked (invariance: both labels are
the same process up to seed noise) and it matters with the 2-3 seeds sweeps can afford. D is the label's average distance
from the reference in units of the typical seed spread; the label is aligned when D <= 1.5. Ratio of means rather than mean
of ratios, so points where every seed agrees (sd = 0, e.g. the eval before training) neither blow up nor get dropped. The
signed version (mean difference / mean sd) says whether a deviating label learns faster (> 0) or slower (< 0) per sample.

Why 1.5: for a copy differing only by seed noise with n seeds per label, the difference of means has sd sd*sqrt(2/n), so
E[D] = sqrt(2/pi)*sqrt(2/n)/c4 ~ 0.90 (n=2), 0.69 (n=3), 0.59 (n=4) (c4: small-sample bias of the sd), and 1.5 leaves room for
time-correlated seed noise; a curve lagging by more than about one seed sd over the range is flagged. It is a band, not a
significance test, on purpose: more seeds should not turn a practically irrelevant shift into "non-invariant".
Needs >= 3 seeds over the two labels (else no band: aligned is None).
"""

from __future__ import annotations

import numpy as np

from batchscale.analysis.curves import stack_seed_curves

ALIGNMENT_THRESHOLD = 1.5
GRID_POINTS = 101


def measure_alignment(
    label_curves: list[tuple[np.ndarray, np.ndarray]],
    reference_curves: list[tuple[np.ndarray, np.ndarray]],
    threshold: float = ALIGNMENT_THRESHOLD,
) -> dict:
    """{statistic, signed, aligned, sample_range, reason}: D and its verdict for one label against the reference."""
    result = {"statistic": None, "signed": None, "aligned": None, "sample_range": None, "reason": ""}
    if len(label_curves) + len(reference_curves) < 3:
        result["reason"] = "fewer than 3 seeds over label and reference: no seed-to-seed band"
        return result
    all_curves = label_curves + reference_curves
    low = max(samples[0] for samples, _ in all_curves)
    high = min(samples[-1] for samples, _ in all_curves)
    if not high > low:
        result["reason"] = "no common sample range with the reference"
        return result
    grid = np.linspace(low, high, GRID_POINTS)
    label_matrix = stack_seed_curves(label_curves, grid)  # (seeds, grid)
    reference_matrix = stack_seed_curves(reference_curves, grid)  # (seeds, grid)
    band = float(pool_seed_sd(label_matrix, reference_matrix).mean())
    difference = label_matrix.mean(axis=0) - reference_matrix.mean(axis=0)
    distance = float(np.abs(difference).mean())
    if band > 0:
        statistic, signed = distance / band, float(difference.mean()) / band
    else:  # reference seeds identical: only an identical curve counts as aligned
        statistic = 0.0 if distance == 0 else float("inf")
        signed = 0.0 if distance == 0 else float(np.sign(difference.mean())) * float("inf")
    result.update(
        statistic=statistic,
        signed=signed,
        aligned=bool(statistic <= threshold),
        sample_range=[float(low), float(high)],
    )
    return result


def pool_seed_sd(*matrices: np.ndarray) -> np.ndarray:
    """Pooled seed standard deviation per grid point: sqrt(sum (n_k - 1) s_k^2 / sum (n_k - 1))."""
    squares = sum(((m - m.mean(axis=0)) ** 2).sum(axis=0) for m in matrices)
    degrees_of_freedom = sum(len(m) - 1 for m in matrices)
    return np.sqrt(squares / degrees_of_freedom)


def find_alignment_break(aligned_by_samples_per_step: list[tuple[int, bool | None]],
                         reference_samples_per_step: int) -> dict:
    """Where alignment breaks above the reference: {samples_per_step, status, note}, status "breaks", "holds" or
    "undetermined". One failing batch is not a break (D fluctuates with a handful of seeds): the break is the smallest
    batch that fails together with the next larger one. A batch fails when any label at it is unaligned; a batch with
    an undetermined label (aligned None) is skipped for the search, and when no break is found it makes the whole
    answer "undetermined" rather than "holds"."""
    verdicts: dict[int, list] = {}
    for samples_per_step, aligned in aligned_by_samples_per_step:
        if samples_per_step > reference_samples_per_step:
            verdicts.setdefault(samples_per_step, []).append(aligned)
    undetermined = [b for b, v in sorted(verdicts.items()) if any(a is None for a in v)]
    determined = [(b, not all(v)) for b, v in sorted(verdicts.items()) if b not in undetermined]
    for (batch, fails), (_, next_fails) in zip(determined, determined[1:]):
        if fails and next_fails:
            earlier = [b for b in undetermined if b < batch]
            note = f" (undetermined at {', '.join(map(str, earlier))}, so it may break earlier)" if earlier else ""
            return {"samples_per_step": batch, "status": "breaks", "note": f"two consecutive batches fail{note}"}
    if determined and determined[-1][1]:
        return {"samples_per_step": None, "status": "undetermined",
                "note": f"only the largest batch measured, {determined[-1][0]}, fails: a break needs two consecutive "
                        "failing batches"}
    if undetermined:
        return {"samples_per_step": None, "status": "undetermined",
                "note": f"no alignment verdict at samples_per_step {', '.join(map(str, undetermined))}"}
    return {"samples_per_step": None, "status": "holds", "note": "no two consecutive batches fail"}
