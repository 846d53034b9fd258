"""Words for the decision: the regime (which critical batch comes first) and one sentence on why the winner wins.

Regime, after the paper (arXiv 2608.29296, "Decision rule and regimes"): compare the critical generation batch (the knee of
decode throughput against samples in flight) with the critical training batch (B_simple = b/a from the fit
|g|^2 = a + b/B, McCandlish et al. 2018, in samples per step). Both are counted in samples, so they compare directly.
- generation knee first: throughput stops growing while rN is still near 1, so a broad range of batches is near-optimal and
  pushing further eventually raises T;
- training critical batch first: rN starts growing while throughput still improves, so the optimum can lie beyond B_simple
  when the throughput gain keeps outpacing the penalty.
Departure: the paper states the regimes qualitatively; here the two estimates are compared directly and the sentence says the
call is tentative when they lie within `TENTATIVE_RATIO` of each other (both are noisy estimates), or when the knee is a
forecast (plan/make.py `reachable_knee`: the knee used is min(B_90, the largest measured concurrency, the KV capacity),
tentative when the fit's B_90 lies beyond either). A missing or non-positive estimate gives "unknown".

The explanation names the winner's rN, throughput gain and T/T_ref, then one loser: the next larger eligible batch when
there is one (why going bigger stops paying), else the runner-up (a loser whose T/T_ref is level with the winner's to
the digits shown is called level, not above); the fastest row that was ruled out (infeasible or censored), if it would
have been faster; whether the win is resolved (resolve.py) and, if not, why; and a row that decodes in waves. When the
answer is a near-optimal set (resolve.py), it opens with the set and what its intervals show: "Any of P8, P16 (T/T_ref
0.64-0.68; each beats the reference; equivalent: T_P16 / T_P8 in [0.93, 1.08], inside [0.90, 1.11], at joint 95%)",
or, when an interval reaches outside that margin, "not separated: ... more seeds could change which is fastest";
then the fastest member, and the loser is chosen outside the set.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchscale.plan.decide import rank_rows
from batchscale.plan.memory import describe_waves
from batchscale.plan.rows import EQUIVALENCE_MARGIN, Decision, PlanRow

TENTATIVE_RATIO = 1.5


@dataclass(frozen=True)
class Regime:
    name: str  # "generation-knee-first", "training-critical-first" or "unknown"
    sentence: str
    critical_generation_batch_samples: float | None  # samples in flight at the generation knee
    critical_training_batch_samples: float | None  # B_simple, samples per update
    tentative: bool = False


def classify_regime(critical_generation_batch: float | None, critical_training_batch: float | None,
                    knee_note: str | None = None) -> Regime:
    """Which critical batch comes first, and what that means for where the optimum lies; `knee_note` says why the
    generation knee is only a forecast (the call is then tentative)."""
    gen = critical_generation_batch if _is_positive(critical_generation_batch) else None
    train = critical_training_batch if _is_positive(critical_training_batch) else None
    if gen is None or train is None:
        missing = []
        if gen is None:
            missing.append("the critical generation batch (give a generation profile with a knee)")
        if train is None:
            missing.append("the critical training batch (analysis.json b_simple)")
        return Regime("unknown", "Unknown: missing " + " and ".join(missing) + ".", gen, train)
    if gen < train:
        name = "generation-knee-first"
        sentence = (
            f"Generation knee first: decode throughput saturates near {gen:.0f} samples in flight, before the critical "
            f"training batch B_simple ~ {train:.0f} samples/update, so expect a broad near-optimal region while rN stays "
            f"near 1; pushing the batch further eventually raises T."
        )
    else:
        name = "training-critical-first"
        sentence = (
            f"Training critical batch first: B_simple ~ {train:.0f} samples/update comes before the generation knee near "
            f"{gen:.0f} samples in flight, so rN grows past B_simple, but the optimum can lie beyond it while throughput "
            f"keeps improving faster than rN."
        )
    reasons = [knee_note] if knee_note else []
    if max(gen, train) / min(gen, train) < TENTATIVE_RATIO:
        reasons.append(f"the two lie within {TENTATIVE_RATIO}x of each other")
    if reasons:
        sentence = sentence[:-1] + f" (tentative: {'; '.join(reasons)})."
    return Regime(name, sentence, gen, train, tentative=bool(reasons))


def explain_decision(plan: Decision) -> str:
    """One sentence: why the winner wins, naming its rN, throughput gain and T/T_ref, and why a rival loses."""
    if plan.best is None:
        return _explain_no_winner(plan)
    winner = plan.row(plan.best)
    if plan.answer == "near_optimal":
        members = [plan.row(label) for label in plan.near_optimal]
        tied = describe_near_optimal(plan.near_optimal, [r.normalized_time_to_target for r in members],
                                     [vars(r) for r in plan.near_optimal_ratios], plan.equivalent,
                                     plan.joint_confidence)
        fastest = _describe_winner(winner, plan.reference).replace(" wins: ", " is the fastest: ", 1)
        parts = [f"{tied[0].upper()}{tied[1:]}", fastest]
    else:
        alone = not any(r.eligible and r.label != winner.label for r in plan.rows)
        described = _describe_winner(winner, plan.reference, alone)
        if not plan.resolved:  # a best estimate, not a winner: the verdict beside it says against whom
            described = (described.replace(" wins: ", " is the best estimate, not yet resolved: ", 1)
                         + f" ({plan.why_unresolved}: add seeds to the configurations it does not beat)")
        parts = [described]
    loser = _pick_loser(plan, winner)
    if loser is not None:
        parts.append(_describe_loser(loser, winner))
    ruled_out = [r for r in rank_rows(plan) if not r.eligible and r.time_to_target_s < winner.time_to_target_s]
    if ruled_out:
        r = ruled_out[0]
        parts.append(f"{r.label} would be faster (T/T_ref = {_fixed(r.normalized_time_to_target)}) but is "
                     f"{_why_ineligible(r)}")
    waves = describe_waves(winner.measurement)
    if waves:
        parts.append(f"{winner.label}'s {waves}")
    return "; ".join(parts) + "."


def describe_near_optimal(labels, normalized_times, ratios: list[dict], equivalent: bool | None,
                          joint_confidence: float | None) -> str:
    """"any of A, B (T/T_ref 0.64-0.68; each beats the reference; not separated: T_B / T_A 1.05 [0.85, 1.30] at
    joint 95%: more seeds could change which is fastest)", or "equivalent: ... inside [0.90, 1.11] ..."."""
    known = [t for t in normalized_times if t is not None]
    spread = f"T/T_ref {min(known):.2f}-{max(known):.2f}; " if known else ""
    intervals = ", ".join(f"T_{r['label']} / T_{labels[0]} {r['ratio']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"
                          for r in ratios)
    joint = f" at joint {joint_confidence:.0%} (Bonferroni over {len(ratios)})" if joint_confidence else ""
    margin = f"[{EQUIVALENCE_MARGIN[0]:.2f}, {EQUIVALENCE_MARGIN[1]:.2f}]"
    if equivalent:
        tie = f"equivalent: {intervals}{joint}, inside {margin}"
    else:
        tie = f"not separated: {intervals}{joint}, reaching outside {margin}: more seeds could change which is fastest"
    return f"any of {', '.join(labels)} ({spread}each beats the reference; {tie})"


