"""SkyPilot task YAML for one sweep point: the point's launch script (`<name>.sh`, any engine) run on the nodes.

Fields as SkyPilot's task schema names them (`sky.utils.schemas.get_task_schema` and `get_resources_schema`, checked
with `sky.Task.from_yaml_config` against skypilot 0.14.1 in tests/test_export_launchers.py):
- `workdir: .`: the export directory is synced to ~/sky_workdir on every node, scripts and configs with it, so the
  script's SWEEP_DIR is ~/sky_workdir and its import writes ~/sky_workdir/runs/<name>;
- `resources.accelerators` (NAME:COUNT per node) and `num_nodes` from --accelerators / --num-nodes;
- `envs`: the script's required inputs as null, which SkyPilot refuses to launch until each is given (`--env
  MODEL_PATH=...`), and the packages the setup installs (overridable the same way);
- `setup`: installs the engine (ENGINE_PIP; empty when the image has it) and batchscale (BATCHSCALE_PIP), whose
  absence only skips the script's import line, which is then run where batchscale is;
- `run`: NNODES and N_GPUS_PER_NODE from SkyPilot's SKYPILOT_NUM_NODES / SKYPILOT_NUM_GPUS_PER_NODE; on several nodes a
  Ray cluster over them first (`~/sky_templates/ray/start_cluster`, which SkyPilot installs on every node: the head on
  Ray's default port 6379, SkyPilot's own Ray keeps 6380), then the head runs the script with RAY_ADDRESS set, as
  SkyPilot's verl example does, while the workers' part ends once they have joined;
- with --output-bucket, `file_mounts` mounts that bucket at /batchscale-output (MOUNT) and the run copies
  runs/<name> there, so a managed job's result outlives its cluster.
Every value that came from input is either checked against a strict pattern (accelerators, the bucket) or a point
name already restricted to letters, digits and . _ = + -, and the YAML is written by PyYAML's emitter, never by
pasting text.
"""

from __future__ import annotations

import re
import shlex

import yaml

from batchscale.errors import UserError
from batchscale.export.formats import RAY_ENGINES
from batchscale.export.settings import PointSettings
from batchscale.export.shell import comment_text

ACCELERATORS = re.compile(r"^([A-Za-z][A-Za-z0-9_.-]*)(?::([1-9][0-9]{0,3}))?$")  # NAME or NAME:COUNT
BUCKET = re.compile(r"^[a-z][a-z0-9+.-]*://[A-Za-z0-9._~/%:@+=-]+$")
OUTPUT_MOUNT = "/batchscale-output"
RAY_PORT = 6379  # start_cluster's default head port (SkyPilot's own Ray listens on 6380)
ENGINE_PIP = {"verl": "verl[vllm]", "openrlhf": "openrlhf[vllm]", "openrlhf-legacy": "openrlhf[vllm]==0.10.1",
              "batchscale": ""}


def parse_accelerators(text: str, flag: str = "--accelerators") -> tuple[str, int]:
    """'H100:8' -> ('H100', 8); 'L4' -> ('L4', 1); anything else a UserError."""
    match = ACCELERATORS.match(text)
    if not match:
        raise UserError(flag, f"{text!r} is not NAME or NAME:COUNT (GPUs per node)", "write e.g. H100:8 or A100-80GB:4")
    return match.group(1), int(match.group(2) or 1)


