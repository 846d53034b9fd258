"""`export_sweep`: expand a sweep and write one launch script per point for verl or OpenRLHF (see the package
docstring for the pipeline); every problem is a UserError raised before anything is written."""

from __future__ import annotations

import re
from pathlib import Path

from batchscale.errors import UserError
from batchscale.export.formats import FORMATS
from batchscale.export.openrlhf import TARGETS as OPENRLHF_TARGETS
from batchscale.export.openrlhf import check_openrlhf, render_openrlhf_script
from batchscale.export.settings import PointSettings, derive_settings
from batchscale.export.shell import render_import_line
from batchscale.export.verl import LOG_PATH as VERL_LOG_PATH
from batchscale.export.verl import TARGET as VERL_TARGET
from batchscale.export.verl import check_verl, render_verl_script
from batchscale.export.writer import MANIFEST, check_export_dir, render_manifest, render_readme, write_export_dir

SAFE_NAME = re.compile(r"^[A-Za-z0-9._=+-]+$")  # a point's name appears unquoted-safe in paths inside the script


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UserError("FORMAT", f"unknown format '{fmt}'", f"use one of: {', '.join(FORMATS)}")


def check_points(fmt: str, settings: list[PointSettings]) -> None:
    """Every point must fit the engine; the first that does not fails the whole export."""
    check = check_verl if fmt == "verl" else check_openrlhf
    for s in settings:
        if not SAFE_NAME.match(s.name):
            raise UserError(f"point {s.name!r}", "the run name must be letters, digits and . _ = + -",
                            "set run.label to such a name")
        problem = check(s)
        if problem:
            raise UserError(f"point {s.name}", problem, "export this point for another engine, or drop it")


def render_point(fmt: str, s: PointSettings, sweep_name: str) -> tuple[str, str, str, str]:
    """(script text, target description, log path in the script, import line) of one point."""
    if fmt == "verl":
        project = "batchscale-" + re.sub(r"[^A-Za-z0-9._-]", "_", Path(sweep_name).stem)  # a plain Hydra value
        return (render_verl_script(s, sweep_name, project), VERL_TARGET,
                VERL_LOG_PATH, render_import_line("verl", VERL_LOG_PATH, s))
    log = f"$RUN_DIR/tensorboard/{s.name}"
    return (render_openrlhf_script(s, sweep_name, fmt), OPENRLHF_TARGETS[fmt], log,
            render_import_line("tensorboard", log, s))


def export_sweep(fmt: str, sweep_file: Path, out: Path, overrides: list[str] = (), overwrite: bool = False) -> dict:
    """Write DIR/<name>.sh per point, README.md and sweep.json; returns the manifest (sweep.json) plus `out`."""
    from batchscale.sweep.spec import load_sweep_spec

    check_format(fmt)
    out = Path(out)
    inputs = {"SWEEP_FILE": Path(sweep_file)}  # --overwrite never deletes the sweep file being exported
    check_export_dir(out, overwrite, inputs)
    settings = [derive_settings(p) for p in load_sweep_spec(Path(sweep_file), list(overrides))]
    check_points(fmt, settings)
    files, points, target = {}, [], ""
    for s in settings:
        script, target, log, import_line = render_point(fmt, s, Path(sweep_file).name)
        files[f"{s.name}.sh"] = script
        points.append({
            "name": s.name, "script": f"{s.name}.sh", "label": s.label, "seed": s.seed, "algorithm": s.algorithm,
            "prompts_per_step": s.prompts_per_step, "samples_per_prompt": s.samples_per_prompt,
            "samples_per_step": s.samples_per_step, "samples_per_update": s.samples_per_update,
            "ppo_epochs": s.ppo_epochs, "ppo_mini_batches": s.ppo_mini_batches, "lr": s.lr, "lr_rule": s.lr_rule,
            "critic_lr": s.critic_lr, "num_steps": s.num_steps, "budget_samples": s.budget_samples,
            "log": log, "run_dir": f"runs/{s.name}", "import": import_line,
        })
    manifest = {"format": fmt, "target": target, "sweep_file": str(Path(sweep_file).absolute()),
                "overrides": list(overrides), "points": points}
    files["README.md"] = render_readme(fmt, Path(sweep_file).name, target, points)
    files[MANIFEST] = render_manifest(manifest)
    written = write_export_dir(out, files, {f"{s.name}.sh" for s in settings}, overwrite, inputs)
    return {"out": str(written), **manifest}
