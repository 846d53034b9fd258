"""Export a sweep as launch scripts for an external engine, whose logs come back through `batchscale import`.

    FORMAT            renderer                                  import format of its log
    verl              verl.render_verl_script                   verl (the file logger's JSONL)
    openrlhf          openrlhf.render_openrlhf_script           tensorboard (hierarchical CLI, current OpenRLHF)
    openrlhf-legacy   openrlhf.render_openrlhf_script           tensorboard (flat CLI, earlier OpenRLHF)

Pipeline: check FORMAT and --out -> expand and validate the sweep (sweep.spec.load_sweep_spec) -> derive each point's
settings from its batch plan (settings.py) -> check every point fits the engine -> render one script per point,
README.md and sweep.json -> write the directory atomically (writer.py). Every problem is a UserError raised before
anything is written.
Nothing here imports torch or an engine; the scripts are text.
"""
