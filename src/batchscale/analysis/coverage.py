"""Coverage of N*'s interval by simulation: how often does a nominal 95% interval over a few seeds hold the truth?

Model (the synthetic sweep's curve, analysis/synthetic.py): seed k's eval scores are

    J_k(N) = final - (final - initial) * exp(-N / (samples_scale * f_k)) + eval_sd * Z,   ln f_k ~ Normal(0, seed_sd^2)

at evals every `eval_spacing_samples`, and its N* is found by the analysis's own `targets.find_samples_to_target`. The
truth each interval is held against is what it estimates, over the population of seeds, measured once on
`truth_seeds` simulated seeds: the geometric mean exp(E[ln N*]) for the t-interval on log N* (intervals.py), the
arithmetic mean E[N*] for the percentile bootstrap of the mean (bootstrap.py). The crossing's own bias (first passage
through noise, linear interpolation) is thereby left out: it is the same for every interval and is measured elsewhere.
Vectorized over repeats and seeds; seeded, so a figure reproduces exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchscale.analysis.bootstrap import bootstrap_mean_ci
from batchscale.analysis.intervals import compute_log_t_interval
from batchscale.analysis.targets import find_samples_to_target


@dataclass(frozen=True)
class CurveModel:
    initial: float = 0.1
    final: float = 0.8
    target: float = 0.5
    samples_scale: float = 4000.0
    seed_sd: float = 0.1  # sd of ln(time-scale factor) between seeds
    eval_sd: float = 0.01  # score noise of one eval
    eval_spacing_samples: float = 256.0
    horizon_samples: float = 20000.0

    def simulate_n_star(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """N* of `shape` independent seeds (NaN for a seed that never reaches the target)."""
        grid = np.arange(0.0, self.horizon_samples + self.eval_spacing_samples, self.eval_spacing_samples)
        factors = np.exp(self.seed_sd * rng.standard_normal(shape))
        scores = self.final - (self.final - self.initial) * np.exp(-grid / (self.samples_scale * factors[..., None]))
        scores = scores + self.eval_sd * rng.standard_normal(scores.shape)  # (*shape, evals)
        flat = scores.reshape(-1, grid.size)
        n_star = [find_samples_to_target(grid, row, self.target) for row in flat]
        return np.array([np.nan if n is None else n for n in n_star]).reshape(shape)


def measure_coverage(seed_counts=(2, 3, 4, 5), repeats: int = 400, confidence: float = 0.95, seed: int = 0,
                     model: CurveModel = CurveModel(), truth_seeds: int = 4000, resamples: int = 1000) -> dict:
    """{seeds: {"t_log": coverage, "percentile_bootstrap": coverage}} and the truths, over `repeats` simulated sweeps."""
    rng = np.random.default_rng(seed)
    population = model.simulate_n_star(rng, (truth_seeds,))
    population = population[np.isfinite(population) & (population > 0)]
    truth = {"geometric_mean": float(np.exp(np.log(population).mean())), "mean": float(population.mean())}
    result = {"truth": truth, "repeats": repeats, "confidence": confidence, "coverage": {}}
    for seeds in seed_counts:
        n_star = model.simulate_n_star(rng, (repeats, seeds))  # (repeats, seeds)
        n_star = n_star[np.all(np.isfinite(n_star) & (n_star > 0), axis=1)]
        low, high = compute_log_t_interval(n_star, confidence)
        t_covered = (low <= truth["geometric_mean"]) & (truth["geometric_mean"] <= high)
        boot = np.array([bootstrap_mean_ci(row, confidence, resamples, seed=i)[1:] for i, row in enumerate(n_star)])
        boot_covered = (boot[:, 0] <= truth["mean"]) & (truth["mean"] <= boot[:, 1])
        result["coverage"][seeds] = {"t_log": float(t_covered.mean()), "percentile_bootstrap": float(boot_covered.mean()),
                                     "sweeps": int(len(n_star))}
    return result