def plan_answer(plan: dict) -> str:
    """The plan document's `answer` (rows.ANSWERS); a plan.json older than `answer` is read from `resolved`."""
    answer = plan.get("answer")
    if answer is None:
        answer = "none" if plan.get("best") is None else ("winner" if plan.get("resolved") else "unresolved")
    return answer


def describe_verdict(plan: dict) -> str:
    """The verdict in one sentence from the plan document (`rundir.PlanDocument` as JSON), for `plan` and the report
    alike: a resolved winner, a resolved near-optimal set, or why neither. A plan.json older than `answer` is read
    from `resolved`."""
    best, answer = plan.get("best"), plan_answer(plan)
    if answer == "winner":
        return (f"Resolved: {best} reaches the target sooner than every other configuration at the 95% level "
                "(test on ln T over seeds, each seed's own N* and q).")
    if answer == "near_optimal":
        labels = plan["near_optimal"]
        times = {r["label"]: r.get("normalized_time_to_target") for r in plan["rows"]}
        tied = describe_near_optimal(labels, [times.get(label) for label in labels], plan.get("near_optimal_ratios")
                                     or [], plan.get("equivalent"), plan.get("joint_confidence"))
        return (f"Resolved as a near-optimal set at the 95% level (test on ln T over seeds, each seed's own N* and "
                f"q): {tied}; {best} beats every configuration outside it.")
    return f"Unresolved: {plan.get('why_unresolved') or 'no winner'}."


