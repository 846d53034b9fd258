"""The report: one offline HTML page (and its Markdown twin) with the decision, its certainty and the evidence.

Shows, top to bottom: the kind of answer (a resolved winner, a tie, a near-optimal set not separated, not resolved,
the reference alone, none: its own colour, badge and heading), the explanation, the verdict and the regime (from
`plan`), the decision table marked by that kind, the doubts (plan.doubts) with what to do, T/T_ref against B_train
with its intervals and J against wall-clock seconds, the learning curves on the sample and step axes with seed bands,
gradient norm vs B with its slope, rN vs B, generation throughput vs concurrency with its knee and training time vs
batch (when profiles are given), the answers training fixed and broke, the learning-side table, and how each number
was measured. Modules:
- `inputs`: plan (via `plan.make.make_plan`), the analysis computed once, profiles, machine facts of the runs, each
  seed's score on the training clock, the doubts;
- `answer`: the kind of answer and how it looks; `tables`: shared formatted content;
- `figure`: one figure; `decision_figures`: T/T_ref vs B and J vs wall-clock; `figures`: all of them, the analysis's
  PNGs reused and the two systems plots drawn; `samples`: answers fixed and broken;
- `html`, `markdown`: the two renderings; `build`: all-or-nothing writing; `cli`: `batchscale report`.
Reads run directories, analysis.json and profile JSON only; never imports torch. Nothing is imported here, so that
`batchscale --help` does not load matplotlib: import from `batchscale.report.build`.
"""
