"""The error rate of a racing sweep's final answer, by simulation with a known truth (sweep/race_simulation.py): per
condition of issue 38, over `--sweeps` simulated sweeps, the share whose final answer leaves the true winner out (a
single winner that is another point, or a near-optimal set without it), with its binomial Monte-Carlo sd, the share
that answered at all, the share that stopped the true winner, and the mean share of the full grid trained. The
numbers README ("Racing sweeps") and docs/LOG.md state come from here.

    .venv/bin/python benchmarks/race_error_rates.py --sweeps 3000 [--json rates.json] [--only "winner's"]
"""

from __future__ import annotations

import argparse
import json
import math
import time

from batchscale.sweep.race_simulation import conditions, measure_rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--only", default=None, help="run the conditions whose name contains this text")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    rows = []
    print(f"{'condition':42s} {'missed':>8s} {'+-sd':>6s} {'answered':>9s} {'w stopped':>10s} {'grid':>6s}")
    for condition in conditions():
        if args.only and args.only not in condition.name:
            continue
        began = time.process_time()
        rates = measure_rates(condition, args.sweeps, args.seed)
        sd = math.sqrt(rates.missed * (1 - rates.missed) / args.sweeps)
        rows.append({**vars(rates), "missed_sd": sd, "cpu_s": time.process_time() - began})
        print(f"{condition.name:42s} {rates.missed:8.2%} {sd:6.2%} {rates.answered:9.1%} {rates.winner_stopped:10.1%} "
              f"{rates.grid_share:6.0%}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sweeps": args.sweeps, "seed": args.seed, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
