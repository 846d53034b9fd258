"""A racing sweep's schedule (`sweep --adaptive`): which seed of which point runs next, with what budget, which
points are out, and when the sweep has its answer. Pure logic, driven by finished seeds (sweep/adaptive.py runs it on
an executor; tests/test_race.py on simulated sweeps with a known truth).

1. The target is fixed first. Given (`--target`), it is used from the start. Otherwise the reference's first seeds
   run to their full budget and the default rule (analysis.targets: 80% of the way from the reference's initial to
   its best mean score) is applied to them, once; sweep.json records it, so `analyze` uses the very score the runs
   stopped at.
2. The reference runs first, and every other point waits until one of its seeds has reached the target: from the
   reference's N* and q, each seed's budget is sized (sweep.race_rule.Budget: at least twice what it needs to beat
   the reference at its own throughput), so a budget can only censor a point that could not have won. If the
   reference's first seeds all miss the target, no decision can be formed and the race ends.
3. Every point starts with `initial_seeds` seeds, breadth first: the first seed of every point (the reference first,
   then by batch size, the sweep file's order among equals), then the second of each once its first has finished, so
   every point runs early under a time budget and a second seed's stop rule knows the first (a point is stopped only
   on two seeds: with one its own spread is unknown). A seed stops at its
   first eval at or above the target (its N* is read there), when its point cannot win (sweep.race_rule), or at its
   budget, checked in the worker at every eval against the leader known when it started; after every finished seed
   the cannot-win rule is applied to every point, and a point that cannot win gets no more seeds. The reference is
   never stopped short of the target: every ratio of the decision is taken to it.
4. When the first seeds are done, the decision rule is applied (plan.decide: the best tested against every other
   configuration on ln T over seeds, censored points by their bounds; or a near-optimal set). While it has no
   answer, one more seed goes to each contender (the best and every configuration it does not beat, the budget-cut
   ones included) that has fewer than `max_seeds`, side by side when there are workers for them, and the decision is
   taken again once that round is in; the sweep ends when the decision has an answer, no contender can take a seed,
   or the time budget would be overrun by the next seed (its expected wall time, from the point's finished seeds).
   Points none of whose seeds ran by then are `not_run`: no answer excludes them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from batchscale.errors import UserError
from batchscale.plan.decide import compute_plan
from batchscale.plan.resolve import MIN_SEEDS
from batchscale.plan.rows import ConfigMeasurement, Decision
from batchscale.sweep.race_rule import (RACE_CONFIDENCE, Budget, Leader, SeedResult, StopRule, cannot_win_message,
                                        find_leader, log_time_low, pooled_spread, seed_times)

ANSWERED = ("winner", "near_optimal")


@dataclass(frozen=True)
class RaceSettings:
    initial_seeds: int = 2
    max_seeds: int = 3
    time_budget_s: float | None = None
    confidence: float = RACE_CONFIDENCE

    def __post_init__(self):
        if self.initial_seeds < 1:
            raise UserError("--initial-seeds", f"must be >= 1, got {self.initial_seeds}", "pass 2 (the default)")
        if self.max_seeds < self.initial_seeds:
            raise UserError("--max-seeds", f"must be >= the initial seeds ({self.initial_seeds}), got "
                            f"{self.max_seeds}", f"pass --max-seeds {self.initial_seeds} or more")
        if self.time_budget_s is not None and not (self.time_budget_s > 0 and math.isfinite(self.time_budget_s)):
            raise UserError("--time-budget", f"must be a positive number of seconds, got {self.time_budget_s}",
                            "pass e.g. --time-budget 600")


@dataclass(frozen=True)
class Job:
    label: str
    seed: int
    stop: StopRule | None  # None: run to the budget (the reference's first seeds, before the target is fixed)
    budget_samples: float | None = None  # the run's budget (a cap sized from the reference); None: the sweep file's


@dataclass(frozen=True)
class PointFacts:
    """What the race knows of a point before it runs: its batch, for the decision's tie-breaks, and its budget."""

    label: str
    samples_per_step: int
    prompts_per_step: int | None = None
    samples_per_prompt: int | None = None
    budget_samples: float | None = None  # the sweep file's run.budget_samples: the floor of every seed's budget


