"""A racing sweep's schedule (`sweep --adaptive`): which seed of which point runs next, which points are out, and
when the sweep has its answer. Pure logic, driven by finished seeds (sweep/adaptive.py runs it on an executor;
tests/test_race.py on simulated sweeps with a known truth).

1. The target is fixed first. Given (`--target`), it is used from the start. Otherwise the reference's first seeds
   run to their full budget and the default rule (analysis.targets: 80% of the way from the reference's initial to
   its best mean score) is applied to them, once; sweep.json records it, so `analyze` uses the very score the runs
   stopped at.
2. Every point starts with `initial_seeds` seeds, point after point (the reference first, then by batch size, the
   sweep file's order among equals), so the pooled seed spread and the leader's bound form early. A seed stops at its first eval at or above
   the target (its N* is read there) or when its point cannot win (sweep.race_rule), checked in the worker at
   every eval against the leader known when it started; after every finished seed the same rule is applied to
   every point, and a point that cannot win gets no more seeds. The reference is never stopped short of the target:
   every ratio of the decision is taken to it.
3. When the first seeds are done, the decision rule is applied (plan.decide: T = N*/q, the winner tested against
   the runner-up and the reference at the 95% level; or a near-optimal set). While it has no answer, one more seed
   goes to each contender (the winner, every eligible point the winner does not beat, the reference when the
   winner does not beat it) that has fewer than `max_seeds`, side by side when there are workers for them, and the
   decision is taken again once that round is in; the sweep ends when the decision has an answer, no
   contender can take a seed, or the time budget would be overrun by the next seed (its expected wall time, from
   the point's finished seeds).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from batchscale.errors import UserError
from batchscale.plan.decide import compute_plan
from batchscale.plan.resolve import compare_log_time
from batchscale.plan.rows import ConfigMeasurement, Decision
from batchscale.sweep.race_rule import (RACE_CONFIDENCE, Leader, SeedResult, StopRule, cannot_win_message,
                                        find_leader, log_time_low, pooled_spread)

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


@dataclass(frozen=True)
class PointFacts:
    """What the race knows of a point before it runs: its batch, for the decision's tie-breaks."""

    label: str
    samples_per_step: int
    prompts_per_step: int | None = None
    samples_per_prompt: int | None = None


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
        for point in self._order():
            if (job := self._first_seed_of(point.label, stop=True)) is not None:
                return self._launch(job, elapsed_s)
        if self.extra:  # this round's seeds for the contenders, one each
            label = self.extra.pop(0)
            return self._launch(Job(label, self._next_seed(label), self._stop_rule(label)), elapsed_s)
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
                      and label not in self.failed and label not in self.stopped]
        if self.extra:
            return self.next_job(elapsed_s)
        self.ended = "unresolved at --max-seeds" if decision is not None else "no decision can be formed"
        return None

    def _order(self) -> list[PointFacts]:
        """The reference first, then by batch: the large batches, where curves stop aligning, race against bounds
        the smaller ones have formed."""
        return sorted(self.points, key=lambda p: (p.label != self.reference, p.samples_per_step))

    def _first_seed_of(self, label: str, stop: bool) -> Job | None:
        if label in self.stopped or label in self.failed:
            return None
        taken = len(self.results[label]) + sum(1 for lab, _ in self.running if lab == label)
        if taken >= self.settings.initial_seeds:
            return None
        return Job(label, self._next_seed(label), self._stop_rule(label) if stop else None)

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
        seeds = self.results[label]
        spread = pooled_spread(self.results)
        leader = find_leader(self.results, spread, self.settings.confidence)
        return StopRule(self.target, self.by_label[label].samples_per_step,
                        tuple(s.log_n for s in seeds if s.log_n is not None), tuple(v for s in seeds for v in s.log_q),
                        spread, leader if leader is not None and label not in (leader.label, self.reference) else None,
                        self.settings.confidence)

    def _stop_losers(self) -> None:
        """Apply the racing rule to every point with finished seeds (after each finished seed)."""
        if self.target is None:
            return
        spread = pooled_spread(self.results)
        leader = find_leader(self.results, spread, self.settings.confidence)
        if leader is None:
            return
        for label, seeds in self.results.items():
            if label in (leader.label, self.reference) or label in self.stopped or not seeds:
                continue
            logs = [s.log_n for s in seeds]
            if None in logs:
                continue
            low = log_time_low(logs, [v for s in seeds for v in s.log_q], spread, self.settings.confidence)
            if low is not None and low > leader.log_time_high:
                self.stopped[label] = cannot_win_message(low, max(s.samples for s in seeds), leader)

    # --- the decision ---------------------------------------------------------------------------------------------

    def measurements(self) -> list[ConfigMeasurement]:
        return [measure_point(self.by_label[label], seeds) for label, seeds in self.results.items() if seeds]

    def decision(self) -> Decision | None:
        """The decision rule on the seeds so far (None when it cannot be formed, e.g. the reference is censored)."""
        if self.target is None or not self.results[self.reference]:
            return None
        try:
            return compute_plan(self.measurements(), self.reference)
        except UserError:
            return None

    def contenders(self, decision: Decision | None) -> list[str]:
        """Who needs another seed for the decision to have an answer, fewest seeds first."""
        if decision is None or decision.best is None:
            return []
        best = decision.row(decision.best)
        wanted = {best.label}
        for row in decision.rows:
            if not row.eligible or row.label == best.label or row.label in self.stopped:
                continue
            compared = compare_log_time(best.measurement, row.measurement)
            if isinstance(compared, str) or compared[2] >= 0:
                wanted.add(row.label)
        if best.label != self.reference:
            compared = compare_log_time(best.measurement, decision.row(self.reference).measurement)
            if isinstance(compared, str) or compared[2] >= 0:
                wanted.add(self.reference)
        return sorted(wanted, key=lambda label: (len(self.results[label]), label != best.label, label))

    def leader(self) -> Leader | None:
        return find_leader(self.results, pooled_spread(self.results), self.settings.confidence)


def measure_point(point: PointFacts, seeds: list[SeedResult]) -> ConfigMeasurement:
    """The decision's view of a point from its seeds, as plan/sweep_inputs.py forms it from a sweep directory."""
    reached = [s.samples_to_target for s in seeds if s.reached]
    logs = [math.log(n) for n in reached if n > 0]
    log_q = [v for s in seeds for v in s.log_q]
    q_seeds = [math.exp(statistics.median(s.log_q)) for s in seeds if s.log_q]  # samples_per_step / median step
    return ConfigMeasurement(
        label=point.label,
        samples_to_target=statistics.fmean(reached) if reached else None,
        throughput_samples_per_s=statistics.fmean(q_seeds) if q_seeds else 1.0,
        seeds_reached=len(reached),
        seeds_censored=len(seeds) - len(reached),
        prompts_per_step=point.prompts_per_step,
        samples_per_prompt=point.samples_per_prompt,
        samples_per_step=point.samples_per_step,
        log_samples_to_target_mean=statistics.fmean(logs) if len(logs) == len(reached) and logs else None,
        log_samples_to_target_sd=statistics.stdev(logs) if len(logs) >= 2 and len(logs) == len(reached) else None,
        log_throughput_sd=statistics.stdev(log_q) if len(log_q) > 1 else None,
        throughput_steps=len(log_q),
    )
