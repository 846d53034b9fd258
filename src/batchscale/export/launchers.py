"""`export_sweep`: expand a sweep and write one launch script per point for an engine (verl, OpenRLHF, batchscale),
and for a launcher (SkyPilot, Slurm) the job files around those scripts (see the package docstring for the pipeline);
every problem is a UserError raised before anything is written."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from batchscale.errors import UserError
from batchscale.export import native, skypilot, slurm
from batchscale.export.formats import (DEFAULT_ENGINE, DEFAULT_GPUS_PER_NODE, DEFAULT_SKYPILOT_GPU, ENGINES, FORMATS,
                                       LAUNCHERS, RAY_ENGINES)
from batchscale.export.openrlhf import REQUIRED_INPUTS as OPENRLHF_INPUTS
from batchscale.export.openrlhf import TARGETS as OPENRLHF_TARGETS
from batchscale.export.openrlhf import check_openrlhf, render_openrlhf_script
from batchscale.export.settings import PointSettings, derive_settings
from batchscale.export.shell import render_import_line
from batchscale.export.verl import LOG_PATH as VERL_LOG_PATH
from batchscale.export.verl import REQUIRED_INPUTS as VERL_INPUTS
from batchscale.export.verl import TARGET as VERL_TARGET
from batchscale.export.verl import check_verl, render_verl_script
from batchscale.export.writer import (JOB_KEY, MANIFEST, check_export_dir, render_manifest, render_readme,
                                      write_export_dir)

SAFE_NAME = re.compile(r"^[A-Za-z0-9._=+-]+$")  # a point's name appears unquoted-safe in paths inside the script


@dataclass(frozen=True)
class Launch:
    """What the job files ask for: the engine, and for a launcher its resources (checked before any work)."""
    launcher: str | None  # skypilot, slurm, or None (the engine's scripts alone)
    engine: str
    accelerators: str | None = None  # NAME:COUNT (SkyPilot) or [TYPE:]COUNT (Slurm), per node
    num_nodes: int = 1
    output_bucket: str | None = None

    @property
    def inputs(self) -> tuple[str, ...]:
        """The variables the engine's scripts require from the user (their `for var in ...` check)."""
        return {"verl": VERL_INPUTS, "batchscale": ()}.get(self.engine, OPENRLHF_INPUTS)


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UserError("FORMAT", f"unknown format '{fmt}'", f"use one of: {', '.join(FORMATS)}")


def resolve_launch(fmt: str, engine: str | None = None, accelerators: str | None = None, num_nodes: int | None = None,
                   output_bucket: str | None = None) -> Launch:
    """FORMAT and the launcher flags as one checked Launch; a flag that does not apply to FORMAT is refused."""
    check_format(fmt)
    if fmt not in LAUNCHERS:
        for flag, value in (("--engine", engine), ("--accelerators", accelerators), ("--num-nodes", num_nodes),
                            ("--output-bucket", output_bucket)):
            if value is not None:
                raise UserError(flag, f"applies to the launchers ({', '.join(LAUNCHERS)}), not to FORMAT {fmt}",
                                f"drop {flag}, or export e.g. `skypilot --engine {fmt}`")
        return Launch(None, fmt)
    engine = engine or DEFAULT_ENGINE
    if engine not in ENGINES:
        raise UserError("--engine", f"unknown engine '{engine}'", f"use one of: {', '.join(ENGINES)}")
    num_nodes = 1 if num_nodes is None else num_nodes
    if not 1 <= num_nodes <= 4096:
        raise UserError("--num-nodes", f"must be between 1 and 4096, got {num_nodes}", "pass e.g. --num-nodes 2")
    if num_nodes > 1 and engine not in RAY_ENGINES:
        raise UserError("--num-nodes", f"batchscale trains each run on one device, so {num_nodes} nodes would idle",
                        "keep --num-nodes 1, or export for a Ray engine (--engine verl|openrlhf)")
    if output_bucket is not None and fmt != "skypilot":
        raise UserError("--output-bucket", "applies to skypilot (a Slurm job writes to the shared file system)",
                        "drop --output-bucket")
    accelerators = accelerators or default_accelerators(fmt, engine)
    parse_resources(fmt, accelerators)
    skypilot.check_bucket(output_bucket)
    return Launch(fmt, engine, accelerators, num_nodes, output_bucket)


def default_accelerators(launcher: str, engine: str) -> str:
    count = DEFAULT_GPUS_PER_NODE["batchscale" if engine == "batchscale" else "ray"]
    return f"{DEFAULT_SKYPILOT_GPU}:{count}" if launcher == "skypilot" else str(count)


def parse_resources(launcher: str, accelerators: str) -> tuple[str | None, int]:
    """(GPU type, GPUs per node) of --accelerators: NAME:COUNT for SkyPilot, [TYPE:]COUNT for Slurm."""
    return (slurm.parse_gpus if launcher == "slurm" else skypilot.parse_accelerators)(accelerators)


def check_points(engine: str, settings: list[PointSettings]) -> None:
    """Every point must fit the engine; the first that does not fails the whole export."""
    check = {"verl": check_verl, "batchscale": lambda s: None}.get(engine, check_openrlhf)
    for s in settings:
        if not SAFE_NAME.match(s.name):
            raise UserError(f"point {s.name!r}", "the run name must be letters, digits and . _ = + -",
                            "set run.label to such a name")
        problem = check(s)
        if problem:
            raise UserError(f"point {s.name}", problem, "export this point for another engine, or drop it")


