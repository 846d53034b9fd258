"""Export a sweep as launch scripts for an external engine, whose logs come back through `batchscale import`.

    FORMAT            renderer                                  import format of its log
    verl              verl.render_verl_script                   verl (the file logger's JSONL)
    openrlhf          openrlhf.render_openrlhf_script           tensorboard (hierarchical CLI, current OpenRLHF)
    openrlhf-legacy   openrlhf.render_openrlhf_script           tensorboard (flat CLI, earlier OpenRLHF)
    batchscale        native.render_native_script               none: `batchscale train` writes the run directory

and the launchers, whose job files run one of those engines' scripts (--engine):

    skypilot          skypilot.render_skypilot_task             one SkyPilot task YAML per point
    slurm             slurm.render_sbatch                       one Slurm array job for the sweep

Pipeline: check FORMAT and --out -> expand and validate the sweep (sweep.spec.load_sweep_spec) -> derive each point's
settings from its batch plan (settings.py) -> check every point fits the engine -> render one script per point (and
the launcher's job files), README.md and sweep.json -> write the directory atomically (writer.py). Every problem is
a UserError raised before anything is written.
Nothing here imports torch or an engine; the scripts are text.
"""
