"""Pieces batchscale ships for other frameworks' training scripts, each in its own module that the rest of batchscale
never imports (so `import batchscale` stays free of torch and transformers): `trl`, a Hugging Face `TrainerCallback`
that logs batchscale's gradient-noise keys (`gns/*`) and phase timers from a TRL GRPOTrainer run, for `batchscale import
trl` and `batchscale predict` (docs/IMPORT.md, "Gradient noise from a TRL run"); `ray_tune`, the racing rule
(sweep/race_rule.py) as a Ray Tune scheduler with a trainable for a sweep file's points (README, "The racing rule in a
Ray Tune search")."""
