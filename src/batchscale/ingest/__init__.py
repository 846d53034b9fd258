"""Import other frameworks' training logs as batchscale run directories (DESIGN.md "The run log").

    FORMAT        reader                         key styles it can hold
    verl          verl.read_verl_jsonl           verl (file logger JSONL)
    tensorboard   tensorboard.read_tensorboard   verl, OpenRLHF, TRL (detected from the tags)
    trl           trl.read_trl_state             TRL (trainer_state.json)
    wandb-csv     wandb_csv.read_wandb_csv       verl, OpenRLHF, TRL (detected from the columns)

`importer.import_log` runs the pipeline; reading a log never imports torch.
"""