def render_point(engine: str, s: PointSettings, sweep_name: str) -> tuple[str, str, str | None, str | None]:
    """(script text, target description, log path in the script, import line) of one point (no log nor import for
    batchscale, whose run directory is the result)."""
    if engine == "batchscale":
        return native.render_native_script(s, sweep_name), native.TARGET, None, None
    if engine == "verl":
        project = "batchscale-" + re.sub(r"[^A-Za-z0-9._-]", "_", Path(sweep_name).stem)  # a plain Hydra value
        return (render_verl_script(s, sweep_name, project), VERL_TARGET,
                VERL_LOG_PATH, render_import_line("verl", VERL_LOG_PATH, s))
    log = f"$RUN_DIR/tensorboard/{s.name}"
    return (render_openrlhf_script(s, sweep_name, engine), OPENRLHF_TARGETS[engine], log,
            render_import_line("tensorboard", log, s))


def render_jobs(launch: Launch, settings: list[PointSettings], sweep_name: str) -> dict[str, str]:
    """The launcher's files: a SkyPilot task per point, or the one Slurm array script."""
    if launch.launcher == "slurm":
        gpu_type, gpus = parse_resources("slurm", launch.accelerators)
        return {slurm.SCRIPT_NAME: slurm.render_sbatch(settings, launch.engine, sweep_name, launch.num_nodes,
                                                       gpu_type, gpus, list(launch.inputs))}
    if launch.launcher == "skypilot":
        return {job_file(launch, s): skypilot.render_skypilot_task(
            s, launch.engine, sweep_name, launch.accelerators, launch.num_nodes, list(launch.inputs),
            batchscale_requirement(), launch.output_bucket) for s in settings}
    return {}


def job_file(launch: Launch, s: PointSettings) -> str | None:
    return f"{s.name}.sky.yaml" if launch.launcher == "skypilot" else None


def batchscale_requirement() -> str:
    """What the SkyPilot setup pip-installs for batchscale by default: this release (BATCHSCALE_PIP overrides it)."""
    try:
        return f"batchscale=={metadata.version('batchscale')}"
    except metadata.PackageNotFoundError:
        return "batchscale"


def export_sweep(fmt: str, sweep_file: Path, out: Path, overrides: list[str] = (), overwrite: bool = False,
                 launch: Launch | None = None) -> dict:
    """Write DIR/<name>.sh per point (and the launcher's job files), README.md and sweep.json; returns the manifest
    (sweep.json) plus `out`."""
    from batchscale.sweep.spec import load_sweep_spec

    launch = launch or resolve_launch(fmt)
    out = Path(out)
    inputs = {"SWEEP_FILE": Path(sweep_file)}  # --overwrite never deletes the sweep file being exported
    check_export_dir(out, overwrite, inputs)
    sweep_name = Path(sweep_file).name
    sweep_points = load_sweep_spec(Path(sweep_file), list(overrides))
    settings = [derive_settings(p) for p in sweep_points]
    check_points(launch.engine, settings)
    files, points, target = {}, [], ""
    for point, s in zip(sweep_points, settings):
        script, target, log, import_line = render_point(launch.engine, s, sweep_name)
        files[f"{s.name}.sh"] = script
        if launch.engine == "batchscale":
            files[f"configs/{s.name}.toml"] = native.render_config(s, point.config_data, sweep_name)
        points.append({
            "name": s.name, "script": f"{s.name}.sh", "label": s.label, "seed": s.seed, "algorithm": s.algorithm,
            "prompts_per_step": s.prompts_per_step, "samples_per_prompt": s.samples_per_prompt,
            "samples_per_step": s.samples_per_step, "samples_per_update": s.samples_per_update,
            "ppo_epochs": s.ppo_epochs, "ppo_mini_batches": s.ppo_mini_batches, "lr": s.lr, "lr_rule": s.lr_rule,
            "critic_lr": s.critic_lr, "num_steps": s.num_steps, "budget_samples": s.budget_samples,
            "log": log, "run_dir": f"runs/{s.name}", "import": import_line, JOB_KEY: job_file(launch, s),
        })
    files.update(render_jobs(launch, settings, sweep_name))
    manifest = {"format": fmt, "engine": launch.engine, "launcher": launch.launcher, "target": target,
                "sweep_file": str(Path(sweep_file).absolute()), "overrides": list(overrides),
                "inputs": list(launch.inputs), "resources": resources_of(launch), "points": points}
    files["README.md"] = render_readme(manifest, sweep_name)
    files[MANIFEST] = render_manifest(manifest)
    executable = {f"{s.name}.sh" for s in settings} | ({slurm.SCRIPT_NAME} if launch.launcher == "slurm" else set())
    written = write_export_dir(out, files, executable, overwrite, inputs)
    return {"out": str(written), **manifest}


def resources_of(launch: Launch) -> dict | None:
    if launch.launcher is None:
        return None
    return {"accelerators": launch.accelerators, "num_nodes": launch.num_nodes, "output_bucket": launch.output_bucket}