def format_time_to_target(seconds: float | None) -> str:
    """A time-to-target cell: 41.0 s, 4.8 min, 1.25 h; "-" when there is none (a console line's durations are
    console.format_duration's)."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _describe_winner(w: PlanRow, reference: str, alone: bool = False) -> str:
    if w.label == reference:
        if alone:  # e.g. a racing sweep whose time budget ended before any other point ran: nothing was beaten
            return f"{w.label} (the reference) wins: it is the only configuration that reached the target"
        return f"{w.label} (the reference) wins: no other eligible configuration's throughput gain covers its rN"
    if w.r_n >= 1:
        cost = f"a {w.r_n:.2f}x sample penalty (rN)"
    else:
        cost = f"rN {w.r_n:.2f} (fewer samples than the reference)"
    return f"{w.label} wins: {w.throughput_gain:.2f}x throughput for {cost}, T/T_ref = {w.normalized_time_to_target:.2f}"


def _describe_loser(r: PlanRow, w: PlanRow) -> str:
    ratio = f"T/T_ref = {r.normalized_time_to_target:.2f}"
    if r.r_n > r.throughput_gain and r.throughput_gain < 1 <= r.r_n:  # more samples and slower too
        return (f"{r.label} loses: it needs rN {r.r_n:.2f} the samples at {r.throughput_gain:.2f}x the throughput, "
                f"{ratio}")
    if r.r_n > r.throughput_gain and r.throughput_gain < 1:  # fewer samples, but a larger throughput loss
        return (f"{r.label} loses: its {r.throughput_gain:.2f}x throughput costs more than rN {r.r_n:.2f} (fewer "
                f"samples than the reference) saves, {ratio}")
    if r.r_n > r.throughput_gain:
        return f"{r.label} loses: rN {r.r_n:.2f} outweighs its {r.throughput_gain:.2f}x throughput, {ratio}"
    mine, theirs = f"{r.normalized_time_to_target:.2f}", f"{w.normalized_time_to_target:.2f}"
    relation = f"level with {w.label}'s" if mine == theirs else f"above {w.label}'s"
    return (
        f"{r.label} loses: its {r.throughput_gain:.2f}x throughput for rN {r.r_n:.2f} gives "
        f"T/T_ref = {mine}, {relation} {theirs}"
    )


def _pick_loser(plan: Decision, w: PlanRow) -> PlanRow | None:
    """The next larger eligible batch than the winner's if batch sizes are known, else the eligible runner-up; with a
    near-optimal set, a row outside the set (its members do not lose)."""
    others = [r for r in plan.rows if r.eligible and r.label != w.label and r.label not in plan.near_optimal]
    w_batch = w.measurement.samples_per_step
    if w_batch is not None:
        larger = [r for r in others if (r.measurement.samples_per_step or 0) > w_batch]
        if larger:
            return min(larger, key=lambda r: (r.measurement.samples_per_step, r.time_to_target_s))
    return min(others, key=lambda r: r.time_to_target_s, default=None)


def _why_ineligible(r: PlanRow) -> str:
    m = r.measurement
    reasons = [f"stopped: {m.extra['stopped']}"] if m.extra.get("stopped") else []
    if not m.feasible:
        reasons.append(f"infeasible: {m.extra['infeasible_because']}" if "infeasible_because" in m.extra
                       else "infeasible on this machine")
    if m.censoring == "partly censored" and not m.extra.get("stopped"):
        reasons.append(f"partly censored ({m.seeds_censored} seed(s) never reached the target, so its N* is a lower bound)")
    return " and ".join(reasons)


def _explain_no_winner(plan: Decision) -> str:
    if plan.no_decision:
        return f"No configuration can be recommended: {plan.no_decision}."
    infeasible = [r.label for r in plan.rows if not r.measurement.feasible]
    censored = [r.label for r in plan.rows if r.measurement.feasible and r.measurement.censoring != "reached"]
    reasons = []
    if infeasible:
        reasons.append("infeasible: " + ", ".join(infeasible))
    if censored:
        reasons.append("censored in at least one seed: " + ", ".join(censored))
    return "No configuration can be recommended: every row is ruled out (" + "; ".join(reasons) + ")."


def _fixed(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _is_positive(x: float | None) -> bool:
    return x is not None and x == x and 0 < x < float("inf")
