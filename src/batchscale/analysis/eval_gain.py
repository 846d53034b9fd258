"""Did a run learn? The change in eval accuracy from the first eval to the last, paired prompt by prompt, with its
interval.

Every eval scores the same fixed held-out prompts greedily, so each prompt's correctness is a function of the weights:
d_i = end_i - start_i in {-1, 0, 1}, averaged over seeds per prompt first when several seeds share the start. The
gain is mean(d) with a Student t interval over prompts (the prompt is the unit: it is what the eval set samples from
the task). Pairing removes the prompts both evals got right or wrong, so the interval is far narrower than comparing
two independent accuracies; what it covers is the expected gain on the task's prompt distribution for these runs'
seeds, not the gain of every possible seed (tests/test_eval_gain.py checks its coverage by simulation). Each
accuracy alone gets a Wilson score interval (Wilson 1927), which keeps its coverage near 0 and 1.

The per-prompt correctness comes from samples.jsonl (`correct`), which holds every eval example only when
`run.log_samples` >= `task.eval_size`; with fewer the gain is refused, naming the setting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchscale.analysis.intervals import student_quantile
from batchscale.errors import UserError
from batchscale.rundir.samples import read_samples

Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class EvalGain:
    """First-to-last eval accuracy of runs that share a start: accuracies with Wilson intervals, the paired gain with
    its t interval, over `prompts` prompts and `seeds` seeds."""

    prompts: int
    seeds: int
    start: float
    start_interval: tuple[float, float]
    end: float  # mean over seeds
    end_intervals: tuple[tuple[float, float], ...]  # each seed's
    gain: float
    gain_interval: tuple[float, float]

    @property
    def learned(self) -> bool:
        """The gain's interval lies above zero."""
        return self.gain_interval[0] > 0

    def to_json(self) -> dict:
        return {"prompts": self.prompts, "seeds": self.seeds, "start": self.start,
                "start_interval": list(self.start_interval), "end": self.end,
                "end_intervals": [list(i) for i in self.end_intervals], "gain": self.gain,
                "gain_interval": list(self.gain_interval), "learned": self.learned}


def paired_gain(start: list[bool], ends: list[list[bool]], confidence: float = 0.95) -> EvalGain:
    """The gain from `start` (one list of per-prompt correctness) to each seed's `ends` (lists in the same prompt
    order)."""
    first = np.asarray(start, dtype=float)  # (n,)
    last = np.asarray(ends, dtype=float)  # (seeds, n)
    if last.ndim != 2 or last.shape[1] != first.size or first.size < 2:
        raise ValueError(f"start has {first.size} prompts; every end must have the same (got shape {last.shape})")
    n = first.size
    d = last.mean(axis=0) - first  # (n,) the seeds' mean change per prompt
    half = student_quantile(confidence, n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
    gain = float(d.mean())
    return EvalGain(n, last.shape[0], float(first.mean()), wilson_interval(int(first.sum()), n), float(last.mean()),
                    tuple(wilson_interval(int(row.sum()), n) for row in last), gain, (gain - half, gain + half))


def eval_correctness(run_dir: Path) -> dict[int, list[tuple[str, bool]]]:
    """step -> (prompt, correct) of each eval example samples.jsonl holds, in the eval set's order."""
    evals: dict[int, list[tuple[str, bool]]] = {}
    for row in read_samples(run_dir):
        if row.correct is None:
            raise UserError(f"{run_dir}/samples.jsonl", "its rows carry no `correct` (written before it was recorded)",
                            "rerun with this batchscale")
        evals.setdefault(row.step, []).append((row.prompt, row.correct))
    return evals


def run_gain(run_dirs: list[Path], eval_size: int, confidence: float = 0.95) -> EvalGain:
    """The paired gain of seeds of one configuration from their first eval to their last, read from samples.jsonl.
    Every eval must hold the same `eval_size` prompts in the same order, and the seeds' first evals must agree (the
    same starting policy, greedy)."""
    starts, ends = [], []
    for run_dir in run_dirs:
        evals = eval_correctness(run_dir)
        if len(evals) < 2 or any(len(v) != eval_size for v in evals.values()):
            raise UserError(f"{run_dir}/samples.jsonl", f"it holds {sorted(len(v) for v in evals.values())} answers "
                            f"per eval, not all {eval_size} of each of two evals or more",
                            f"set run.log_samples = {eval_size} (task.eval_size) and rerun")
        steps = sorted(evals)
        starts.append(evals[steps[0]])
        ends.append(evals[steps[-1]])
    prompts = [p for p, _ in starts[0]]
    if any(s != starts[0] for s in starts) or any([p for p, _ in e] != prompts for e in ends):
        raise UserError("runs", "their first evals differ, or their evals hold other prompts, so they do not share a "
                        "start", "compare seeds of one configuration")
    return paired_gain([c for _, c in starts[0]], [[c for _, c in e] for e in ends], confidence)
