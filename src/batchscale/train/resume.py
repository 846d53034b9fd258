"""`batchscale train --resume RUN_DIR`: an unfinished run continues from its newest complete checkpoint.

- The config is the run's own (its config.json), with `--set` overrides on top; a config file given beside --resume
  must be the run's. Only the keys that change no number of the run may differ (`MAY_DIFFER`: the budget, which may
  only grow, where and how often it checkpoints, whether it saves its policy, its trackers): any other difference is
  refused, naming every key that differs, before anything loads.
- A finished run (summary.json) is not resumed; a directory that is not a run is refused, and so is a sweep's
  staging directory (`runs/.NAME.partial-PID-TOKEN`): the sweep resumes those, under its lock (sweep.resume), and a
  second writer beside a live sweep's worker would interleave two runs' records.
- Nothing read is trusted (issue 39). config.json must still describe the run: its batch facts those run.json
  recorded at the start, and the whole config (outside MAY_DIFFER) the one the newest checkpoint trained with; a
  config.json edited since is refused naming the keys, before anything loads (else the run would go on at another
  batch and rewrite run.json over records trained at the old one).
- The newest checkpoint that passes its checks is used (rundir.checkpoint.usable_checkpoints: a torn, altered or
  foreign one is skipped for the previous one, with a warning; then train.checkpoint_checks: its loop, optimizer
  settings, generators and tensors against itself and the run's config, before any of it is restored); metrics.jsonl
  is cut back to the records it follows, which the run then writes again, and so is samples.jsonl (to the evals up
  to the checkpoint's step); the run's trackers replace their runs with the records kept
  (telemetry.trackers.mirror). Without a usable checkpoint the run starts again from its first step, and says so.
- Synchronous runs continue exactly: the records after the checkpoint are those the uninterrupted run writes, times
  aside (tests/test_resume.py). An asynchronous run's generator restarts from the checkpoint's weights with an empty
  buffer, the staleness bound held; which groups it trains on next differs from the uninterrupted run's, and the log
  says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from batchscale.config import Config, apply_overrides, derive_plan, read_toml, validate_config
from batchscale.errors import UserError
from batchscale.files import read_json_object
from batchscale.rundir.checkpoint import CheckpointProblem, newest_manifest, rewind_metrics, usable_checkpoints
from batchscale.rundir.run import CONFIG_FILE, DESCRIPTOR_FILE, METRICS_FILE, SUMMARY_FILE, read_descriptor, sweep_of
from batchscale.rundir.samples import rewind_samples
from batchscale.rundir.staging import STAGING_NAME
from batchscale.telemetry.trackers.base import flatten_config as flatten

if TYPE_CHECKING:
    from batchscale.train.checkpointing import LoopState

# entries of a run that a resume rewrites, replaces or deletes: never through a link out of the run
REWRITTEN_ENTRIES = ("metrics.jsonl", "samples.jsonl", "run.json", "config.json", "trackers.json", "checkpoints",
                     "policy", "tensorboard", "wandb", "mlruns")
MAY_DIFFER = ("run.budget_samples", "run.checkpoint_every_samples", "run.keep_checkpoints", "run.save_policy",
              "run.tensorboard", "run.trackers", "run.out_dir")


DESCRIPTOR_FACTS = ("label", "seed", "algorithm", "prompts_per_step", "samples_per_prompt", "samples_per_step",
                    "samples_per_update", "updates_per_step", "lr", "rollout_mode")  # run.json, from the config


def check_resumable(run_dir: Path, through_sweep: bool = False) -> None:
    """A run directory whose run has not finished; else a UserError naming what it is. A sweep's staging directory
    is resumable only `through_sweep` (its worker, under the sweep lock)."""
    run_dir = Path(run_dir)
    if not through_sweep and STAGING_NAME.fullmatch(run_dir.absolute().name) and \
            (sweep := sweep_of(run_dir)) is not None:
        raise UserError("--resume", f"{run_dir} is a staging directory of the sweep {sweep}: a sweep's points are "
                        "resumed by the sweep, under its lock, never by a second writer",
                        f"rerun the sweep (batchscale sweep SWEEP_FILE --out {sweep}): it resumes this point from its "
                        "newest checkpoint")
    if not (run_dir / CONFIG_FILE).is_file() or not (run_dir / METRICS_FILE).is_file():
        raise UserError("--resume", f"{run_dir} is not a batchscale run directory (no {CONFIG_FILE} and "
                        f"{METRICS_FILE})", "pass the directory of an unfinished `batchscale train` run")
    if (run_dir / SUMMARY_FILE).is_file():
        raise UserError("--resume", f"{run_dir} holds a finished run ({SUMMARY_FILE} is written): nothing to resume",
                        "train a new run with a larger run.budget_samples into another --out")
    if links := [name for name in REWRITTEN_ENTRIES if (run_dir / name).is_symlink()]:
        raise UserError("--resume", f"{run_dir} holds symbolic links where a run keeps its own files ({', '.join(links)}"
                        f" -> {os.readlink(run_dir / links[0])}); a resume rewrites or deletes those, and never "
                        "through a link", f"replace the link{'s' if len(links) > 1 else ''} with what the run wrote, "
                        "or remove them, and rerun")


def saved_config(run_dir: Path) -> dict:
    data = read_json_object(Path(run_dir) / CONFIG_FILE)
    data.pop("derived", None)
    return data


def resume_config(run_dir: Path, config: Path | None = None, overrides: list[str] = ()) -> Config:
    """The config a resumed run continues with: the run's own (or `config`, which must match it) with `overrides`;
    refused, naming the keys, where it differs from the run's in more than MAY_DIFFER or its budget shrinks."""
    check_resumable(run_dir)
    saved = saved_config(run_dir)
    original = validate_config(saved)
    if edited := recorded_differences(run_dir, original):
        raise UserError(f"--resume {run_dir}", f"its {CONFIG_FILE} no longer describes the run: {edited}",
                        f"put {CONFIG_FILE} back as the run wrote it (the newest checkpoint's checkpoint.json holds "
                        "its config), or train the new config into another --out")
    cfg = validate_config(apply_overrides(read_toml(config) if config else saved, list(overrides)))
    if differ := config_differences(original, cfg):
        raise UserError("--resume", f"the config differs from the run's in {differ}",
                        "resume with the run's own config (omit CONFIG and those --set keys); only "
                        f"{', '.join(MAY_DIFFER)} may change")
    if cfg.run.budget_samples < original.run.budget_samples:
        raise UserError("run.budget_samples", f"may only grow on --resume (the run's is "
                        f"{original.run.budget_samples}, got {cfg.run.budget_samples})",
                        f"set run.budget_samples >= {original.run.budget_samples}, or omit it")
    return cfg


