"""A Slurm array job for a whole sweep: `sbatch sweep.sbatch` runs each point's launch script (`<name>.sh`) as one
array task.

Why one array job rather than an sbatch script per point: the points of a sweep are independent runs asking for the
same resources, which is what a job array is; one submission queues them all, `--array=3` (on the sbatch command
line, which wins over the script's #SBATCH lines) reruns one point, `--array=0-11%2` caps how many run at once, and
`scancel JOBID` stops the sweep. The task index maps to a point through the POINTS list in the script, in the order of
sweep.json's points.

Resources: `--nodes` and `--gpus-per-node` (TYPE:COUNT, Slurm's own spelling) from --num-nodes / --accelerators;
partition, account and time limit vary by site and are given at submission (`sbatch --partition=... --time=...
sweep.sbatch`). Every #SBATCH name is one sbatch documents (tests/engine_options holds the list, from sbatch.1 at
slurm-26-05-3-1). On several nodes a Ray engine gets a Ray cluster first, as verl's examples/slurm/ray_on_slurm.slurm
starts one: the head with `srun -w HEAD ray start --head --block &`, each other node `ray start --address`, then the
point's script on the head (`srun --overlap`) with RAY_ADDRESS set. batchscale itself trains on one node.

The script must find the point scripts: sbatch runs a copy of it from Slurm's spool directory, so it looks in
EXPORT_DIR, by default the directory sbatch was called from (SLURM_SUBMIT_DIR), and stops with an error line when the
script is not there. Values from input reach the script either as point names (letters, digits and . _ = + -,
shell-quoted all the same) or checked against strict patterns (the accelerator type, the job name).
"""

from __future__ import annotations

import re
import shlex

from batchscale.errors import UserError
from batchscale.export.formats import RAY_ENGINES
from batchscale.export.settings import PointSettings
from batchscale.export.shell import comment_text

SCRIPT_NAME = "sweep.sbatch"
RAY_PORT = 6379
GPUS = re.compile(r"^(?:([A-Za-z][A-Za-z0-9_.-]*):)?([1-9][0-9]{0,3})$")  # [TYPE:]COUNT, sbatch's --gpus-per-node


def parse_gpus(text: str, flag: str = "--accelerators") -> tuple[str | None, int]:
    """'8' -> (None, 8); 'h100:8' -> ('h100', 8) (the type as the site's gres names it); else a UserError."""
    match = GPUS.match(text)
    if not match:
        raise UserError(flag, f"{text!r} is not COUNT or TYPE:COUNT (GPUs per node, for --gpus-per-node)",
                        "write e.g. 8 or h100:8")
    return match.group(1), int(match.group(2))


def job_name(sweep_file: str) -> str:
    """batchscale-<sweep file stem>, reduced to characters safe in an #SBATCH line."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", sweep_file.rsplit("/", 1)[-1].rsplit(".", 1)[0])[:64]
    return f"batchscale-{stem or 'sweep'}"


def sbatch_directives(points: int, num_nodes: int, gpu_type: str | None, gpus_per_node: int,
                      name: str) -> list[tuple]:
    """(option, value) of each #SBATCH line."""
    gpus = f"{gpu_type}:{gpus_per_node}" if gpu_type else gpus_per_node
    return [("job-name", name), ("array", f"0-{points - 1}"), ("nodes", num_nodes), ("ntasks-per-node", 1),
            ("gpus-per-node", gpus), ("output", "slurm-%x-%A_%a.out")]


