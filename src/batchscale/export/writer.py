"""Write an export directory all at once, or not at all: scripts, README.md, sweep.json.

Everything goes into a hidden sibling temp directory that is renamed into place, so a failed export leaves nothing
behind. An existing non-empty --out is refused unless --overwrite, which replaces only a previous export that batchscale
wrote and that holds nothing else (rundir.ownership: its marker, or an earlier export's files alone), never a sweep,
a run or an arbitrary directory, nor one holding the sweep file being exported. A link is followed to its target.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from batchscale.errors import UserError
from batchscale.files import resolve_out, staged_directory, write_error
from batchscale.markup import markdown_text
from batchscale.rundir.ownership import check_inputs_outside, check_replaceable, mark_directory

MANIFEST = "sweep.json"
JOB_KEY = "job"  # a point's launcher file (SkyPilot task) in sweep.json


def check_export_dir(out: Path, overwrite: bool, inputs: dict[str, Path | None] | None = None) -> None:
    """Raise before any work if `out` cannot receive the export (`inputs`: option -> path read by the export)."""
    out = resolve_out(out)
    if out.exists() and not out.is_dir():
        raise UserError("--out", f"{out} exists and is not a directory", "choose another --out")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not overwrite:
        raise UserError("--out", f"{out} is not empty", "choose a new or empty --out, or pass --overwrite")
    check_replaceable(out, "export")
    check_inputs_outside(out, inputs or {})


def write_export_dir(out: Path, files: dict[str, str], executable: set[str], overwrite: bool,
                     inputs: dict[str, Path | None] | None = None) -> Path:
    """Write {relative name: text} into a staged directory swapped in whole; returns the absolute directory."""
    check_export_dir(out, overwrite, inputs)
    out = resolve_out(out)
    with staged_directory(out, "exporting") as staging:
        mark_directory(staging, "export")
        for name, text in files.items():
            path = staging / name
            try:
                path.parent.mkdir(exist_ok=True)  # configs/ of a batchscale-engine export
                path.write_text(text)
            except OSError as e:  # a full disk: name the file, and the staged directory is removed
                raise write_error(out / name, e, len(text.encode())) from None
            if name in executable:
                path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return out


def render_readme(manifest: dict, sweep_file: str) -> str:
    """README.md of an export: what each file is, and the steps from launching to `batchscale analyze`."""
    fmt, engine, launcher, points = manifest["format"], manifest["engine"], manifest["launcher"], manifest["points"]
    job = " job |" if launcher == "skypilot" else ""
    rows = "\n".join(
        f"| `{p['script']}` |{f' `{p.get(JOB_KEY)}` |' if job else ''} {p['label']} | {p['seed']} | {p['algorithm']} | "
        f"{p['prompts_per_step']} | {p['samples_per_prompt']} | {p['samples_per_step']} | {p['lr']:.6g} | "
        f"{p['num_steps']} |" for p in points)
    sweep_file = markdown_text(sweep_file)  # a file name is data: never Markdown, HTML or a second line
    inputs = ", ".join(f"`{name}`" for name in manifest["inputs"])
    title = f"{launcher} jobs ({engine})" if launcher else f"{fmt} launchers"
    return f"""# {title} for {sweep_file}

Exported by `batchscale export {fmt}`{f" --engine {engine}" if launcher else ""}. Target: {manifest["target"]}.
One script per sweep point{LAUNCHER_FILES.get(launcher, "")}; `sweep.json` holds the same numbers for programs.

| script |{job} label | seed | algorithm | P | G | P*G | lr | steps |
|---|{"---|" if job else ""}---|---|---|---|---|---|---|---|
{rows}

{render_steps(manifest, inputs)}"""


LAUNCHER_FILES = {"skypilot": " and one SkyPilot task `<point>.sky.yaml` around it",
                  "slurm": ", and `sweep.sbatch`, one Slurm array job running them (task i: the i-th point below)"}


def render_steps(manifest: dict, inputs: str) -> str:
    engine, launcher = manifest["engine"], manifest["launcher"]
    analyze = "`batchscale analyze {this directory}`, then `batchscale plan {this directory}`."
    if engine == "batchscale":
        where = "`runs/<point>/` (configs/<point>.toml is the point's whole config)"
        comes_back = f"Each script runs `batchscale train` into {where}; a finished run is kept, an unfinished one resumes."
    else:
        comes_back = ("Each script ends with the `batchscale import` line that writes `runs/<point>/` (skipped, with a "
                      "message, where batchscale is not installed: run that last line elsewhere, with `SWEEP_DIR` and "
                      "`RUN_DIR` set). The engine's logs go to `work/<point>/`.")
    if launcher == "skypilot":
        flags = " ".join(f"--env {name}=..." for name in manifest["inputs"])
        return f"""1. From this directory (SkyPilot syncs it to every node as the workdir):
   `sky launch -c CLUSTER <point>.sky.yaml {flags}`, or `sky jobs launch -n <point> ...` for a managed job.
   Resources: {manifest["resources"]["accelerators"]} per node, {manifest["resources"]["num_nodes"]} node(s).
2. {comes_back}
3. Bring `runs/<point>/` back here: {"the bucket " + manifest["resources"]["output_bucket"] + " holds it" if
    manifest["resources"].get("output_bucket") else "`rsync -Pavz CLUSTER:~/sky_workdir/runs/<point> runs/`"}.
4. {analyze}
"""
    if launcher == "slurm":
        exported = f"export {inputs}, then " if inputs else ""
        return f"""1. From this directory on the cluster's shared file system: {exported}`sbatch --partition=P --time=HH:MM:SS
   sweep.sbatch` (one array task per point; `--array=3` reruns one, `--array=0-N%2` caps how many run at once).
   Resources: {manifest["resources"]["accelerators"]} GPUs per node, {manifest["resources"]["num_nodes"]} node(s).
2. {comes_back}
3. {analyze}
"""
    if engine == "batchscale":
        return f"""1. Run each script where batchscale is installed: `bash <script> [extra batchscale train options]`.
2. {comes_back}
3. {analyze}
"""
    return f"""1. Set the inputs at the top of each script (or export them): {inputs}.
   The batch, learning rate, step budget and seed are the sweep's and are written into each command.
2. Run each script on the cluster: `bash <script> [extra {engine} options]`. The engine's logs go to `work/<point>/`.
3. Each script ends with the `batchscale import` line that writes `runs/<point>/` here (it is skipped, with a
   message, where batchscale is not installed: run that last line elsewhere, with `SWEEP_DIR` and `RUN_DIR` set).
4. {analyze}
"""


def render_manifest(manifest: dict) -> str:
    return json.dumps(manifest, indent=2) + "\n"
