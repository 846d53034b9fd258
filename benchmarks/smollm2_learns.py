"""Did SmolLM2-135M-Instruct learn? The seeds of examples/smollm2-learns.toml read back: eval accuracy per seed against
samples with Wilson 95% bands, the first-to-last gain paired prompt by prompt (analysis.eval_gain), and wall time.

    for s in 0 1; do batchscale train examples/smollm2-learns.toml --set run.seed=$s --out runs/learns/s$s & done; wait
    .venv/bin/python benchmarks/smollm2_learns.py runs/learns/s0 runs/learns/s1 --plot docs/smollm2-learns.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from batchscale.analysis.eval_gain import run_gain, wilson_interval  # noqa: E402
from batchscale.errors import UserError  # noqa: E402
from batchscale.files import read_json_object  # noqa: E402
from batchscale.rundir import read_run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories: seeds of one configuration")
    parser.add_argument("--plot", type=Path, help="write the curves here (PNG)")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args()
    try:
        report(args)
    except UserError as error:
        raise SystemExit(f"error: {error}") from None


def report(args: argparse.Namespace) -> None:
    runs = [read_run(path) for path in args.runs]
    eval_size = int(read_json_object(args.runs[0] / "config.json")["task"]["eval_size"])
    gain = run_gain(args.runs, eval_size)
    seeds = []
    for run in runs:
        curve = [(r["samples"], r["eval/accuracy"]) for r in run.evals]
        wall_s = run.summary.wall_s if run.summary else run.evals[-1]["wall_s"]  # unfinished: up to its last eval
        seeds.append({"seed": run.seed, "curve": curve, "wall_s": wall_s, "samples": run.evals[-1]["samples"]})
    print(f"{runs[0].label}: {len(runs)} seeds, {gain.prompts} held-out prompts, greedy")
    print(f"  start {gain.start:.3f} [{gain.start_interval[0]:.3f}, {gain.start_interval[1]:.3f}]")
    for seed, interval in zip(seeds, gain.end_intervals):
        end = seed["curve"][-1][1]
        print(f"  seed {seed['seed']}: end {end:.3f} [{interval[0]:.3f}, {interval[1]:.3f}] at {seed['samples']} "
              f"samples, {seed['wall_s'] / 60:.1f} min; curve " + ", ".join(f"{a:.3f}" for _, a in seed["curve"]))
    print(f"  gain {gain.gain:+.3f} [{gain.gain_interval[0]:+.3f}, {gain.gain_interval[1]:+.3f}] (paired, t over "
          f"prompts): {'learned' if gain.learned else 'not resolved'}")
    if args.json:
        args.json.write_text(json.dumps({"label": runs[0].label, "gain": gain.to_json(), "seeds": seeds}, indent=2))
    if args.plot:
        plot(seeds, gain, eval_size, runs[0].label, args.plot)


def plot(seeds: list[dict], gain, eval_size: int, label: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for seed in seeds:
        xs = [x for x, _ in seed["curve"]]
        ys = [y for _, y in seed["curve"]]
        bands = [wilson_interval(round(y * eval_size), eval_size) for y in ys]
        line, = ax.plot(xs, ys, marker="o", label=f"seed {seed['seed']} ({seed['wall_s'] / 60:.0f} min)")
        ax.fill_between(xs, [b[0] for b in bands], [b[1] for b in bands], color=line.get_color(), alpha=0.15)
    ax.axhspan(*gain.start_interval, color="grey", alpha=0.15, label="start, 95% interval")
    ax.set_xlabel("cumulative samples N")
    ax.set_ylabel(f"greedy eval accuracy ({eval_size} held-out prompts)")
    ax.set_title(f"{label}: gain {gain.gain:+.3f} [{gain.gain_interval[0]:+.3f}, {gain.gain_interval[1]:+.3f}]",
                 fontsize=10)
    ax.set_ylim(0, max(0.7, max(y for s in seeds for _, y in s["curve"]) + 0.1))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