def config_differences(original: Config, cfg: Config) -> str | None:
    """The keys outside MAY_DIFFER in which `cfg` differs from the run's `original`, with both values (the first
    six), as `a.b, c.d (a.b: 1 in the run, 2 now; ...)`; None when it differs in none."""
    before, after = flatten(original.model_dump(mode="json")), flatten(cfg.model_dump(mode="json"))
    differ = sorted(key for key in set(before) | set(after)
                    if before.get(key) != after.get(key) and key not in MAY_DIFFER)
    if not differ:
        return None
    shown = "; ".join(f"{key}: {before.get(key)!r} in the run, {after.get(key)!r} now" for key in differ[:6])
    return f"{', '.join(differ)} ({shown})"


def recorded_differences(run_dir: Path, original: Config) -> str | None:
    """Where the run's config.json (as `original`) no longer describes what the run recorded: run.json's batch facts
    (written from the config at the start) and the config the newest checkpoint trained with (keys outside
    MAY_DIFFER); None when it does. Cheap: no tensor file is read."""
    plan, problems = derive_plan(original), []
    if (Path(run_dir) / DESCRIPTOR_FILE).is_file():
        recorded = read_descriptor(run_dir).model_dump(mode="json")
        now = {"label": plan.label, "seed": original.run.seed, "algorithm": original.algorithm.name,
               "prompts_per_step": plan.prompts_per_step, "samples_per_prompt": plan.samples_per_prompt,
               "samples_per_step": plan.samples_per_step, "samples_per_update": plan.samples_per_update,
               "updates_per_step": plan.updates_per_step, "lr": plan.lr, "rollout_mode": original.rollout.mode}
        problems += [f"{key}: {recorded.get(key)!r} in {DESCRIPTOR_FILE}, {now[key]!r} from {CONFIG_FILE}"
                     for key in DESCRIPTOR_FACTS if recorded.get(key) != now[key]]
    manifest = newest_manifest(run_dir)
    trained = manifest["state"].get("config") if manifest else None
    if isinstance(trained, dict):
        before, after = flatten(trained), flatten(original.model_dump(mode="json"))
        problems += [f"{key}: {before.get(key)!r} at checkpoint step {manifest['step']}, {after.get(key)!r} in "
                     f"{CONFIG_FILE}" for key in sorted(set(before) | set(after))
                     if before.get(key) != after.get(key) and key not in MAY_DIFFER]
    return "; ".join(problems[:6]) + (f" (and {len(problems) - 6} more)" if len(problems) > 6 else "") or None


