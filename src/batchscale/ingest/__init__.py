"""Import other frameworks' training logs as batchscale run directories (DESIGN.md "The run log").

    FORMAT        reader                                   shapes (detected)                     key styles
    verl          verl.read_verl                           file-logger JSONL, flat JSONL,        verl
                  (verl_console.read_verl_console)         console text, W&B run folder
    openrlhf      importer.read_openrlhf                   console text, TensorBoard events      OpenRLHF
                  (openrlhf_console.read_openrlhf_console)
    tensorboard   tensorboard.read_tensorboard             TensorBoard events (+ args text)      all (detected)
    trl           trl.read_trl_state                       trainer_state.json (+ training_args)  TRL
    wandb-csv     wandb_csv.read_wandb_csv                 history export, chart export (runs)   all (detected)
    skyrl, prime-rl, nemo-rl, xtuner                       flat JSONL, TensorBoard events,       the FORMAT's
                  newer_formats.newer_reader               W&B history export                    (newer_frameworks)

`importer.import_log` runs the pipeline: read -> one run per PATH (runs) -> old verl names (verl_legacy) -> config
(frameworkconfig; a launch command in a console: launch; TRL's batch unit: trl_batch) -> P, G and updates from the
evidence (batch_size) -> records (records, with the key table of common and newer_frameworks) -> rundir.write_run.
console.py holds what the console readers share (Ray's interleaved processes included), inputs.py how any input file
is read (kinds, caps), pickle_tree.py the opcode-only reading of TRL's training_args.bin. Reading a log never
imports torch.
"""
