"""The torch side of measurement: throughput measured on this machine.

- `profile.generation`: rollout tokens/s against concurrency (the engine or HF generate), and the critical
  generation batch (the knee, fitted by `systems.knee`);
- `profile.training`: seconds per update against batch size (the trainer's own `Actor.update`), the linear cost law
  and matmul utilization;
- `profile.options`: the values the profilers take and the policy they measure; `profile.cli`: `batchscale profile`.

Each writes its document through `rundir` (`GenerationProfile`, `TrainingProfile`), which plan and report read without
importing anything here. The torch-free half of the systems side (roofline, presets, model shapes, knee fitting) is
`systems/`.
"""