def check_bucket(uri: str | None) -> None:
    if uri is not None and not BUCKET.match(uri):
        raise UserError("--output-bucket", f"{uri!r} is not a bucket URI", "write e.g. s3://my-bucket/sweeps/grpo")


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (setup, run) as literal blocks, so the YAML reads as the shell it holds."""


def _represent_str(dumper: yaml.SafeDumper, text: str):
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_BlockDumper.add_representer(str, _represent_str)


def render_setup(engine: str) -> str:
    lines = ["set -eo pipefail"]
    if engine in RAY_ENGINES:
        lines += ["# The engine's packages (empty ENGINE_PIP: the image has them) and batchscale, for the import line.",
                  'if [ -n "${ENGINE_PIP:-}" ]; then python3 -m pip install $ENGINE_PIP; fi  # several words allowed',
                  'python3 -m pip install "$BATCHSCALE_PIP" || echo "note: batchscale not installed ($BATCHSCALE_PIP);'
                  ' the point\'s import line will be skipped"']
    else:
        lines.append('python3 -m pip install "$BATCHSCALE_PIP"  # batchscale is the engine')
    return "\n".join(lines) + "\n"


def render_run(s: PointSettings, engine: str, bucket: str | None) -> str:
    script = shlex.quote(f"{s.name}.sh")
    lines = ["set -eo pipefail",
             'export NNODES="$SKYPILOT_NUM_NODES" N_GPUS_PER_NODE="$SKYPILOT_NUM_GPUS_PER_NODE"']
    if engine in RAY_ENGINES:
        lines += ['if [ "$SKYPILOT_NUM_NODES" -gt 1 ]; then',
                  "  ~/sky_templates/ray/start_cluster  # head on rank 0, the others join it",
                  '  if [ "$SKYPILOT_NODE_RANK" != "0" ]; then exit 0; fi  # a worker: it serves the head\'s Ray',
                  f"  export RAY_ADDRESS=127.0.0.1:{RAY_PORT}",
                  "fi"]
    lines.append(f"bash {script}")
    if bucket is not None:
        lines += [f"mkdir -p {OUTPUT_MOUNT}/runs",
                  f"if [ -d {shlex.quote('runs/' + s.name)} ]; then cp -r {shlex.quote('runs/' + s.name)} "
                  f"{OUTPUT_MOUNT}/runs/; fi"]
    return "\n".join(lines) + "\n"


def build_task(s: PointSettings, engine: str, accelerators: str, num_nodes: int, required: list[str],
               batchscale_pip: str, bucket: str | None) -> dict:
    envs = {name: None for name in required}
    envs["BATCHSCALE_PIP"] = batchscale_pip
    if engine in RAY_ENGINES:
        envs["ENGINE_PIP"] = ENGINE_PIP[engine]
    task = {"name": s.name, "workdir": ".", "num_nodes": num_nodes, "resources": {"accelerators": accelerators},
            "envs": envs}
    if bucket is not None:
        task["file_mounts"] = {OUTPUT_MOUNT: {"source": bucket, "mode": "MOUNT"}}
    task["setup"] = render_setup(engine)
    task["run"] = render_run(s, engine, bucket)
    return task


def render_skypilot_task(s: PointSettings, engine: str, sweep_file: str, accelerators: str, num_nodes: int,
                         required: list[str], batchscale_pip: str, bucket: str | None = None) -> str:
    """The task YAML of one point, with a comment header that says how to launch it and bring its run back."""
    task = build_task(s, engine, accelerators, num_nodes, required, batchscale_pip, bucket)
    env_flags = " ".join(f"--env {name}=..." for name in required)
    back = (f"mounted bucket: {bucket}/runs/{s.name}" if bucket is not None else
            f"rsync -Pavz CLUSTER:~/sky_workdir/runs/{s.name} runs/")
    header = [
        f"# SkyPilot task for sweep point {s.name} (label {comment_text(s.label)}), engine {engine}, exported by "
        f"batchscale from {comment_text(sweep_file)}.",
        "# From this directory (it is the workdir, synced to every node):",
        f"#   sky launch -c CLUSTER {s.name}.sky.yaml {env_flags}".rstrip(),
        f"#   (or sky jobs launch -n {s.name} ..., a managed job; pass --output-bucket at export to keep its run)",
        f"# The run comes back with: {comment_text(back)}; then `batchscale analyze` this directory.",
    ]
    body = yaml.dump(task, Dumper=_BlockDumper, sort_keys=False, width=1000, allow_unicode=False)
    return "\n".join(header) + "\n" + body
