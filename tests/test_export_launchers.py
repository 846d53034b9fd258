"""`batchscale export skypilot|slurm --engine ...` and the batchscale engine: the job files run (with stand-ins for
python3, batchscale and the cluster's commands) and carry the sweep's points, their resources and the import line.

SkyPilot's own task loader (`sky.Task.from_yaml_config`, which checks the YAML against `sky.utils.schemas` and parses
the resources) validates every task YAML where skypilot is installed (an optional test dependency: `pip install
skypilot==0.14.1`; the test skips naming that line without it). Each #SBATCH option name is checked against the long
options sbatch documents (tests/engine_options/slurm-26.05.3-sbatch-options.txt, from sbatch.1 at slurm-26-05-3-1).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from batchscale.cli import main
from batchscale.config import load_config
from batchscale.export.native import render_toml
from batchscale.sweep.spec import load_sweep_spec
from test_export import (ENV_INPUTS, FAKE_BATCHSCALE, FAKE_PYTHON, G, engine_options, flag_values, hydra_overrides,
                         write_sweep)

SKYPILOT = "skypilot==0.14.1"


def export(tmp_path: Path, fmt: str, engine: str, *flags: str, algorithm: str = "grpo") -> Path:
    out = tmp_path / f"export-{fmt}-{engine}-{len(flags)}"
    argv = ["export", fmt, str(write_sweep(tmp_path, algorithm)), "--out", str(out), "--engine", engine, *flags]
    assert main(argv) == 0
    return out


def manifest(out: Path) -> dict:
    return json.loads((out / "sweep.json").read_text())


def fake_bin(tmp_path: Path, extra: dict[str, str] = {}) -> Path:
    """python3 and batchscale stand-ins that record their argv (test_export's), plus any `extra` commands."""
    directory = tmp_path / "fakebin"
    directory.mkdir(exist_ok=True)
    for name, text in {"python3": FAKE_PYTHON, "batchscale": FAKE_BATCHSCALE, **extra}.items():
        (directory / name).write_text(text.format(python=sys.executable))
        (directory / name).chmod(0o755)
    return directory


def run_bash(text: str, cwd: Path, env: dict, tmp_path: Path, extra: dict[str, str] = {}) -> tuple[Path, str]:
    """Run `text` with bash in `cwd` with the stand-ins first on PATH; returns (capture directory, stderr)."""
    capture = tmp_path / f"capture-{len(list(tmp_path.glob('capture-*')))}"
    capture.mkdir()
    path = f"{fake_bin(tmp_path, extra)}:{os.environ['PATH']}"
    full = {**os.environ, **ENV_INPUTS, "CAPTURE_DIR": str(capture), "PATH": path, **env}
    proc = subprocess.run(["bash", "-c", text], cwd=cwd, env=full, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return capture, proc.stderr


def captured(capture: Path, prefix: str) -> list[list[str]]:
    files = sorted(capture.glob(f"{prefix}-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    return [json.loads(p.read_text()) for p in files]


def required_inputs(script: str) -> list[str]:
    """The variables a launch script refuses to start without (its `for var in ...; do` check)."""
    match = re.search(r"^for var in (.*); do$", script, re.M)
    return match.group(1).split() if match else []


# --- SkyPilot ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ["verl", "openrlhf", "batchscale"])
def test_skypilot_task_per_point_around_its_script(tmp_path, engine):
    flags = ("--accelerators", "A100-80GB:4") if engine != "batchscale" else ()
    out = export(tmp_path, "skypilot", engine, *flags)
    document = manifest(out)
    assert (document["format"], document["engine"], document["launcher"]) == ("skypilot", engine, "skypilot")
    for point in document["points"]:
        task = yaml.safe_load((out / point["job"]).read_text())
        script = (out / point["script"]).read_text()
        assert task["name"] == point["name"] and task["workdir"] == "." and task["num_nodes"] == 1
        assert task["resources"] == {"accelerators": "A100-80GB:4" if engine != "batchscale" else "H100:1"}
        required = required_inputs(script)
        assert [k for k, v in task["envs"].items() if v is None] == required == document["inputs"]
        assert task["envs"]["BATCHSCALE_PIP"].startswith("batchscale")
        assert task["run"].rstrip().splitlines()[-1] == f"bash {point['script']}"
        assert ("ENGINE_PIP" in task["envs"]) == (engine != "batchscale")
        assert subprocess.run(["bash", "-n", "-c", task["run"] + task["setup"]]).returncode == 0


def run_skypilot(out: Path, point: dict, tmp_path: Path, nodes: int, rank: int) -> tuple[Path, dict]:
    """The task's run section as SkyPilot runs it on one node: in the synced workdir, with SkyPilot's variables and
    its envs; ~/sky_templates/ray/start_cluster is a stand-in that records that it ran."""
    task = yaml.safe_load((out / point["job"]).read_text())
    workdir = tmp_path / f"sky_workdir-{rank}-{len(list(tmp_path.glob('sky_workdir-*')))}"
    shutil.copytree(out, workdir)
    home = tmp_path / "home"
    (home / "sky_templates" / "ray").mkdir(parents=True, exist_ok=True)
    starter = home / "sky_templates" / "ray" / "start_cluster"
    starter.write_text('#!/usr/bin/env bash\necho "$SKYPILOT_NODE_RANK" >> "$CAPTURE_DIR/../ray-started"\n')
    starter.chmod(0o755)
    envs = {k: v for k, v in task["envs"].items() if v is not None}
    sky = {"HOME": str(home), "SKYPILOT_NUM_NODES": str(nodes), "SKYPILOT_NODE_RANK": str(rank),
           "SKYPILOT_NUM_GPUS_PER_NODE": "4", "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2"}
    capture, _ = run_bash(task["run"], workdir, {**envs, **sky}, tmp_path)
    return capture, {"workdir": workdir, "task": task}


def test_skypilot_run_gives_the_engine_skypilots_nodes_and_gpus_and_imports_back(tmp_path):
    out = export(tmp_path, "skypilot", "verl")
    point = manifest(out)["points"][0]
    capture, where = run_skypilot(out, point, tmp_path, nodes=1, rank=0)
    engine, imported = captured(capture, "engine"), captured(capture, "import")
    o = hydra_overrides(engine[0])
    assert (o["trainer.n_gpus_per_node"], o["trainer.nnodes"]) == ("4", "1")  # SkyPilot's, not the script's 8
    assert int(o["data.train_batch_size"]) == point["prompts_per_step"] and int(o["actor_rollout_ref.rollout.n"]) == G
    workdir = where["workdir"]
    assert imported[0][:5] == ["import", "verl", str(workdir / "work" / point["name"] / "verl_log.jsonl"), "--out",
                               str(workdir / "runs" / point["name"])]
    assert not (tmp_path / "ray-started").exists()  # one node: the engine starts its own Ray


def test_skypilot_several_nodes_start_one_ray_cluster_and_run_on_the_head(tmp_path):
    out = export(tmp_path, "skypilot", "openrlhf", "--num-nodes", "2")
    point = manifest(out)["points"][0]
    assert yaml.safe_load((out / point["job"]).read_text())["num_nodes"] == 2
    worker, _ = run_skypilot(out, point, tmp_path, nodes=2, rank=1)
    assert captured(worker, "engine") == []  # a worker joins the cluster and leaves the run to the head
    head, _ = run_skypilot(out, point, tmp_path, nodes=2, rank=0)
    engine = captured(head, "engine")[0]
    flags = flag_values(engine, "openrlhf.cli.train_ppo_ray")
    assert flags["--actor.num_nodes"] == ["2"] and flags["--actor.num_gpus_per_node"] == ["4"]
    assert (tmp_path / "ray-started").read_text().split() == ["1", "0"]


def test_skypilot_output_bucket_receives_the_run(tmp_path):
    out = export(tmp_path, "skypilot", "verl", "--output-bucket", "s3://my-bucket/sweeps/grpo")
    task = yaml.safe_load((out / manifest(out)["points"][0]["job"]).read_text())
    assert task["file_mounts"] == {"/batchscale-output": {"source": "s3://my-bucket/sweeps/grpo", "mode": "MOUNT"}}
    assert "cp -r runs/" in task["run"] and manifest(out)["resources"]["output_bucket"] == "s3://my-bucket/sweeps/grpo"


@pytest.mark.slow
def test_every_task_passes_skypilots_own_task_loader(tmp_path):
    try:
        import sky
    except ImportError:
        pytest.skip(f"skypilot is not installed: `pip install {SKYPILOT}` (or '.[skypilot]') runs this check")
    exports = [export(tmp_path, "skypilot", "verl", "--num-nodes", "2"),
               export(tmp_path, "skypilot", "openrlhf", "--output-bucket", "gs://bucket/path"),
               export(tmp_path, "skypilot", "batchscale")]
    for out in exports:
        document = manifest(out)
        overrides = [(name, "/data/x") for name in document["inputs"]]
        for point in document["points"]:
            config = yaml.safe_load((out / point["job"]).read_text())
            task = sky.Task.from_yaml_config(copy.deepcopy(config), env_overrides=overrides)
            assert task.num_nodes == config["num_nodes"]
            name, count = config["resources"]["accelerators"].split(":")
            assert [r.accelerators for r in task.resources] == [{name: int(count)}]
            if document["inputs"]:  # the required inputs are null: SkyPilot will not launch without them
                with pytest.raises(ValueError, match=document["inputs"][0]):
                    sky.Task.from_yaml_config(copy.deepcopy(config))
        broken = copy.deepcopy(config)
        broken["resources"]["accelerator"] = broken["resources"].pop("accelerators")  # a misspelt field is refused
        with pytest.raises(Exception, match="accelerator"):
            sky.Task.from_yaml_config(broken, env_overrides=overrides)


# --- Slurm ---------------------------------------------------------------------------------------------------------

def sbatch_options(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^#SBATCH --([a-z-]+)=(.*)$", text, re.M)


@pytest.mark.parametrize("engine", ["verl", "openrlhf-legacy", "batchscale"])
def test_slurm_array_script_is_valid_bash_with_documented_directives(tmp_path, engine):
    out = export(tmp_path, "slurm", engine)
    text = (out / "sweep.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(out / "sweep.sbatch")]).returncode == 0
    assert os.access(out / "sweep.sbatch", os.X_OK)
    options = dict(sbatch_options(text))
    documented = engine_options("slurm-26.05.3-sbatch-options.txt")
    assert set(options) <= documented, set(options) - documented
    points = manifest(out)["points"]
    assert options["array"] == f"0-{len(points) - 1}" and options["nodes"] == "1"
    assert options["gpus-per-node"] == ("1" if engine == "batchscale" else "8")
    header = text.split("\nset -euo pipefail")[0].splitlines()
    assert header[0] == "#!/usr/bin/env bash" and all(line.startswith("#") for line in header)  # sbatch reads them all


def test_slurm_task_runs_its_point_with_slurms_nodes(tmp_path):
    out = export(tmp_path, "slurm", "verl", "--accelerators", "h100:4")
    assert dict(sbatch_options((out / "sweep.sbatch").read_text()))["gpus-per-node"] == "h100:4"
    points = manifest(out)["points"]
    elsewhere = tmp_path / "spool"  # sbatch runs a copy of the script from its spool directory
    elsewhere.mkdir()
    shutil.copy(out / "sweep.sbatch", elsewhere / "slurm_script")
    slurm = {"SLURM_ARRAY_TASK_ID": "2", "SLURM_SUBMIT_DIR": str(out), "SLURM_JOB_NUM_NODES": "1"}
    capture, _ = run_bash(f"bash {elsewhere / 'slurm_script'}", elsewhere, slurm, tmp_path)
    o = hydra_overrides(captured(capture, "engine")[0])
    assert int(o["data.train_batch_size"]) == points[2]["prompts_per_step"] and int(o["data.seed"]) == points[2]["seed"]
    assert (o["trainer.n_gpus_per_node"], o["trainer.nnodes"]) == ("4", "1")
    assert captured(capture, "import")[0][4] == str(out / "runs" / points[2]["name"])


FAKE_SLURM = {
    "scontrol": "#!/usr/bin/env bash\nprintf 'node-a\\nnode-b\\n'\n",
    "srun": ('#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> "$CAPTURE_DIR/../srun.log"\n'
             'if [[ "$*" == *"hostname --ip-address"* ]]; then echo "10.1.2.3 fe80::1"; exit 0; fi\n'
             'while [[ "$1" == -* ]]; do if [[ "$1" == -w ]]; then shift; fi; shift; done\n'
             'if [[ "$1" == ray ]]; then exit 0; fi\n'
             'RAY_ADDRESS_SEEN="$RAY_ADDRESS" exec "$@"\n'),
    "ray": "#!/usr/bin/env bash\nprintf ' 1 node_aaa\\n 1 node_bbb\\n'\n",
}


def test_slurm_several_nodes_start_ray_over_the_job_and_run_on_the_head(tmp_path):
    out = export(tmp_path, "slurm", "verl", "--num-nodes", "2")
    slurm = {"SLURM_ARRAY_TASK_ID": "0", "SLURM_SUBMIT_DIR": str(out), "SLURM_JOB_NUM_NODES": "2",
             "SLURM_JOB_NODELIST": "node-[a-b]"}
    capture, _ = run_bash(f"bash {out / 'sweep.sbatch'}", out, slurm, tmp_path, FAKE_SLURM)
    o = hydra_overrides(captured(capture, "engine")[0])
    assert (o["trainer.nnodes"], o["trainer.n_gpus_per_node"]) == ("2", "8")
    srun = (tmp_path / "srun.log").read_text().splitlines()
    assert any("-w node-a ray start --head --node-ip-address=10.1.2.3 --port=6379" in line for line in srun)
    assert any("-w node-b ray start --address=10.1.2.3:6379" in line for line in srun)
    assert any(line.startswith("--overlap --nodes=1 --ntasks=1 -w node-a bash") for line in srun)


def test_slurm_script_refuses_outside_sbatch_and_away_from_the_export(tmp_path):
    out = export(tmp_path, "slurm", "verl")
    proc = subprocess.run(["bash", str(out / "sweep.sbatch")], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")})
    assert proc.returncode == 2 and "submit this file with sbatch" in proc.stderr
    proc = subprocess.run(["bash", str(out / "sweep.sbatch")], capture_output=True, text=True,
                          env={**os.environ, "SLURM_ARRAY_TASK_ID": "0", "SLURM_SUBMIT_DIR": str(tmp_path)})
    assert proc.returncode == 2 and "submit from the export directory" in proc.stderr


# --- batchscale as the engine --------------------------------------------------------------------------------------

def test_batchscale_engine_configs_are_the_points_own(tmp_path):
    sweep = write_sweep(tmp_path)
    out = export(tmp_path, "slurm", "batchscale")
    points = {p.name: p for p in load_sweep_spec(sweep, [])}
    assert sorted(points) == sorted(p["name"] for p in manifest(out)["points"])
    for name, point in points.items():
        config = load_config(out / "configs" / f"{name}.toml")
        assert config.model_dump(mode="json") == point.config.model_dump(mode="json")


def test_batchscale_engine_script_trains_resumes_or_leaves_a_finished_run(tmp_path):
    out = export(tmp_path, "skypilot", "batchscale")
    point = manifest(out)["points"][0]
    script, run_dir = out / point["script"], out / "runs" / point["name"]
    capture, _ = run_bash(f"bash {script} --set run.device=cuda", tmp_path, {}, tmp_path)
    assert captured(capture, "import") == [["train", str(out / "configs" / f"{point['name']}.toml"), "--out",
                                            str(run_dir), "--set", "run.device=cuda"]]
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text("{}")
    (run_dir / "metrics.jsonl").write_text("")
    capture, _ = run_bash(f"bash {script}", tmp_path, {}, tmp_path)
    assert captured(capture, "import") == [["train", "--resume", str(run_dir)]]
    (run_dir / "summary.json").write_text("{}")
    capture, _ = run_bash(f"bash {script}", tmp_path, {}, tmp_path)
    assert captured(capture, "import") == []


def test_toml_writer_round_trips_hostile_values():
    data = {"a": "quote \" backslash \\ newline \n tab \t bell \x07 unicode \u00e9\u4e2d", "b": 1e-300, "c": -0.0,
            "d": [1.5, 2.0], "e": True, "f": None, "g": {"h": {"key with space": 3, "ok": float("inf")}},
            "i": 2**62, "j": "]\n[table]\nx = 1"}
    back = tomllib.loads(render_toml(data))
    assert back == {k: v for k, v in data.items() if v is not None}


# --- refusals -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,field", [
    (["skypilot", "--engine", "nemo"], "--engine"),
    (["skypilot", "--accelerators", "H100:x"], "--accelerators"),
    (["skypilot", "--accelerators", "8"], "--accelerators"),  # SkyPilot needs the accelerator's name
    (["slurm", "--accelerators", "h100:8;rm -rf ~"], "--accelerators"),
    (["skypilot", "--engine", "batchscale", "--num-nodes", "2"], "--num-nodes"),
    (["slurm", "--num-nodes", "0"], "--num-nodes"),
    (["slurm", "--output-bucket", "s3://b"], "--output-bucket"),
    (["skypilot", "--output-bucket", "s3://b' ; echo"], "--output-bucket"),
    (["verl", "--engine", "openrlhf"], "--engine"),
    (["openrlhf", "--num-nodes", "2"], "--num-nodes"),
])
def test_bad_launcher_flags_exit_2_before_writing(tmp_path, capsys, argv, field):
    out = tmp_path / "out"
    sweep = str(write_sweep(tmp_path))
    assert main(["export", argv[0], sweep, "--out", str(out), *argv[1:]]) == 2
    assert f"error: {field}" in capsys.readouterr().err and not out.exists()


def test_a_launcher_export_is_replaced_only_when_it_holds_nothing_else(tmp_path, capsys):
    out = export(tmp_path, "skypilot", "batchscale")
    sweep = str(write_sweep(tmp_path))
    assert main(["export", "slurm", sweep, "--out", str(out), "--engine", "verl", "--overwrite"]) == 0
    assert manifest(out)["launcher"] == "slurm" and not (out / "configs").exists()
    (out / "notes.txt").write_text("mine")
    assert main(["export", "skypilot", sweep, "--out", str(out), "--overwrite"]) == 2
    assert "notes.txt" in capsys.readouterr().err and (out / "sweep.sbatch").exists()


def test_sweep_file_name_is_inert_in_every_job_file(tmp_path):
    odd = tmp_path / "odd $(touch pwned) `x`\n.toml"
    odd.write_text(write_sweep(tmp_path).read_text())
    for fmt in ("skypilot", "slurm"):
        out = tmp_path / f"odd-{fmt}"
        assert main(["export", fmt, str(odd), "--out", str(out)]) == 0
        for path in out.iterdir():
            if path.suffix in (".yaml", ".sbatch"):
                lines = path.read_text().splitlines()
                assert all(line.startswith("#") for line in lines if "touch pwned" in line)  # comments alone
                assert not any(line.startswith(".toml") for line in lines)  # the newline stayed escaped
                assert path.suffix != ".yaml" or yaml.safe_load(path.read_text())["workdir"] == "."
        if fmt == "slurm":
            assert re.match(r"^batchscale-[A-Za-z0-9._-]+$", dict(sbatch_options(
                (out / "sweep.sbatch").read_text()))["job-name"])