def render_ray_cluster() -> list[str]:
    """Shell lines that start a Ray cluster over the job's nodes (several) and set RAY_ADDRESS and RUN_ON_HEAD."""
    return [
        'RUN_ON_HEAD=()',
        'if [[ "$SLURM_JOB_NUM_NODES" -gt 1 ]]; then  # one Ray cluster over the nodes, the point runs on the head',
        '  mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        '  HEAD_IP="$(srun --nodes=1 --ntasks=1 -w "${NODES[0]}" hostname --ip-address | awk \'{print $1}\')"',
        f'  srun --nodes=1 --ntasks=1 -w "${{NODES[0]}}" ray start --head --node-ip-address="$HEAD_IP" '
        f'--port={RAY_PORT} --num-gpus="$N_GPUS_PER_NODE" --block &',
        "  sleep 10",
        '  for node in "${NODES[@]:1}"; do',
        f'    srun --nodes=1 --ntasks=1 -w "$node" ray start --address="$HEAD_IP:{RAY_PORT}" '
        '--num-gpus="$N_GPUS_PER_NODE" --block &',
        "  done",
        f'  export RAY_ADDRESS="$HEAD_IP:{RAY_PORT}"',
        '  for _ in $(seq 60); do  # until every node has joined (ray status lists one "node_" line per node)',
        '    joined="$(ray status --address="$RAY_ADDRESS" 2>/dev/null | grep -c "node_" || true)"',
        '    if [[ "$joined" -ge "$SLURM_JOB_NUM_NODES" ]]; then break; fi',
        "    sleep 5",
        "  done",
        '  RUN_ON_HEAD=(srun --overlap --nodes=1 --ntasks=1 -w "${NODES[0]}")',
        "fi",
    ]


def render_sbatch(settings: list[PointSettings], engine: str, sweep_file: str, num_nodes: int,
                  gpu_type: str | None, gpus_per_node: int, inputs: list[str]) -> str:
    directives = sbatch_directives(len(settings), num_nodes, gpu_type, gpus_per_node, job_name(sweep_file))
    points = [f"  {shlex.quote(s.name)}  # {i}: P={s.prompts_per_step} G={s.samples_per_prompt} seed {s.seed}"
              for i, s in enumerate(settings)]
    lines = [
        "#!/usr/bin/env bash",
        *(f"#SBATCH --{option}={value}" for option, value in directives),
        f"# Slurm array job for the {len(settings)} points of {comment_text(sweep_file)} (engine {engine}), exported "
        "by batchscale: task i runs the launch script of POINTS[i].",
        "# Submit from this directory, with your site's options: sbatch --partition=P --time=HH:MM:SS "
        f"{SCRIPT_NAME}",
        f"#   one point again: sbatch --array=3 {SCRIPT_NAME}; at most 2 at once: sbatch --array=0-"
        f"{len(settings) - 1}%2 {SCRIPT_NAME}",
        *([f"# The scripts' required inputs come from the environment sbatch passes on: export {', '.join(inputs)} "
           "first."] if inputs else []),
        "set -euo pipefail",
        "",
        "POINTS=(",
        *points,
        ")",
        'EXPORT_DIR="${EXPORT_DIR:-${SLURM_SUBMIT_DIR:-$(pwd)}}"  # sbatch runs a copy of this file elsewhere',
        'if [[ -z "${SLURM_ARRAY_TASK_ID:-}" ]]; then',
        f'  echo "error: submit this file with sbatch (an array job, one task per point): sbatch {SCRIPT_NAME}" >&2',
        "  exit 2",
        "fi",
        'NAME="${POINTS[$SLURM_ARRAY_TASK_ID]}"',
        'SCRIPT="$EXPORT_DIR/$NAME.sh"',
        'if [[ ! -f "$SCRIPT" ]]; then',
        f'  echo "error: no $SCRIPT: submit from the export directory (cd DIR && sbatch {SCRIPT_NAME}) or set '
        'EXPORT_DIR" >&2',
        "  exit 2",
        "fi",
        f'export NNODES="$SLURM_JOB_NUM_NODES" N_GPUS_PER_NODE={gpus_per_node}',
    ]
    if engine in RAY_ENGINES:
        lines += render_ray_cluster()
        lines.append('${RUN_ON_HEAD[@]+"${RUN_ON_HEAD[@]}"} bash "$SCRIPT"  # (an empty array under set -u: bash 4.3)')
    else:
        lines.append('bash "$SCRIPT"')
    return "\n".join(lines) + "\n"
