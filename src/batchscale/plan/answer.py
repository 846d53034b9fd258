"""Which kind of answer a plan gives, and how each kind looks (issue 45): a resolved winner, a tie, a near-optimal set
not separated, "not resolved", the reference alone, or none. An unresolved answer must never look like a resolved one,
so the decision box's colour, badge and heading and the decision table's marks and row colours all follow the kind, in
report.html, report.md and `plan`'s console table alike.

The kind is read from the plan document (`rundir.PlanDocument`), never guessed: `answer` (plan/resolve.py: "winner",
"near_optimal", "unresolved", "none"; a plan.json older than it is read from `resolved`, plan.explain.plan_answer),
`equivalent` (a near-optimal set whose every T ratio interval lies inside [0.90, 1.11] is a tie; otherwise its
members are not separated), and the rows' `eligible`: when the best is the reference and no other row is eligible,
the reference is the only configuration that reached the target ("reference_only"; resolved when every other point
is beaten even by its bound, as plan.json's `answer` says).

Marks in the decision table: the winner \u2605 (green), a tie's members = (blue), a set's members \u2248 (orange),
the best estimate of an unresolved answer ? (grey; no star, nothing green), the lone reference \u25cb (purple). The
console (`CONSOLE_STYLES`) marks in ASCII, as a pipe or an old terminal may not show the others: *, =, ~, ?, o.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchscale.plan.explain import plan_answer
from batchscale.plan.rows import EQUIVALENCE_MARGIN

KINDS = ("winner", "tie", "near_optimal", "unresolved", "reference_only", "none")
MARGIN = f"[{EQUIVALENCE_MARGIN[0]:.2f}, {EQUIVALENCE_MARGIN[1]:.2f}]"


@dataclass(frozen=True)
class Row:
    """How one decision-table row is marked: its css class (None: plain) and the mark before its label."""

    css: str | None
    mark: str


@dataclass(frozen=True)
class Answer:
    """The kind of answer and its words: the badge (a word or two), the heading and what it means for the user."""

    kind: str
    badge: str
    heading: str
    meaning: str
    marked: tuple[str, ...]  # the labels the kind marks in the table (winner, members, best estimate)
    recommends: bool = True  # False where the best is only an estimate: unresolved, the reference alone unresolved

    def row(self, plan_row: dict) -> Row:
        label = plan_row["label"]
        if label in self.marked:
            return {"winner": Row("winner", "\u2605"), "tie": Row("tie", "="), "near_optimal": Row("near", "\u2248"),
                    "unresolved": Row("estimate", "?"), "reference_only": Row("only", "\u25cb")}[self.kind]
        return Row(None if plan_row.get("eligible", True) else "ineligible", "")

    def legend(self, console: bool = False) -> str:
        """What the table's marks mean, for this kind; `console`: in the console's ASCII marks and dim rows."""
        marks = {
            "winner": "\u2605 the resolved winner.",
            "tie": f"= the members of the tie (every T ratio between them inside {MARGIN} at joint 95%).",
            "near_optimal": "\u2248 the members of the near-optimal set, not separated: the fastest is among them.",
            "unresolved": "? the best estimate so far, not a recommendation: it is not shown faster than the others.",
            "reference_only": "\u25cb the reference, the only configuration that reached the target.",
            "none": "No row is marked: none can be named best.",
        }[self.kind]
        rows = "Grey"
        if console:
            marks, rows = marks.replace("\u2605", "*").replace("\u2248", "~").replace("\u25cb", "o"), "Dim"
        return (f"{marks} {rows} rows cannot be named best: infeasible, censored in at least one seed, or stopped by "
                'a racing sweep; a censored one is ruled out only by its bound ("(cut)": the budget cut it, it was not '
                "beaten).")


CONSOLE_STYLES = {  # kind -> (the mark before a marked label, its rich style, the heading's style)
    "winner": ("* ", "bold green", "bold green"), "tie": ("= ", "bold blue", "bold blue"),
    "near_optimal": ("~ ", "yellow", "bold yellow"), "unresolved": ("? ", "bold", "bold"),
    "reference_only": ("o ", "magenta", "bold magenta"), "none": ("", "", "bold red"),
}


def is_reference_alone(plan: dict) -> bool:
    """The best is the reference and no other row is eligible: it alone reached the target (the rows' `eligible`)."""
    best = plan.get("best")
    return best is not None and best == plan["reference"] and not any(
        r.get("eligible") and r["label"] != best for r in plan["rows"])


def classify_answer(plan: dict) -> Answer:
    """The report's kind of answer and its words, from the plan document (module docstring)."""
    answer, best = plan_answer(plan), plan.get("best")
    times = {r["label"]: r.get("normalized_time_to_target") for r in plan["rows"]}
    members = tuple(plan.get("near_optimal") or ())
    if answer == "none":
        return Answer("none", "No answer", "No configuration can be recommended",
                      "No configuration is eligible to be named best (see the explanation); nothing is marked.", ())
    if is_reference_alone(plan):
        if answer == "winner":
            return Answer("reference_only", "Reference only, resolved",
                          f"Only the reference {best} reached the target",
                          "Every other configuration is beaten even by the bound its censored seeds give: run the "
                          "reference, or give the others a larger budget to compare them at all.", (best,))
        return Answer("reference_only", "Reference only, not resolved", f"Only the reference {best} reached the target",
                      "No other configuration reached the target (censored, cut by the budget, or not run), so "
                      "none is shown slower than it: this is not a recommendation of its batch over the others; "
                      "give them a larger budget to compare them.", (best,), recommends=False)
    if answer == "winner":
        return Answer("winner", "Resolved", f"Resolved: {best} reaches the target soonest",
                      f"{best} beats every other configuration at the 95% level (test on ln T over seeds).", (best,))
    if answer == "near_optimal" and plan.get("equivalent"):
        return Answer("tie", "Tie", f"A tie: {', '.join(members)} reach the target equally soon",
                      f"Every T ratio between them lies inside {MARGIN} at joint 95%, and each beats the reference: "
                      "any of them will do.", members)
    if answer == "near_optimal":
        return Answer("near_optimal", "Near-optimal set, not separated", f"Near-optimal set: any of {', '.join(members)}",
                      f"The fastest configuration is among them, but they are not separated: {best} is only the "
                      f"fastest estimate (T/T_ref {_fixed(times.get(best))}), and more seeds could change which is "
                      "fastest.", members)
    return Answer("unresolved", "Not resolved", "Not resolved: no configuration is shown to reach the target soonest",
                  f"Best estimate so far: {best} (T/T_ref {_fixed(times.get(best))}), not a recommendation; "
                  "add seeds to the configurations it does not beat.", (best,), recommends=False)


def _fixed(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
