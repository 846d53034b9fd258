"""Run a racing sweep (`sweep --adaptive`): the schedule of sweep.race on an executor, under the sweep's lock.

The sweep file's points give the labels and the first seeds; a label's further seeds (up to `--max-seeds`) are its
config with `run.seed` replaced, continuing the file's seed list with the next integers. Each seed runs as in a plain
sweep (a staging directory the sweep names and moves into runs/ when its worker succeeds), with the race's stop rule
for that seed. After every finished seed the race hears of it, sweep.json is rewritten with the points run so far and
the race's facts (target, rule, stopped points), and the next seed is decided.

Resuming: a rerun reads the finished runs under runs/ back into the race (N* recomputed at the recorded target) and
goes on from there; the recorded target is kept, so a rerun cannot move the score runs already stopped at. A seed
the interrupted race had started continues from its newest checkpoint when the race launches it again (sweep.resume),
its stop rule, the rerun's, checked at its evals from there on against all of its records, those before the
checkpoint included; a claimed staging directory the race does not launch again is removed when the race ends.
"""

from __future__ import annotations

import math
import shutil
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from batchscale.analysis import curves, signal, targets
from batchscale.analysis.analyze import USER_TARGET_RULE, ReferenceFacts, choose_reference_label
from batchscale.config import validate_config
from batchscale.errors import UserError
from batchscale.rundir import (RaceFacts, read_run, read_sweep_document, run_dir_name, sweep_runs_dir,
                               write_sweep_points)
from batchscale.sweep.executors import RunJob, open_executor
from batchscale.sweep.race import PointFacts, Race, RaceSettings
from batchscale.sweep.race_rule import SeedResult
from batchscale.sweep.runner import adopt, failure_reason, prebuild_models, prepare_sweep_dir
from batchscale.sweep.spec import Point


def seed_list(points: list[Point], max_seeds: int) -> list[int]:
    """The sweep file's seeds in order, continued with the next integers up to `max_seeds`."""
    seeds = list(dict.fromkeys(p.seed for p in points))
    while len(seeds) < max_seeds:
        seeds.append(max(seeds) + 1)
    return seeds


def point_for_seed(template: Point, seed: int) -> Point:
    data = template.config_data
    data["run"]["seed"] = seed
    return Point.of(validate_config(data))


def reference_of(templates: dict[str, Point]) -> str:
    """The reference label, as analyze chooses it (analysis.analyze.choose_reference_label), from the points' plans."""
    return choose_reference_label({label: ReferenceFacts(p.plan.lr_rule, p.plan.samples_per_step, p.config.rollout.mode,
                                                         p.plan.prompts_per_step) for label, p in templates.items()})


def seed_result(run_dir: Path, target: float | None) -> SeedResult:
    """What a finished run tells the race: N* at `target` (None before the target is fixed), steps' ln q."""
    run = read_run(run_dir)
    samples, scores = curves.extract_eval_curve(run)
    n_star = targets.find_samples_to_target(samples, scores, target) if target is not None else None
    log_q = tuple(math.log(run.samples_per_step / s["time/step"]) for s in run.steps[1:] if s.get("time/step"))
    summary = run.summary
    stopped = summary.stopped
    return SeedResult(run.label, run.seed, n_star, float(summary.samples), log_q, float(summary.wall_s or 0.0),
                      stopped.reason if stopped is not None else None, stopped.message if stopped is not None else None)


def default_target(run_dirs: list[Path]) -> tuple[float | None, str]:
    """The default rule (analysis.targets) on the reference's first seeds; None when their mean curve does not rise."""
    seed_curves = [curves.extract_eval_curve(read_run(d)) for d in run_dirs]
    summary = curves.summarize_seed_curves(seed_curves)
    learns = signal.measure_learning_signal(seed_curves, summary)
    if not learns["learns"]:
        return None, f"none: the reference's first seeds do not learn ({learns['note']})"
    target = targets.choose_default_target(summary["grid"], summary["mean"])
    return float(target), (f"default: {targets.DEFAULT_TARGET_FRACTION:.0%} of the way from the reference's initial "
                           f"to best mean score, on its first {len(run_dirs)} seeds, fixed before any run could stop")


def candidate_points(points: list[Point], max_seeds: int) -> list[Point]:
    """Every run the race may launch: each label's config at each of its first `max_seeds` seeds."""
    templates: dict[str, Point] = {}
    for point in points:
        templates.setdefault(point.label, point)
    seeds = seed_list(points, max_seeds)[:max_seeds]
    return [point_for_seed(t, seed) for t in templates.values() for seed in seeds]


