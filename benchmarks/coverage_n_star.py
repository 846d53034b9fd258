"""Coverage of N*'s nominal 95% interval, and how often two equal configurations are called resolved, by simulation.

1. Coverage (analysis/coverage.py): per seed count, `--repeats` simulated sweeps of the synthetic curve; the share whose
   interval holds the truth, for the t-interval on log N* that `analyze` reports now and the percentile bootstrap of
   the mean it reported before.
2. False resolution: two configurations with the same true N* and q, N* drawn per seed from the same curve model; the
   share of sweeps in which the plan calls the faster-looking one resolved. Old rule: their T intervals (N* percentile
   bootstrap / q) do not overlap. New rule: plan/resolve.py's test on ln T over seeds (each seed's own N* and q).
3. Smoothing lag: N* read from noise-free synthetic curves (analysis/synthetic.py, noise_scale 2048, samples_scale 2000)
   evaluated every 1024 and every 256 samples, after a W-point moving average: the trailing one used before, the
   centred one now.

    .venv/bin/python benchmarks/coverage_n_star.py --repeats 400
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from batchscale.analysis.bootstrap import bootstrap_mean_ci
from batchscale.analysis.coverage import CurveModel, measure_coverage
from batchscale.analysis.curves import smooth_scores
from batchscale.analysis.synthetic import compute_synthetic_score
from batchscale.analysis.targets import find_samples_to_target
from batchscale.plan.decide import compute_plan
from batchscale.plan.log_time import SeedTime
from batchscale.plan.rows import ConfigMeasurement

Q_SAMPLES_PER_S, Q_STEP_SD, Q_STEPS = 10.0, 0.05, 40


def measure_from_seeds(label: str, n_star: np.ndarray, rng: np.random.Generator, batch: int) -> ConfigMeasurement:
    """What the plan would see: each seed's N* and its own run's q (noisy steps, their median: plan/sweep_inputs.py)."""
    log_q = np.median(np.log(Q_SAMPLES_PER_S) + Q_STEP_SD * rng.standard_normal((len(n_star), Q_STEPS)), axis=1)
    logs = np.log(n_star)
    return ConfigMeasurement(label, float(np.exp(logs.mean())), float(np.exp(log_q.mean())), seeds_reached=len(n_star),
                             samples_per_step=batch,
                             seed_times=tuple(SeedTime(float(n), float(q)) for n, q in zip(logs, log_q)))


def measure_false_resolution(seed_counts, repeats: int, seed: int = 1, model: CurveModel = CurveModel()) -> dict:
    rng = np.random.default_rng(seed)
    rates = {}
    for seeds in seed_counts:
        old = new = 0
        for i in range(repeats):
            a, b = model.simulate_n_star(rng, (2, seeds))
            rows = [measure_from_seeds("a", a, rng, 64), measure_from_seeds("b", b, rng, 128)]
            plan = compute_plan(rows, "a")
            new += plan.resolved
            (_, low_a, high_a), (_, low_b, high_b) = (bootstrap_mean_ci(x, seed=i) for x in (a, b))
            qa, qb = rows[0].throughput_samples_per_s, rows[1].throughput_samples_per_s
            old += low_a / qa > high_b / qb or low_b / qb > high_a / qa
        rates[seeds] = {"old_overlap_rule": old / repeats, "new_log_t_test": new / repeats}
    return rates


def trailing_average(scores: np.ndarray, window: int) -> np.ndarray:
    """The smoothing `analyze` offered before (the baseline): the mean of the last `window` evals."""
    return np.array([scores[max(0, i - window + 1):i + 1].mean() for i in range(len(scores))])


def measure_smoothing_bias(batches=(64, 512, 2048), windows=(1, 3, 5), spacing: float = 1024.0,
                           target: float = 0.5) -> dict:
    """{batch: {window: (trailing bias, centred bias)}}, N* relative to the analytic crossing."""
    evals = np.arange(0.0, 65536.0 + spacing, spacing)
    fine = np.linspace(0.0, 65536.0, 655361)
    result = {}
    for batch in batches:
        truth = fine[np.argmax(compute_synthetic_score(fine, batch, 2048.0, 2000.0) >= target)]
        scores = compute_synthetic_score(evals, batch, 2048.0, 2000.0)
        result[batch] = {w: tuple(find_samples_to_target(evals, smoothed, target) / truth - 1 for smoothed in
                                  (trailing_average(scores, w), smooth_scores(scores, w))) for w in windows}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    seed_counts = (2, 3, 4, 5)
    coverage = measure_coverage(seed_counts, repeats=args.repeats, seed=args.seed)
    false_resolution = measure_false_resolution(seed_counts, args.repeats, seed=args.seed + 1)
    smoothing = {spacing: measure_smoothing_bias(spacing=spacing) for spacing in (1024.0, 256.0)}
    if args.json:
        print(json.dumps({"coverage": coverage, "false_resolution": false_resolution,
                          "smoothing_bias": {s: {b: {w: list(v) for w, v in ws.items()} for b, ws in by_batch.items()}
                                             for s, by_batch in smoothing.items()}},
                         indent=2))
        return
    print(f"truth: geometric mean N* {coverage['truth']['geometric_mean']:.0f}, mean {coverage['truth']['mean']:.0f}; "
          f"{args.repeats} sweeps per row")
    print("seeds | coverage t on log N* | coverage percentile bootstrap | resolved, equal truth: old | new")
    for seeds in seed_counts:
        c, r = coverage["coverage"][seeds], false_resolution[seeds]
        print(f"{seeds} | {c['t_log']:.1%} | {c['percentile_bootstrap']:.1%} | {r['old_overlap_rule']:.1%} | "
              f"{r['new_log_t_test']:.1%}")
    for spacing, by_batch in smoothing.items():
        print(f"N* bias, evals every {spacing:.0f} samples (trailing before -> centred now):")
        for batch, by_window in by_batch.items():
            print(f"B = {batch}: " + ", ".join(f"W = {w} {t:+.1%} -> {c:+.1%}" for w, (t, c) in by_window.items()))


if __name__ == "__main__":
    main()
