"""Stored reference trajectories (TRL's idea): short GRPO, PPO, ReMax and async runs must log the metrics.jsonl records
stored under tests/trajectories/, recorded from the code before the training modules moved into a package (issue 24).

What is compared: every record, key for key (same keys, same kind, same step and samples, ints, strings and None
exactly), less the keys that measure wall-clock time (`DROPPED`). Floats: exactly when this machine is the recording
one (same kernel flags, torch CPU capability, torch and transformers: this code is deterministic there, run after run),
else to a relative tolerance, because float32 reductions are summed in another order on another CPU (torch, MKL and
oneDNN pick 8-lane AVX2 or 16-lane AVX-512 kernels by the CPU's flags); a few keys that rounding decides
(`SAME_MACHINE_ONLY`) are then left out.

Regenerate the references only on purpose, when a change of behaviour is intended (see tests/trajectories/README.md):
    PYTHONPATH=src python tests/test_stored_trajectories.py --record
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from test_trainer import read_records, small_config

from batchscale.config import derive_plan, resolved_config
from batchscale.cpu import cpu_model, kernel_flags
from batchscale.train.loop import train  # batchscale.trainer.train when these were recorded (5e4ace0)

STORED = Path(__file__).parent / "trajectories"
RECORDING = "BATCHSCALE_RECORD_TRAJECTORIES"  # set only by `--record` below: it overwrites the references
REL_TOL, ABS_TOL = 1e-4, 1e-7  # another machine's floats (abs_tol: for values near zero, e.g. loss/kl ~ 1e-5)
LOOSER = {"gns/": 1e-3}  # gns/trace_sigma: a difference of squared gradient norms, rounding amplified (2e-4 on AVX2)
# Keys compared on the recording machine only, because another CPU's rounding moves them by more than any tolerance:
# - critic/value_clip_frac counts ties: at the first mini-batch the critic's values equal the rollout's but for
#   rounding, so whether the clipped value loss exceeds the unclipped one is decided by the last bit of each token;
# - gns/grad_sq, the noise scale's |G|^2 estimate, is a difference of squared gradient norms: where the true |G|^2 is
#   below their rounding (here 1e-7 against norms of 1e-1, the random model's rewards being tiny) its value and sign
#   are rounding noise, and gns/b_noise = trace_sigma / |G|^2 with it (None where |G|^2 <= 0). Likewise the critic's.
SAME_MACHINE_ONLY = ("critic/value_clip_frac", "gns/grad_sq", "gns/b_noise", "gns/critic/grad_sq", "gns/critic/b_noise")

# The same arithmetic on every CPU: float32 training (no bf16 autocast where bf16 is native), float32 generation with
# torch's kernels (not the engine's native ones, which exist only where their library builds), one thread, on the CPU
# even where a GPU is present.
COMMON = ["optim.compute_dtype='float32'", "rollout.compute_dtype='float32'", "run.threads=1", "run.device='cpu'"]
# small_config: P=4, G=3, micro-batches of 4, B_ref=12, eval_size=16, 4 new tokens; each run 3 steps, 3 evals. The
# seeds are ones whose responses score above zero at every step, so that every step's advantages and gradients are
# not zero (the random model rarely writes a right digit; at seed 0 these runs score 0 from step 2).
RUNS = {
    # GRPO with a KL term: the frozen reference model's path
    "grpo": ["run.seed=3", "run.budget_samples=36", "run.eval_every_samples=24", "algorithm.kl_coef=0.05"],
    # PPO with a critic, 2 epochs x 2 mini-batches of 2 prompts (4 samples, 2 micro-batches of 2) per step. Learning
    # rates 10x the defaults so that the later updates of a step clip (actor/clip_frac > 0: at 1e-4 clip_eps would
    # not matter). Seed 1 (with G = 2; at seeds 0 and 3 the returns of some step are all 0 up to rounding, and
    # critic/explained_variance a meaningless -1e15).
    "ppo": ["run.seed=1", "algorithm.name='ppo'", "batch.samples_per_prompt=2", "batch.micro_batch_size=2",
            "batch.reference_samples_per_step=8", "run.budget_samples=24", "run.eval_every_samples=16",
            "algorithm.ppo_epochs=2", "algorithm.ppo_mini_batches=2", "optim.lr=1e-3", "critic.lr=1e-2"],
    # ReMax: one greedy baseline response per prompt
    "remax": ["run.seed=3", "algorithm.name='remax'", "run.budget_samples=36", "run.eval_every_samples=24"],
    # GRPO with asynchronous rollouts at k = 0: the generator process, sample for sample the synchronous run
    "async": ["run.seed=3", "rollout.mode='async'", "rollout.max_staleness=0", "run.budget_samples=36",
              "run.eval_every_samples=24"],
}
# Keys that measure wall-clock time, not behaviour: `wall_s` and every `time/...` (in async runs these include
# time/wait_for_samples and the generator's time/generate and time/generator_idle, its busy and idle seconds). At
# k = 0 the other async keys (async/buffer_size, rollout/active_mean: the groups waiting, the decode concurrency) do
# not depend on timing: the generator decodes exactly one step's groups per version, and they are kept.
DROPPED = ("wall_s",)
DROPPED_PREFIXES = ("time/",)


def config(model_dir, name: str):
    return small_config(model_dir, *COMMON, *RUNS[name])


def flat_config(cfg) -> dict:
    """The resolved config as dotted keys (model.name, a temporary directory, left out): what the recording ran."""
    def flatten(node: dict, prefix: str = "") -> dict:
        out = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
        return out

    return {key: value for key, value in flatten(resolved_config(cfg, derive_plan(cfg))).items() if key != "model.name"}


def without_times(record: dict) -> dict:
    return {key: value for key, value in record.items()
            if key not in DROPPED and not key.startswith(DROPPED_PREFIXES)}


def model_fingerprint(model_dir: Path) -> dict:
    """The fixture model's weights in two numbers: a transformers whose initialization changed shows up here, not as
    a mysterious difference in the records."""
    from safetensors.torch import load_file

    weights = load_file(Path(model_dir) / "model.safetensors")
    return {"param_sum": sum(float(w.double().sum()) for w in weights.values()),
            "param_abs_sum": sum(float(w.double().abs().sum()) for w in weights.values())}


def environment() -> dict:
    import torch
    import transformers

    return {"kernel_flags": kernel_flags(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__, "transformers": transformers.__version__}


def recorded() -> dict:
    return json.loads((STORED / "recorded.json").read_text())


def rel_tol(key: str) -> float:
    return next((tol for prefix, tol in LOOSER.items() if key.startswith(prefix)), REL_TOL)


def float_mismatch(key: str, got: float, want: float, exact: bool) -> bool:
    if exact:
        return got != want and not (math.isnan(got) and math.isnan(want))
    return not math.isclose(got, want, rel_tol=rel_tol(key), abs_tol=ABS_TOL)


def differences(name: str, got: list[dict], want: list[dict], exact: bool) -> list[str]:
    """Lines naming the run, the record (kind, step) and the key of each difference; empty when they match."""
    if [(r["kind"], r["step"]) for r in got] != [(r["kind"], r["step"]) for r in want]:
        return [f"{name}: records (kind, step) {[(r['kind'], r['step']) for r in got]}, stored "
                f"{[(r['kind'], r['step']) for r in want]}"]
    lines = []
    for g, w in zip(got, want):
        where = f"{name}, {g['kind']} record of step {g['step']}"
        if g.keys() != w.keys():
            lines.append(f"{where}: keys not stored {sorted(g.keys() - w.keys())}, stored keys missing "
                         f"{sorted(w.keys() - g.keys())}")
        for key in sorted(g.keys() & w.keys()):
            a, b = g[key], w[key]
            if key in SAME_MACHINE_ONLY and not exact:
                continue
            if type(a) is not type(b):
                lines.append(f"{where}: {key} = {a!r} ({type(a).__name__}), stored {b!r} ({type(b).__name__})")
            elif isinstance(a, float) and float_mismatch(key, a, b, exact):
                rule = "exact" if exact else f"rel_tol {rel_tol(key)}"
                lines.append(f"{where}: {key} = {a!r}, stored {b!r} (relative difference "
                             f"{abs(a - b) / max(abs(a), abs(b)):.2e}, {rule})")
            elif not isinstance(a, float) and a != b:
                lines.append(f"{where}: {key} = {a!r}, stored {b!r}")
    return lines


@pytest.mark.parametrize("name", list(RUNS))
def test_a_short_run_logs_its_stored_trajectory(name, random_model_dir, tmp_path):
    cfg = config(random_model_dir, name)
    train(cfg, tmp_path / name, log=lambda s: None)
    records = [without_times(r) for r in read_records(tmp_path / name)]
    if os.environ.get(RECORDING) == "1":
        write_reference(name, records, random_model_dir, cfg)
        return
    meta, here = recorded(), environment()
    exact = all(here[key] == meta[key] for key in here)
    stored = [json.loads(line) for line in (STORED / f"{name}.jsonl").read_text().splitlines()]
    lines = differences(name, records, stored, exact)
    if not lines:
        return
    rule = ("exactly: the recording machine" if exact else
            f"to rel_tol {REL_TOL} ({LOOSER}): here {here}, recorded {({key: meta[key] for key in here})}")
    pytest.fail(f"{len(lines)} difference(s) from tests/trajectories/{name}.jsonl, compared {rule}:\n  "
                + "\n  ".join(lines[:20] + [f"... {len(lines) - 20} more"] * (len(lines) > 20))
                + "".join(f"\n  likely cause: {cause}" for cause in likely_causes(name, cfg, random_model_dir, meta)),
                pytrace=False)


def likely_causes(name: str, cfg, model_dir, meta: dict) -> list[str]:
    """What differs from the recording besides the code: the run's config, or the fixture model's weights."""
    causes = []
    ran, then = flat_config(cfg), meta["runs"][name]["config"]
    changed = sorted(key for key in ran.keys() | then.keys() if ran.get(key) != then.get(key))
    if changed:
        causes.append("the run's config is not the recorded one (test_trainer.small_config, COMMON or RUNS changed?): "
                      + ", ".join(f"{key} = {ran.get(key)!r}, recorded {then.get(key)!r}" for key in changed))
    fingerprint = model_fingerprint(model_dir)
    if any(not math.isclose(value, meta["model"][key], rel_tol=1e-6) for key, value in fingerprint.items()):
        causes.append(f"the random_model_dir fixture's weights are not the recorded ones ({fingerprint}, recorded "
                      f"{meta['model']}): did transformers' initialization change?")
    return causes


def write_reference(name: str, records: list[dict], model_dir, cfg) -> None:
    STORED.mkdir(exist_ok=True)
    (STORED / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    path = STORED / "recorded.json"
    meta = json.loads(path.read_text()) if path.exists() else {}
    git = lambda *args: subprocess.run(["git", *args], capture_output=True, text=True, cwd=STORED).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") + ("+uncommitted-src" if git("status", "--porcelain", "--", "../../src")
                                                  else "")
    meta.update(environment(), commit=head, python=platform.python_version(), cpu=cpu_model(),
                model=model_fingerprint(model_dir),
                runs={**meta.get("runs", {}), name: {"overrides": [*COMMON, *RUNS[name]], "config": flat_config(cfg)}})
    path.write_text(dump_meta(meta))


def dump_meta(meta: dict) -> str:
    """recorded.json with a line per fact and per run's overrides and config (a diff names the run that changed)."""
    lines = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in meta.items() if key != "runs"]
    runs = [f"    {json.dumps(name)}: {{\n      \"overrides\": {json.dumps(run['overrides'])},\n"
            f"      \"config\": {json.dumps(run['config'])}\n    }}" for name, run in meta["runs"].items()]
    return "{\n" + ",\n".join(lines + ['  "runs": {\n' + ",\n".join(runs) + "\n  }"]) + "\n}\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(f"usage: python {sys.argv[0]} --record   (overwrites the stored references in {STORED})")
    os.environ[RECORDING] = "1"
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