def run_adaptive_locked(points: list[Point], sweep_dir: Path, settings: RaceSettings, target: float | None,
                        executor: str, workers: int, address: str | None, threads: int, progress, on_events,
                        target_rule: str | None = None) -> dict:
    """The race on `executor`, the sweep lock held by the caller (sweep.driver.run_sweep); `target_rule` says where a
    given target came from (default: the user's --target)."""
    templates: dict[str, Point] = {}
    for point in points:
        templates.setdefault(point.label, point)
    seeds = seed_list(points, settings.max_seeds)
    candidates = candidate_points(points, settings.max_seeds)
    by_name = {p.name: p for p in candidates}
    reference = reference_of(templates)
    plans = {label: t.plan for label, t in templates.items()}
    facts = [PointFacts(label, plan.samples_per_step, plan.prompts_per_step, plan.samples_per_prompt)
             for label, plan in plans.items()]
    race = Race(facts, reference, seeds, settings)
    rule = target_rule or USER_TARGET_RULE
    previous = read_sweep_document(sweep_dir)
    if previous is not None and previous.race is not None and previous.race.target is not None:
        if target is not None and not math.isclose(target, previous.race.target):
            raise UserError("--target", f"this sweep's runs stopped at the target {previous.race.target:.6g}, "
                            f"recorded in sweep.json; got {target}", "drop --target, or use another --out")
        target, rule = previous.race.target, previous.race.target_rule
    if target is not None:
        race.set_target(target, rule)

    state = prepare_sweep_dir(candidates, sweep_dir, threads, log=progress.note)
    for point in state.finished:
        race.record(seed_result(sweep_runs_dir(sweep_dir) / point.name, race.target))
    started, in_flight, failed = time.perf_counter(), {}, []  # the budget counts the warm start too
    if state.todo:
        prebuild_models(list(templates.values()), log=progress.note)
    full_grid = sum(plan.num_steps * plan.samples_per_step for plan in plans.values())
    full_grid *= len(dict.fromkeys(p.seed for p in points))  # the sweep file's grid: every seed to the budget
    launched = [p.name for p in state.finished]

    def save() -> None:
        write_sweep_points(sweep_dir, [{"name": n, "label": by_name[n].label, "seed": by_name[n].seed}
                                       for n in launched], RaceFacts(
            reference=reference, target=race.target, target_rule=race.target_rule or "not fixed yet",
            initial_seeds=settings.initial_seeds, max_seeds=settings.max_seeds,
            time_budget_s=settings.time_budget_s, stopped=dict(race.stopped)))

    def fix_target() -> None:
        runs = [sweep_runs_dir(sweep_dir) / run_dir_name(reference, s.seed) for s in race.results[reference]]
        value, why = default_target(runs)
        race.set_target(value, why)
        for run_dir in runs:  # their N* at the target just fixed
            race.record(seed_result(run_dir, value))
        found = ", ".join("not reached" if s.samples_to_target is None else f"{s.samples_to_target:,.0f}"
                          for s in race.results[reference])
        progress.note(f"target {value:.4g} ({why}); the reference's N*: {found}" if value is not None
                      else f"no target: {why}")

    def planned_left() -> int:
        return len(in_flight) + sum(max(0, settings.initial_seeds - len(race.results[label]))
                                    for label in templates if label not in race.stopped)

    pool = open_executor(executor, workers, threads, address, on_events)
    try:
        while True:
            if race.needs_target and not any(label == reference for label, _ in race.running):
                fix_target()
            while len(in_flight) < workers and (job := race.next_job(time.perf_counter() - started)) is not None:
                point = by_name[run_dir_name(job.label, job.seed)]
                pool.submit(RunJob(point, *state.staging_for(point, sweep_dir, log=progress.note)), stop=job.stop)
                in_flight[point.name] = job
                launched.append(point.name)
                if job.seed not in seeds[:settings.initial_seeds]:
                    progress.add_runs(1)
                    progress.note(f"{job.label}: one more seed ({job.seed}), the decision is still open")
            save()
            if not in_flight:
                break
            (point, staging, _), outcome = pool.next_outcome()
            job = in_flight.pop(point.name)
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, (UserError, BrokenProcessPool)):
                    raise outcome
                race.record_failure(job.label, job.seed, str(outcome))
                failed.append((point.name, outcome))
                progress.run_failed(point.name, failure_reason(outcome), runs_left=planned_left())
                continue
            adopt(staging, sweep_dir, point.name)
            before = set(race.stopped)
            result = seed_result(sweep_runs_dir(sweep_dir) / point.name, race.target)
            race.record(result)
            progress.run_finished(point.name, point.label, point.seed, int(result.samples), outcome.get("eval_end"),
                                  result.samples_to_target, result.wall_s, runs_left=planned_left(),
                                  target_known=race.target is not None)
            for label in sorted(set(race.stopped) - before):
                progress.point_stopped(label, race.stopped[label])
    finally:
        pool.close()
    for unused in state.resumable.values():  # claimed for seeds the race did not run again
        shutil.rmtree(unused.staging, ignore_errors=True)
    decision = race.decision()
    trained = sum(s.samples for seeds in race.results.values() for s in seeds)
    progress.note(f"race over: {race.ended}; {trained:,.0f} samples trained, {trained / full_grid:.0%} of the full grid "
                  f"({full_grid:,} samples)")
    return {"race": {"reference": reference, "target": race.target, "target_rule": race.target_rule,
                     "ended": race.ended, "answer": decision.answer if decision is not None else "none",
                     "stopped": dict(race.stopped), "samples_trained": trained, "full_grid_samples": full_grid,
                     "seeds": {label: len(s) for label, s in race.results.items()}},
            "runs": len(launched), "skipped": len(state.finished), "ran": len(launched) - len(state.finished),
            "failed": failed}
