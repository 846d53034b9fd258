"""The decision's row types: what the plan knows of each configuration, its numbers relative to the reference, and the
decision table with its winner (decide.py computes them, resolve.py tests the winner, explain.py and make.py show them).
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    log_samples_to_target_mean: float | None = None  # mean of ln N* over reached seeds (None: unknown, or N* = 0)
    log_samples_to_target_sd: float | None = None  # sd of ln N* over reached seeds (None with one seed)
    log_throughput_sd: float | None = None  # sd of ln(samples_per_step / time/step) over the steps q came from
    throughput_steps: int | None = None  # how many steps that is
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


@dataclass(frozen=True)
class Decision:
    """The decision table and its winner (None when no row is eligible, or there is nothing to decide on), the
    runner-up, and which kind of answer the test on log T gives (resolve.py):

    - "winner": the best beats both the runner-up and the reference at the 95% level (`resolved` is True only here);
    - "near_optimal": no single winner, but a set of points (`near_optimal`, fastest first, the best among them) each
      beats the reference and the best cannot be told apart from the others;
    - "unresolved": neither (`why_unresolved` says why);
    - "none": nothing to decide on, or no eligible row (`best` is None)."""

    reference: str
    rows: list[PlanRow]
    best: str | None
    runner_up: str | None = None
    resolved: bool = False
    why_unresolved: str | None = None
    no_decision: str | None = None  # why there is nothing to decide on (no learning signal, reference N* = 0)
    answer: str = "none"
    near_optimal: tuple[str, ...] = ()  # labels, fastest first; empty unless answer == "near_optimal"

    def __post_init__(self) -> None:
        if self.answer not in ANSWERS:
            raise ValueError(f"answer must be one of {ANSWERS}, got {self.answer!r}")
        if self.resolved != (self.answer == "winner") or bool(self.near_optimal) != (self.answer == "near_optimal"):
            raise ValueError(f"answer {self.answer!r} disagrees with resolved={self.resolved} and "
                             f"near_optimal={self.near_optimal}")
        if (self.best is None) != (self.answer == "none"):
            raise ValueError(f"answer {self.answer!r} disagrees with best={self.best!r}")

    def row(self, label: str) -> PlanRow:
        return next(r for r in self.rows if r.label == label)