@dataclass
class Race:
    points: list[PointFacts]  # the sweep file's order
    reference: str
    seeds: list[int]  # the seeds a point may get, in order (len >= max_seeds)
    settings: RaceSettings = field(default_factory=RaceSettings)
    target: float | None = None
    target_rule: str | None = None
    results: dict[str, list[SeedResult]] = field(default_factory=dict)
    running: set[tuple[str, int]] = field(default_factory=set)
    stopped: dict[str, str] = field(default_factory=dict)  # label -> why it cannot win
    failed: dict[str, str] = field(default_factory=dict)  # label -> why a seed of it failed: it gets no more seeds
    ended: str | None = None  # why no more seeds will be launched, once that is known
    no_target: bool = False  # the target could not be fixed: run the first seeds plainly, decide nothing
    extra: list[str] = field(default_factory=list)  # contenders still to get this round's extra seed

    def __post_init__(self):
        self.by_label = {p.label: p for p in self.points}
        if self.reference not in self.by_label:
            raise UserError("reference", f"{self.reference!r} is not one of the sweep's labels", "pick one of them")
        if len(self.seeds) < self.settings.max_seeds:
            raise UserError("--max-seeds", f"{self.settings.max_seeds} seeds asked, {len(self.seeds)} available",
                            "give more seeds")
        for label in self.by_label:
            self.results.setdefault(label, [])

    # --- events ---------------------------------------------------------------------------------------------------

    def started(self, job: Job) -> None:
        self.running.add((job.label, job.seed))

    def record(self, result: SeedResult) -> None:
        """A finished seed (or one read back from a previous sweep's runs/); a seed recorded again replaces its
        earlier record (the reference's first seeds, re-read once the target is fixed)."""
        self.running.discard((result.label, result.seed))
        seeds = self.results[result.label]
        seeds[:] = [s for s in seeds if s.seed != result.seed] + [result]
        if result.stopped == "cannot_win":
            self.stopped.setdefault(result.label, result.stop_message or f"cannot win (at N = {result.samples:,.0f})")
        self._stop_losers()

    def record_failure(self, label: str, seed: int, reason: str) -> None:
        self.running.discard((label, seed))
        self.failed.setdefault(label, reason)

    def set_target(self, target: float | None, rule: str) -> None:
        self.target, self.target_rule, self.no_target = target, rule, target is None

    @property
    def needs_target(self) -> bool:
        """The reference's first seeds are done and the target is still to be fixed."""
        return (self.target is None and not self.no_target
                and len(self.results[self.reference]) >= self.settings.initial_seeds)

    # --- schedule -------------------------------------------------------------------------------------------------

    def next_job(self, elapsed_s: float = 0.0) -> Job | None:
        """The next seed to launch now, or None (wait for a running seed, or the race is over: `ended` says why)."""
        if self.ended is not None or self.needs_target:
            return None
        if self.target is None and not self.no_target:  # the reference's first seeds fix the target
            job = self._first_seed_of(self.reference, stop=False)
            return self._launch(job, elapsed_s) if job is not None else None
        if not self.no_target and not any(s.reached for s in self.results[self.reference]):  # wait for its N*
            if (job := self._first_seed_of(self.reference, stop=True)) is not None:
                return self._launch(job, elapsed_s)
            if not any(label == self.reference for label, _ in self.running):
                self.ended = "the reference's first seeds did not reach the target: no decision can be formed"
            return None
        for round_ in range(1, self.settings.initial_seeds + 1):  # breadth first: every point's first seed, then ...
            for point in self._order():
                if len(self.results[point.label]) >= round_ - 1 and \
                        (job := self._first_seed_of(point.label, stop=True, up_to=round_)) is not None:
                    return self._launch(job, elapsed_s)  # ... each next seed once the one before has finished
        if any(self._first_seed_of(p.label, stop=False) is not None for p in self.points):
            return None  # a point's next first seed waits for its previous one (its stop rule then has a prior)
        if self.extra:  # this round's seeds for the contenders, one each
            return self._launch(self._job(self.extra.pop(0)), elapsed_s)
        if self.running:
            return None  # decide on extra seeds once every seed of the round is in
        if self.no_target:
            self.ended = "no target: the reference does not learn, so nothing was raced"
            return None
        decision = self.decision()
        if decision is not None and decision.answer in ANSWERED:
            self.ended = f"answered: {decision.answer.replace('_', '-')}"
            return None
        self.extra = [label for label in self.contenders(decision) if len(self.results[label]) < self.settings.max_seeds
                      and label not in self.failed and label not in self.stopped and self.results[label]]
        if self.extra:
            return self.next_job(elapsed_s)
        self.ended = "unresolved at --max-seeds" if decision is not None else "no decision can be formed"
        return None

    def _order(self) -> list[PointFacts]:
        """The reference first, then by batch: the large batches, where curves stop aligning, race against bounds
        the smaller ones have formed."""
        return sorted(self.points, key=lambda p: (p.label != self.reference, p.samples_per_step))

    def _first_seed_of(self, label: str, stop: bool, up_to: int | None = None) -> Job | None:
        """The point's next seed among its first `up_to` (default: all `initial_seeds`), or None."""
        if label in self.stopped or label in self.failed:
            return None
        taken = len(self.results[label]) + sum(1 for lab, _ in self.running if lab == label)
        if taken >= min(up_to or self.settings.initial_seeds, self.settings.initial_seeds):
            return None
        return self._job(label, stop)

    def _job(self, label: str, stop: bool = True) -> Job:
        budget = self.budget()
        cap = None if budget is None or label == self.reference else \
            budget.cap(self.by_label[label].samples_per_step / self.by_label[self.reference].samples_per_step)
        return Job(label, self._next_seed(label), self._stop_rule(label) if stop else None, cap)

    def budget(self) -> Budget | None:
        """The budget rule, once a seed of the reference has reached the target (sweep.race_rule.Budget)."""
        floor = self.by_label[self.reference].budget_samples
        reached = [t for s in self.results[self.reference] if s.reached and (t := s.seed_time) is not None]
        if self.target is None or floor is None or not reached:
            return None
        return Budget(floor, statistics.fmean(t.log_samples for t in reached),
                      statistics.fmean(t.log_throughput for t in reached))

    def budgets(self) -> dict[str, float]:
        """label -> the samples a seed of it could train at the point's measured throughput (its budget)."""
        budget, out = self.budget(), {}
        for label, seeds in self.results.items():
            times = [t for s in seeds if (t := s.seed_time) is not None]
            floor = self.by_label[label].budget_samples
            if budget is None or not times:
                if floor is not None and seeds:
                    out[label] = float(floor)
                continue
            out[label] = float(budget.floor_samples) if label == self.reference else \
                budget.samples_for(statistics.fmean(t.log_throughput for t in times))
        return out

    def not_run(self) -> list[str]:
        """Points none of whose seeds finished (the time budget ended, or the race, before they ran)."""
        return [p.label for p in self.points if not self.results[p.label] and p.label not in self.failed]

    def _next_seed(self, label: str) -> int:
        used = {s.seed for s in self.results[label]} | {seed for lab, seed in self.running if lab == label}
        return next(seed for seed in self.seeds if seed not in used)

    def _launch(self, job: Job, elapsed_s: float) -> Job | None:
        budget = self.settings.time_budget_s
        if budget is not None and elapsed_s + self.expected_wall_s(job.label) > budget:
            self.ended = f"time budget spent ({elapsed_s:.0f} of {budget:.0f} s used; the next seed would overrun it)"
            return None
        self.started(job)
        return job

    def expected_wall_s(self, label: str) -> float:
        """The mean wall time of the point's finished seeds, else of every finished seed, else 0."""
        own = [s.wall_s for s in self.results[label]]
        every = [s.wall_s for seeds in self.results.values() for s in seeds]
        return statistics.fmean(own or every) if (own or every) else 0.0

    def _stop_rule(self, label: str) -> StopRule | None:
        if self.target is None:
            return None
        pool = pooled_spread(self.results)
        leader = find_leader(self.results, pool, self.settings.confidence)
        prior = tuple(t for s in self.results[label] if (t := s.seed_time) is not None)
        not_stopped = label == self.reference or leader is None or label == leader.label
        return StopRule(self.target, self.by_label[label].samples_per_step, prior, pool,
                        None if not_stopped else leader, self.settings.confidence,
                        None if label == self.reference else self.budget())

    def _stop_losers(self) -> None:
        """Apply the racing rule to every point with finished seeds (after each finished seed)."""
        if self.target is None:
            return
        pool = pooled_spread(self.results)
        leader = find_leader(self.results, pool, self.settings.confidence)
        if leader is None:
            return
        for label, seeds in self.results.items():
            if label in (leader.label, self.reference) or label in self.stopped or not seeds:
                continue
            times = seed_times(seeds)
            if times is None or len(times) < MIN_SEEDS:
                continue
            low = log_time_low(times, pool, self.settings.confidence)
            if low is not None and low > leader.log_time_high:
                self.stopped[label] = cannot_win_message(low, max(s.samples for s in seeds), leader)

    # --- the decision ---------------------------------------------------------------------------------------------

    def measurements(self) -> list[ConfigMeasurement]:
        budgets = self.budgets()
        return [measure_point(self.by_label[label], seeds, self.stopped.get(label), budgets.get(label))
                for label, seeds in self.results.items() if seeds]

    def decision(self) -> Decision | None:
        """The decision rule on the seeds so far (None when it cannot be formed, e.g. the reference is censored)."""
        if self.target is None or not self.results[self.reference]:
            return None
        try:
            return compute_plan(self.measurements(), self.reference, not_run=tuple(self.not_run()))
        except UserError:
            return None

    def contenders(self, decision: Decision | None) -> list[str]:
        """Who needs another seed for the decision to have an answer (the best and every configuration it does not
        beat, plan/resolve.py), fewest seeds first."""
        if decision is None or decision.best is None:
            return []
        wanted = [label for label in decision.contenders if label in self.results]
        return sorted(wanted, key=lambda label: (len(self.results[label]), label != decision.best, label))

    def leader(self) -> Leader | None:
        return find_leader(self.results, pooled_spread(self.results), self.settings.confidence)


