"""`RaceScheduler`: batchscale's racing rule (sweep/race_rule.py) as a Ray Tune scheduler, and `sweep_trainable`, a
trainable that trains one point of a sweep file with batchscale's own training loop and reports to Tune at each eval.

    from ray import tune
    from batchscale.integrations.ray_tune import RaceScheduler, sweep_reference, sweep_trainable

    trainable, param_space = sweep_trainable("examples/sweep-tiny.toml", target=0.5)
    scheduler = RaceScheduler(target=0.5, protect=(sweep_reference("examples/sweep-tiny.toml"),))
    tune.Tuner(trainable, param_space=param_space, tune_config=tune.TuneConfig(scheduler=scheduler)).fit()
    scheduler.stops  # which trial stopped, at which N, and the rule's words for why

The rule is the one `batchscale sweep --adaptive` applies (sweep/race_rule.py, its statistics and its error rate
stated there): a seed stops at its first result at or above the target (its N* is read there), and a seed stops when
its point "cannot win": the lower bound on its time-to-target T = N*/q, from its N so far (a lower bound on N*) and
its throughput, lies above the upper bound on the leader's T (the point whose every finished seed reached the target
with the smallest estimated T), with the seed spread of ln N* pooled over points. Once a seed of a point is stopped as
a loser, the point's other trials stop at their first result, as the racing sweep gives such a point no more seeds.
Labels in `protect` (the reference a later `batchscale analyze` takes ratios to: `sweep_reference`) are never stopped
as losers.

Each trial reports, after each eval: `label` (the configuration, shared by its seeds), `seed`, `samples` (cumulative
responses), the score (`eval/accuracy` by default) and its throughput: `step_samples_per_s`, the samples/s of each
step since the previous report (the warm-up step left out; `sweep_trainable` reports them, and the rule takes one
draw of ln q per step as the racing sweep does), else `samples_per_s` (one draw per report), else `wall_s` (seconds
since the start: one draw ln(dN/dt) between reports, eval time included). A point with a single draw has no
throughput margin (race_rule's `_log_q_bound`), so a trainable should report per-step rates. Departures from the
racing sweep: (1) the leader is the one known at each result, not the one known when the seed started (Tune runs
seeds side by side, and the rule is checked with whatever has finished by then); (2) the target is given, never
fixed from the reference's first seeds; (3) nothing decides which seeds run: Tune runs the grid it is given, and no
extra seeds go to contenders (the decision itself stays `batchscale analyze`'s).

Why a `TrialScheduler` (FIFOScheduler's order, its `on_trial_result` returning CONTINUE or STOP) and not a `Stopper`:
the rule needs to hear that a seed ran to its budget without reaching the target (`on_trial_complete`), which a
Stopper is never told, and Tune calls a scheduler with each result unbuffered when it asks for that. The cost: it
cannot be combined with another scheduler (ASHA, PBT); a search algorithm (a `search_alg`) still can.

Checked against Ray 2.60 (`ray.tune.schedulers.FIFOScheduler`, `ray.tune.report`, `ray.tune.get_context`).
`sweep_trainable` trains into the trial's directory (`<trial dir>/run`, a batchscale run directory). Given the target,
a run ends itself there, finished, its summary.json recording the stop; a trial Tune stops (one that cannot win) is
killed mid-run, so its run directory has no summary.json and reads as unfinished, never as complete.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from ray import tune
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from batchscale.errors import UserError
from batchscale.rundir import StoppedRun, primary_eval_score
from batchscale.sweep.race_rule import RACE_CONFIDENCE, SeedResult, StopRule, find_leader, pooled_spread

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SeedFacts:
    """What a finished trial (one seed of one point) tells the race."""

    label: str
    seed: int
    samples_to_target: float | None  # N*; None when the target was not reached within `samples`
    samples: float
    log_q: tuple[float, ...]  # its throughput draws, ln samples/s
    wall_s: float = 0.0


def race_decision(target: float, confidence: float, finished: dict[str, list[SeedFacts]], label: str,
                  samples: float, score: float, log_q: list[float], may_lose: bool) -> tuple[str, str] | None:
    """THE adapter to sweep/race_rule.py: what the rule says of a running seed of `label` at `samples` with `score`
    and its throughput draws `log_q`, given every finished seed: ("target" | "cannot_win", message) or None.
    `may_lose=False` (a protected label) never gets "cannot_win"."""
    results = {lab: [SeedResult(s.label, s.seed, s.samples_to_target, s.samples, s.log_q, s.wall_s) for s in seeds]
               for lab, seeds in finished.items()}
    spread = pooled_spread(results)
    leader = find_leader(results, spread, confidence)
    if leader is not None and (leader.label == label or not may_lose):
        leader = None
    own = results.get(label, [])
    prior = tuple(t for s in own if (t := s.seed_time) is not None)
    rule = StopRule(target, 1, prior, spread, leader, confidence)  # no budget: Tune's own stop criteria own that
    stopped = rule.decide(samples, score, log_q)
    return (stopped.reason, stopped.message) if stopped is not None else None


@dataclass(frozen=True)
class RaceStop:
    """One trial the race ended (stopped by the scheduler, or left to end itself at the target), and why: the rule's
    reason and words."""

    trial_id: str
    label: str
    seed: int
    reason: str  # "target" | "cannot_win"
    samples: float
    message: str


@dataclass
class _Running:
    label: str
    seed: int
    samples: float = 0.0
    wall_s: float | None = None
    log_q: list[float] = field(default_factory=list)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value) -> bool:
    return _finite(value) and value > 0


def _number(result: dict, key: str, trial_id: str) -> float:
    value = result.get(key)
    if not _finite(value):
        raise UserError(f"trial {trial_id}: result[{key!r}]", f"must be a finite number, got {value!r:.60}",
                        f"report {key!r} after each eval (sweep_trainable does), or pass RaceScheduler's key names")
    return float(value)


class RaceScheduler(FIFOScheduler):
    """Stop trials at the target and trials whose point cannot win (module docstring); FIFO order otherwise."""

    _supports_buffered_results = False  # the rule is checked at every eval, as the racing sweep checks it

    def __init__(self, target: float, confidence: float = RACE_CONFIDENCE, protect: tuple[str, ...] = (),
                 score_key: str = "eval/accuracy", samples_key: str = "samples", label_key: str = "label",
                 seed_key: str = "seed", step_throughput_key: str = "step_samples_per_s",
                 throughput_key: str = "samples_per_s", wall_key: str = "wall_s",
                 stops_at_key: str = "stops_at_target"):
        super().__init__()
        if not _finite(target):
            raise UserError("RaceScheduler(target=...)", f"must be a finite score, got {target!r:.60}",
                            "pass the score a point must reach, e.g. target=0.5")
        if not 0.5 < confidence < 1:
            raise UserError("RaceScheduler(confidence=...)", f"must be in (0.5, 1), got {confidence!r}",
                            f"pass {RACE_CONFIDENCE} (the racing sweep's)")
        self.target, self.confidence, self.protect = float(target), confidence, tuple(protect)
        self.keys = dict(score=score_key, samples=samples_key, label=label_key, seed=seed_key,
                         step_throughput=step_throughput_key, throughput=throughput_key, wall=wall_key,
                         stops_at=stops_at_key)
        self.finished: dict[str, list[SeedFacts]] = {}
        self.running: dict[str, _Running] = {}
        self.out: dict[str, str] = {}  # label -> why the point cannot win
        self.stops: list[RaceStop] = []
        self.recorded: set[str] = set()  # trials whose seed the race has recorded

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        tid, keys = trial.trial_id, self.keys
        if tid in self.recorded:  # it said it would stop itself at the target, and did not
            return TrialScheduler.STOP
        run = self.running.get(tid)
        if run is None:
            label = result.get(keys["label"])
            if not isinstance(label, str) or not label:
                raise UserError(f"trial {tid}: result[{keys['label']!r}]", f"must name the trial's configuration (a "
                                f"string shared by its seeds), got {label!r:.60}",
                                "report it after each eval (sweep_trainable does), or pass RaceScheduler(label_key=...)")
            run = self.running[tid] = _Running(label, int(_number(result, keys["seed"], tid)))
        self._observe(run, result, tid)
        if run.label in self.out and run.label not in self.protect:
            return self._stop(tid, run, None, "cannot_win", f"its point {self.out[run.label]}")
        score = result.get(keys["score"])
        if not _finite(score):
            return TrialScheduler.CONTINUE  # a result without an eval score: nothing to decide on
        decided = race_decision(self.target, self.confidence, self.finished, run.label, run.samples, float(score),
                                run.log_q, may_lose=run.label not in self.protect)
        if decided is None:
            return TrialScheduler.CONTINUE
        reason, message = decided
        if reason == "cannot_win":
            self.out.setdefault(run.label, message)
        stops_itself = reason == "target" and _finite(own := result.get(keys["stops_at"])) and own <= score
        decision = self._stop(tid, run, run.samples if reason == "target" else None, reason, message)
        return TrialScheduler.CONTINUE if stops_itself else decision

    def _observe(self, run: _Running, result: dict, tid: str) -> None:
        """The result's samples and its throughput draws: the per-step rates listed under `step_samples_per_s` (as the
        racing sweep takes them), else its `samples_per_s` (one draw), else dN/dt since the previous result."""
        samples = _number(result, self.keys["samples"], tid)
        steps, rate, wall = (result.get(self.keys[k]) for k in ("step_throughput", "throughput", "wall"))
        if isinstance(steps, (list, tuple)):
            run.log_q += [math.log(v) for v in steps if _positive(v)]
        elif _positive(rate):
            run.log_q.append(math.log(rate))
        elif _finite(wall) and run.wall_s is not None and wall > run.wall_s and samples > run.samples:
            run.log_q.append(math.log((samples - run.samples) / (wall - run.wall_s)))
        if _finite(wall):
            run.wall_s = float(wall)
        run.samples = samples

    def _stop(self, tid: str, run: _Running, samples_to_target: float | None, reason: str, message: str) -> str:
        """Record the seed and why it ends; STOP. (A trial whose result says it stops itself at a target it has
        reached, `stops_at_target`, is left to end its run cleanly: the caller then returns CONTINUE.)"""
        self._finish(tid, samples_to_target)
        self.recorded.add(tid)
        self.stops.append(RaceStop(tid, run.label, run.seed, reason, run.samples, message))
        logger.info("batchscale race: %s seed %s stopped at N = %s: %s", run.label, run.seed, f"{run.samples:,.0f}",
                    message)
        return TrialScheduler.STOP

    def _finish(self, tid: str, samples_to_target: float | None) -> None:
        run = self.running.pop(tid, None)
        if run is None:
            return
        seeds = self.finished.setdefault(run.label, [])
        seeds[:] = [s for s in seeds if s.seed != run.seed] + [
            SeedFacts(run.label, run.seed, samples_to_target, run.samples, tuple(run.log_q), run.wall_s or 0.0)]

    def on_trial_complete(self, tune_controller, trial, result: dict | None) -> None:
        """A trial that ran to its budget (or one the rule already stopped: recorded then)."""
        self._finish(trial.trial_id, None)

    def on_trial_error(self, tune_controller, trial) -> None:
        self.running.pop(trial.trial_id, None)  # a failed seed tells the race nothing

    def on_trial_remove(self, tune_controller, trial) -> None:
        self.running.pop(trial.trial_id, None)

    def debug_string(self) -> str:
        losers = ", ".join(sorted(self.out)) or "none yet"
        return f"batchscale racing rule (target {self.target:g}): points that cannot win: {losers}"


def sweep_reference(sweep_file: str | Path, overrides: list[str] = ()) -> str:
    """The label `batchscale analyze` takes as the reference for this sweep file (sweep.adaptive.reference_of): pass
    it to RaceScheduler(protect=...) so that, as in `sweep --adaptive`, it is never stopped short of the target."""
    from batchscale.sweep.adaptive import reference_of
    from batchscale.sweep.spec import load_sweep_spec

    templates: dict = {}
    for point in load_sweep_spec(Path(sweep_file), list(overrides)):
        templates.setdefault(point.label, point)
    return reference_of(templates)


def sweep_trainable(sweep_file: str | Path, overrides: list[str] = (), threads: int = 1,
                    target: float | None = None):
    """(trainable, param_space) for `tune.Tuner`: one trial per point of the sweep file (each seed its own trial, the
    file's order), each trained by batchscale's training loop into `<trial dir>/run` with `threads` torch threads
    and reported to Tune after each eval (EvalReporter). With `target` (the scheduler's), a run ends itself at its
    first eval at or above it, its summary.json saying so as a racing sweep's run does, and its results say so
    (`stops_at_target`), so the scheduler lets it finish instead of killing it. Every point is validated here,
    before any trial starts."""
    from batchscale.sweep.spec import load_sweep_spec

    configs = {p.name: p.config_data for p in load_sweep_spec(Path(sweep_file), list(overrides))}
    if target is not None and not _finite(target):
        raise UserError("sweep_trainable(target=...)", f"must be a finite score, got {target!r:.60}",
                        "pass the RaceScheduler's target, or none")

    def train_point(config: dict) -> None:
        from batchscale.config import derive_plan, validate_config
        from batchscale.sweep.resume import with_threads
        from batchscale.train.loop import train

        cfg = validate_config(with_threads(configs[config["point"]], threads))
        reporter = EvalReporter(derive_plan(cfg).label, cfg.run.seed, tune.report, target)
        train(cfg, Path(tune.get_context().get_trial_dir()) / "run", on_record=reporter, log=lambda line: None,
              stop=TargetStop(target) if target is not None else None)

    return tune.with_resources(train_point, {"cpu": threads}), {"point": tune.grid_search(list(configs))}


@dataclass(frozen=True)
class TargetStop:
    """The training loop's `stop` check of a trial with a target: end the run at its first eval at or above it."""

    target: float

    def __call__(self, records: list[dict]) -> StoppedRun | None:
        score, samples = primary_eval_score(records[-1]), records[-1]["samples"]
        if score is None or score < self.target:
            return None
        return StoppedRun(reason="target", samples=int(samples),
                          message=f"reached the target {self.target:.4g} at N = {samples:,.0f}")


class EvalReporter:
    """The training loop's `on_record` for a Tune trial: after each eval record, one result to `report` (the eval
    record's keys, the run's `label` and `seed`, `step_samples_per_s`: the samples/s of each step since the previous
    eval, the first (warm-up) step left out as the racing sweep leaves it out, their overall `samples_per_s`, and
    `stops_at_target` when the run ends itself at a target)."""

    def __init__(self, label: str, seed: int, report, stops_at_target: float | None = None):
        self.label, self.seed, self.report, self.stops_at_target = label, seed, report, stops_at_target
        self.samples_seen = 0  # cumulative samples at the previous step record
        self.rates: list[float] = []  # samples/s of each step since the previous eval

    def __call__(self, record: dict) -> None:
        if record["kind"] == "step":
            step_samples, self.samples_seen = record["samples"] - self.samples_seen, record["samples"]
            if record["step"] > 1 and record.get("time/step"):
                self.rates.append(step_samples / record["time/step"])
            return
        if record["kind"] != "eval":
            return
        result = {key: value for key, value in record.items() if key != "kind"}
        result.update(label=self.label, seed=self.seed, step_samples_per_s=self.rates)
        if self.stops_at_target is not None:
            result["stops_at_target"] = self.stops_at_target
        if self.rates:  # for people: the steps' mean rate over the interval
            result["samples_per_s"] = len(self.rates) / sum(1 / r for r in self.rates)
        self.rates = []
        self.report(result)
