"""A W&B run folder of a verl run: `wandb/run-<date>-<id>/files/output.log` (the console as W&B captures it from the
TaskRunner process: no Ray prefix, no config dict) with `files/config.yaml` beside it, the config verl passes to
`wandb.init(config=OmegaConf.to_container(config, resolve=True))` (verl/utils/tracking.py), in W&B's layout: each
top-level key as `{value: ...}` (wandb >= 0.18), or `{desc: null, value: ...}` with `wandb_version: 1` (older)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_ingest_common import check_run_dir
from test_ingest_verl_console import CONFIG, G, LR, P, concat_dict_to_str, step_metrics

from batchscale.ingest.importer import import_log


def write_wandb_run(root: Path, old_client: bool = False) -> Path:
    run = root / "wandb" / "run-20250301_101010-3x9k2a1b"
    files = run / "files"
    files.mkdir(parents=True)
    lines = ["Training Progress:   0%|          | 0/3 [00:00<?, ?it/s]"]
    lines += [concat_dict_to_str(step_metrics(step), step, rounded=False) for step in (1, 2, 3)]
    (files / "output.log").write_text("\n".join(lines) + "\n")
    if old_client:
        layout = {"wandb_version": 1, "_wandb": {"desc": None, "value": {"cli_version": "0.16.6"}},
                  **{key: {"desc": None, "value": value} for key, value in CONFIG.items()}}
    else:
        layout = {"_wandb": {"value": {"cli_version": "0.19.8", "python_version": "3.10.12"}},
                  **{key: {"value": value} for key, value in CONFIG.items()}}
    (files / "config.yaml").write_text(yaml.safe_dump(layout))
    (files / "wandb-metadata.json").write_text('{"program": "-m verl.trainer.main_ppo"}')
    return run


@pytest.mark.parametrize("old_client", [False, True])
def test_a_wandb_run_folder_imports_with_its_config(tmp_path, old_client):
    run = write_wandb_run(tmp_path, old_client)
    for path in (run, run / "files", run / "files" / "output.log"):
        out = tmp_path / f"out-{path.name}"
        import_log("verl", path, out)
        records, descriptor = check_run_dir(out, P, G)
        assert [r["step"] for r in records if r["kind"] == "step"] == [1, 2, 3]
        assert descriptor["lr"] == LR and descriptor["seed"] == 7
        assert descriptor["import"]["config_path"].endswith("files/config.yaml")
        assert descriptor["import"]["batch_from"]["samples_per_prompt"] == "config"
    assert import_log("verl", run, tmp_path / "again")["run"]["import"]["shape"] == "W&B run folder (files/output.log)"
