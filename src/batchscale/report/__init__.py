"""The report: one offline HTML page (and its Markdown twin) with the decision and the evidence behind it.

Shows, top to bottom: the winner, the one-sentence explanation and the regime (from `plan`), the decision table, the
learning curves on the sample and step axes with seed bands, gradient norm vs B with its slope, rN vs B, generation
throughput vs concurrency with its knee and training time vs batch (when profiles are given), the learning-side table, and
how each number was measured. Modules:
- `inputs`: plan (via `plan.make.make_plan`), the analysis computed once, profiles, machine facts of the runs;
- `figures`: the analysis's PNGs reused, the two systems plots drawn; `tables`: shared formatted content;
- `html`, `markdown`: the two renderings; `build`: all-or-nothing writing; `cli`: `batchscale report`.
Reads run directories, analysis.json and profile JSON only; never imports torch. Nothing is imported here, so that
`batchscale --help` does not load matplotlib: import from `batchscale.report.build`.
"""
