"""How often one run's B_noise interval holds the value, over several single runs of one configuration (issue 38).

    python benchmarks/gns_coverage.py SWEEP_DIR [--label LABEL] [--value 672 ...]

For every run of LABEL under SWEEP_DIR/runs (default: the only label there): its one-run B_noise and 80% interval, as
`batchscale predict RUN` reads it (`telemetry.gradnoise.summarize_noise_scale`), whether the interval holds the pool of
the other runs (leave-one-out, `pool_noise_scales`), and whether it holds each --value (e.g. a sweep-fitted B_noise);
then the counts. Reads run directories only (torch-free). Results: docs/LOG.md, 2026-12-03.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from batchscale.rundir import read_run
from batchscale.telemetry.gradnoise import pool_noise_scales, summarize_noise_scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--label", help="the configuration (default: the only one under runs/)")
    parser.add_argument("--value", type=float, action="append", default=[], help="a B_noise to check coverage of")
    args = parser.parse_args()
    runs = [read_run(path) for path in sorted((args.sweep_dir / "runs").iterdir()) if path.is_dir()]
    labels = {run.label for run in runs}
    label = args.label or (labels.pop() if len(labels) == 1 else parser.error(f"--label: one of {sorted(labels)}"))
    runs = sorted((run for run in runs if run.label == label), key=lambda run: run.seed)
    if len(runs) < 2:
        parser.error(f"{label}: {len(runs)} run(s); leave-one-out needs two or more")
    pooled = pool_noise_scales([run.steps for run in runs])
    print(f"{label}: {len(runs)} runs, pooled B_noise {_text(pooled.value, pooled.low, pooled.high)}")
    held_pool, held = 0, [0] * len(args.value)
    for run in runs:
        one = summarize_noise_scale(run.steps)
        others = pool_noise_scales([other.steps for other in runs if other is not run])
        inside = [one.low <= value <= one.high for value in (others.value, *args.value)]
        held_pool += inside[0]
        held = [count + hit for count, hit in zip(held, inside[1:])]
        print(f"  seed {run.seed}: {_text(one.value, one.low, one.high)}; the other runs pooled {others.value:,.0f}: "
              + "; ".join(f"{value:,.0f} {'held' if hit else 'missed'}" for value, hit in
                          zip((others.value, *args.value), inside)))
    print(f"80% intervals holding the other runs' pool: {held_pool} of {len(runs)}"
          + "".join(f"; holding {value:,.0f}: {count} of {len(runs)}" for value, count in zip(args.value, held)))


def _text(value: float, low: float, high: float) -> str:
    return f"{value:,.0f} [{low:,.0f}, {'unresolved' if math.isinf(high) else f'{high:,.0f}'}]"


if __name__ == "__main__":
    main()
