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
                path.write_text(text)
            except OSError as e:  # a full disk: name the file, and the staged directory is removed
                raise write_error(out / name, e, len(text.encode())) from None
            if name in executable:
                path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return out


def render_readme(fmt: str, sweep_file: str, target: str, points: list[dict]) -> str:
    rows = "\n".join(
        f"| `{p['script']}` | {p['label']} | {p['seed']} | {p['algorithm']} | {p['prompts_per_step']} | "
        f"{p['samples_per_prompt']} | {p['samples_per_step']} | {p['lr']:.6g} | {p['num_steps']} |" for p in points)
    sweep_file = markdown_text(sweep_file)  # a file name is data: never Markdown, HTML or a second line
    return f"""# {fmt} launchers for {sweep_file}

Exported by `batchscale export {fmt}`. Target: {target}.
One script per sweep point; `sweep.json` holds the same numbers for programs.

| script | label | seed | algorithm | P | G | P*G | lr | steps |
|---|---|---|---|---|---|---|---|---|
{rows}

1. Set the inputs at the top of each script (or export them): `MODEL_PATH`, `TRAIN_FILES`, `VAL_FILES`{
    ", `REWARD_FUNC`" if fmt.startswith("openrlhf") else ""}.
   The batch, learning rate, step budget and seed are the sweep's and are written into each command.
2. Run each script on the cluster: `bash <script> [extra {fmt} options]`. The engine's logs go to `work/<point>/`.
3. Each script ends with the `batchscale import` line that writes `runs/<point>/` here (it is skipped, with a
   message, where batchscale is not installed: run that last line elsewhere, with `SWEEP_DIR` and `RUN_DIR` set).
4. `batchscale analyze {{this directory}}`, then `batchscale plan {{this directory}}`.
"""


def render_manifest(manifest: dict) -> str:
    return json.dumps(manifest, indent=2) + "\n"
