"""The decision's row types: what the plan knows of each configuration, its numbers relative to the reference, and the
decision table with its winner (decide.py computes them, resolve.py tests the winner, explain.py and make.py show them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from batchscale.plan.log_time import Pool, SeedTime


@dataclass(frozen=True)
class ConfigMeasurement:
    """What the plan needs about one configuration: its learning cost and its speed on this machine."""

    label: str
    samples_to_target: float | None  # N*, samples; None when censored (no seed reached the target)
    throughput_samples_per_s: float  # q, end-to-end samples/s
    feasible: bool = True
    seeds_reached: int | None = None  # None when unknown (e.g. a CSV table)
    seeds_censored: int = 0
    prompts_per_step: int | None = None  # P
    samples_per_prompt: int | None = None  # G
    samples_per_step: int | None = None  # B_train = P*G
    # every seed's ln N* (or ln N trained, when censored) and ln q (plan/log_time.py); empty: unknown (a table, an
    # analysis.json older than issue 38, or a seed with N* = 0, which has no logarithm)
    seed_times: tuple[SeedTime, ...] = ()
    budget_samples: float | None = None  # the most samples a seed of it could train (a racing sweep's, or trained)
    generation_batch: int | None = None  # responses in flight (run.json), for the memory check
    max_concurrency: int | None = None  # sequences decoding at once (run.json, a table column or --max-concurrency)
    tokens_per_step: float | None = None  # median tokens/generated per step (a sweep's logs), for a server's profile
    extra: dict = field(default_factory=dict)  # source-specific numbers passed through to JSON (e.g. phase times)

    @property
    def censoring(self) -> str:
        """'reached' (every seed reached the target), 'partly censored' or 'censored' (none did)."""
        if self.samples_to_target is None or self.seeds_reached == 0:
            return "censored"
        return "partly censored" if self.seeds_censored > 0 else "reached"


@dataclass(frozen=True)
class PlanRow:
    """One configuration's decision numbers, all relative to the reference. Ratios are None when N* is unknown."""

    measurement: ConfigMeasurement
    r_n: float | None
    throughput_gain: float
    time_to_target_s: float | None  # T = N*/q
    normalized_time_to_target: float | None  # T/T_ref = r_n / throughput_gain
    score: float | None  # q/r_n relative to the reference: throughput_gain / r_n = T_ref/T
    eligible: bool  # feasible and every seed reached the target

    @property
    def label(self) -> str:
        return self.measurement.label


ANSWERS = ("winner", "near_optimal", "unresolved", "none")

# A near-optimal set's members are called equivalent only when T_member / T_best lies within this ratio interval
# (at the set's joint confidence); otherwise they are "not separated": more seeds could change which is fastest.
EQUIVALENCE_MARGIN = (0.9, 1 / 0.9)


@dataclass(frozen=True)
class RatioInterval:
    """T_label / T_best with its interval."""

    label: str
    ratio: float
    low: float
    high: float


@dataclass(frozen=True)
class ReferenceRatio:
    """T_label / T_ref from the test on ln T (resolve.py's model: each seed's own N* and q, the pooled variance), with
    its 95% interval, for the figure of T/T_ref against B. With censored seeds (`bounded`) those seeds count at the
    samples they trained, so `ratio` is a lower bound on T/T_ref, `low` the 97.5% bound below it, and `high` is None:
    nothing bounds it from above."""

    label: str
    ratio: float
    low: float
    high: float | None
    bounded: bool


@dataclass(frozen=True)
class Decision:
    """The decision table and its winner (None when no row is eligible, or there is nothing to decide on), the
    runner-up, and which kind of answer the test on log T gives (resolve.py):

    - "winner": the best beats every other configuration at the 95% level (`resolved` is True only here);
    - "near_optimal": no single winner, but a set of points (`near_optimal`, fastest first, the best among them) each
      beats the reference, the best beats every point outside it, and cannot be told apart from the others
      (`equivalent` says whether that was shown to be a tie, within EQUIVALENCE_MARGIN);
    - "unresolved": neither (`why_unresolved` says why);
    - "none": nothing to decide on, or no eligible row (`best` is None)."""

    reference: str
    rows: list[PlanRow]
    best: str | None
    runner_up: str | None = None
    why_unresolved: str | None = None
    no_decision: str | None = None  # why there is nothing to decide on (no learning signal, reference N* = 0)
    answer: str = "none"
    near_optimal: tuple[str, ...] = ()  # labels, fastest first; empty unless answer == "near_optimal"
    # a near-optimal set's members other than the best: T_member / T_best and its interval at `joint_confidence`
    near_optimal_ratios: tuple[RatioInterval, ...] = ()
    joint_confidence: float | None = None  # every member's interval at once (Bonferroni over the members)
    equivalent: bool | None = None  # every ratio interval lies inside EQUIVALENCE_MARGIN (None: no set)
    budget_cut: tuple[str, ...] = ()  # censored points the best does not beat by their bound: cut, not beaten
    not_run: tuple[str, ...] = ()  # points no seed of which ran (a racing sweep's time budget ended first)
    pool: Pool | None = None  # the pooled seed-to-seed variance of ln T the tests used (plan/log_time.py)
    contenders: tuple[str, ...] = ()  # the best and every configuration it does not beat: where more seeds help
    # every configuration but the reference that a test on ln T can compare with it (two seeds, a pooled spread)
    reference_ratios: tuple[ReferenceRatio, ...] = ()

    def __post_init__(self) -> None:
        if self.answer not in ANSWERS:
            raise ValueError(f"answer must be one of {ANSWERS}, got {self.answer!r}")
        if bool(self.near_optimal) != (self.answer == "near_optimal"):
            raise ValueError(f"answer {self.answer!r} disagrees with near_optimal={self.near_optimal}")
        if (self.best is None) != (self.answer == "none"):
            raise ValueError(f"answer {self.answer!r} disagrees with best={self.best!r}")

    @property
    def resolved(self) -> bool:
        """A single winner (derived from `answer`, so the two cannot disagree)."""
        return self.answer == "winner"

    def row(self, label: str) -> PlanRow:
        return next(r for r in self.rows if r.label == label)