def continuation_problem(run_dir: Path, cfg: Config) -> str | None:
    """Why the unfinished run at `run_dir` cannot be continued with `cfg` (a sweep's point, whose config comes from
    the sweep file): its config.json no longer describes the run (recorded_differences), it differs in more than
    MAY_DIFFER, or its budget would shrink; None when it can."""
    original = validate_config(saved_config(run_dir))
    if edited := recorded_differences(run_dir, original):
        return f"its {CONFIG_FILE} no longer describes the run ({edited})"
    if differ := config_differences(original, cfg):
        return f"its config differs from the point's in {differ}"
    if cfg.run.budget_samples < original.run.budget_samples:
        return (f"its run.budget_samples ({original.run.budget_samples}) is larger than the point's "
                f"({cfg.run.budget_samples})")
    return None


def resume_point(run_dir: Path, state, log: Callable[[str], None] = print) -> LoopState | None:
    """Restore `state` (freshly built for the run's config) from the run's newest usable checkpoint and cut
    metrics.jsonl back to it; returns where the loop continues, None (from the start) when no checkpoint is
    usable."""
    from batchscale.train.checkpointing import apply_restore, prepare_restore

    for checkpoint, records in usable_checkpoints(run_dir, warn=log):
        try:
            restorable = prepare_restore(state, checkpoint, MAY_DIFFER)
        except CheckpointProblem as e:
            log(f"warning: skipping checkpoint {checkpoint.path}: {e}")
            continue
        loop = apply_restore(state, restorable, records)
        break
    else:
        rewind_metrics(run_dir, [])
        rewind_samples(run_dir, None)
        log(f"resuming {run_dir}: no usable checkpoint, so the run starts again from its first step")
        return None
    rewind_metrics(run_dir, records)
    rewind_samples(run_dir, loop.step)  # the eval a checkpoint follows is before it: its samples stay
    log(f"resuming {run_dir} from {checkpoint.path.name}: step {loop.step}, {loop.samples:,} samples")
    if state.cfg.rollout.mode == "async":
        log("note: asynchronous resume: the generator restarts from the checkpoint's weights with an empty buffer "
            f"(staleness bound k = {state.cfg.rollout.max_staleness} held); the groups in flight at the checkpoint "
            "are not restored, so the records after it differ from an uninterrupted run's")
    return loop
