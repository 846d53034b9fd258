"""The decision: which batch configuration reaches the target score soonest in wall-clock time, and why.

T = N*/q (samples-to-target over end-to-end throughput); relative to a reference, T/T_ref = rN / (q/q_ref); the winner is the
feasible configuration maximizing q/rN (arXiv 2608.29296, "Decision rule and regimes"). Modules:
- `rows`: the row types (a configuration's measurement, its decision row, the decision);
- `decide`: the pure arithmetic and the argmax (censoring, feasibility, ties);
- `resolve`: whether the winner beats the runner-up and the reference on log T at the 95% level;
- `memory`: feasibility on the active decode batch (KV cache per replica, waves);
- `explain`: the regime (generation knee vs critical training batch) and the one-sentence explanation;
- `load_table`: a CSV measured elsewhere; `sweep_inputs`: analysis.json plus throughput from the runs' logs;
- `make`: the plan from a sweep or a table, and its document; `cli`: the `batchscale plan` command;
- `predict`: rN and q of other batches from one run; `predict_cli`: `batchscale predict`.
Reads tables, analysis.json and run logs only; never imports the training stack.
"""
