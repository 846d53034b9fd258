"""The learning side of "When Do Larger Batches Help Scale LLM Reinforcement Learning?" (arXiv 2608.29296).

Reads run directories only (through batchscale.rundir, see DESIGN.md), never the training stack, so imported verl / OpenRLHF /
TRL runs analyse the same as native ones. Pipeline, one module per step:

    runs       read and group run directories by label
    curves     J(N) per seed on a common sample grid, optional centred (zero-lag) smoothing
    signal     does a label's curve rise clearly above its start? (no learning signal, no verdict)
    targets    samples-to-target N* (first crossing), updates-to-target, realized time-to-target, rN
    intervals  mean and t-interval on log N* over seeds, with censoring
    coverage   that interval's coverage by simulation (bootstrap: the percentile bootstrap it replaced)
    alignment  does a label's mean curve stay within the reference's seed-to-seed band?
    gradnoise  gradient-norm proxy vs samples_per_step, log-log slope, B_simple (McCandlish et al. 2018)
    plots, report   PNG figures and report.md
    analyze    orchestration -> analysis.json
"""