def measure_point(point: PointFacts, seeds: list[SeedResult], stopped: str | None = None,
                  budget: float | None = None) -> ConfigMeasurement:
    """The decision's view of a point from its seeds, as plan/sweep_inputs.py forms it from a sweep directory: N* and
    q the geometric means over seeds (reached seeds for N*), each seed's own ln N* (or its bound) and ln q."""
    times = seed_times(seeds) or []  # empty when a seed has N* = 0 (no logarithm) or no timed step
    reached = [s.samples_to_target for s in seeds if s.reached]
    log_q = [statistics.median(s.log_q) for s in seeds if s.log_q]
    return ConfigMeasurement(
        label=point.label,
        samples_to_target=(math.exp(statistics.fmean(t.log_samples for t in times if t.reached)) if times else
                           statistics.fmean(reached)) if reached else None,
        throughput_samples_per_s=math.exp(statistics.fmean(log_q)) if log_q else 1.0,
        seeds_reached=sum(s.reached for s in seeds),
        seeds_censored=sum(not s.reached for s in seeds),
        prompts_per_step=point.prompts_per_step,
        samples_per_prompt=point.samples_per_prompt,
        samples_per_step=point.samples_per_step,
        seed_times=tuple(times),
        budget_samples=budget,
        extra={"stopped": stopped} if stopped else {},
    )
