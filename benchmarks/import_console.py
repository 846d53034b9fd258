"""How `batchscale import verl` scales with the console log's size (issue 30): seconds to import verl console logs
of growing size, each built from the same blocks (Ray noise, printed dicts that are not the config and do not parse,
a pprinted validation string, step lines), so a linear reader's seconds per MB stay flat.

A reader that retried every printed dict against all the lines after it (the config scan before issue 30) took more
than 12 s on 26 KB of 2,000 such dicts; this prints the time per size and the ratio of the largest to the smallest
per-MB time. Median of --repeats imports per size.

    .venv/bin/python benchmarks/import_console.py --sizes-mb 0.1,1,10 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from batchscale.cpu import kernel_flags
from batchscale.ingest.importer import import_log

STEP = ("(TaskRunner pid=51234) step:{step} - actor/lr:1e-06 - actor/grad_norm:np.float64(0.5) - "
        "critic/score/mean:np.float64(0.25) - response_length/mean:np.float64(60.0) - "
        "prompt_length/mean:np.float64(100.0) - perf/total_num_tokens:5120 - timing_s/gen:np.float64(5.1) - "
        "timing_s/update_actor:np.float64(2.5) - timing_s/step:np.float64(9.0)\n")
NOISE = ("(TaskRunner pid=51234) {'data': tensor([1, 2])}\n"  # a printed dict naming a config section, unparsable
         "(WorkerDict pid=51300) INFO 12-01 10:00:00 llm_engine.py:400] Added request 7.\n"
         "(TaskRunner pid=51234) (\"Initial validation metrics: {'val-core/gsm8k/reward/mean@1': \"\n"
         "(TaskRunner pid=51234)  '0.25}')\n")


def write_log(path: Path, size_bytes: int) -> int:
    """A console log of about `size_bytes`; returns its number of step lines."""
    config = "(TaskRunner pid=51234) {'actor_rollout_ref': {'rollout': {'n': 4}}, 'data': {'train_batch_size': 8}}\n"
    steps, written = 0, len(config)
    with path.open("w") as out:
        while written < size_bytes:
            steps += 1
            block = NOISE * 5 + STEP.format(step=steps)
            out.write(block)
            written += len(block)
        out.write(config)  # last: every printed dict before it is scanned as a candidate config
    return steps


def measure(size_mb: float, repeats: int, root: Path) -> dict:
    log = root / f"verl_{size_mb}mb.log"
    steps = write_log(log, int(size_mb * 2**20))
    seconds = []
    for repeat in range(repeats):
        started = time.perf_counter()
        import_log("verl", log, root / f"run_{size_mb}_{repeat}")
        seconds.append(time.perf_counter() - started)
    median_s = statistics.median(seconds)
    return {"size_mb": round(log.stat().st_size / 2**20, 3), "steps": steps, "median_s": round(median_s, 4),
            "s_per_mb": round(median_s / (log.stat().st_size / 2**20), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", default="0.1,1,10")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(float(size), args.repeats, Path(tmp)) for size in args.sizes_mb.split(",")]
    per_mb = [row["s_per_mb"] for row in rows]
    result = {"cpu_flags": kernel_flags(), "rows": rows, "per_mb_ratio_largest_to_smallest": round(
        per_mb[-1] / per_mb[0], 3) if per_mb[0] else None}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for row in rows:
        print(f"{row['size_mb']:8.3f} MB  {row['steps']:7d} steps  {row['median_s']:8.3f} s  {row['s_per_mb']:.3f} s/MB")
    print(f"s/MB, largest / smallest size: {result['per_mb_ratio_largest_to_smallest']} (1 = linear)")


if __name__ == "__main__":
    main()
