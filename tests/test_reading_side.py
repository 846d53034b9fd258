"""The reading side stays light and agrees with itself: analyze, plan, report, import and export never load the
training stack; --help loads neither torch nor matplotlib; one damaged run reads the same through every consumer;
the batch facts a run.json records follow the config."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from report_fixtures import make_timed_sweep, write_generation_profile, write_training_profile
from test_export import write_sweep
from test_ingest_verl import write_verl_log

from batchscale.analysis.analyze import analyze, compute_analysis
from batchscale.config import load_config
from batchscale.errors import DataWarning, UserError
from batchscale.plan.sweep_inputs import measure_sweep_throughput
from batchscale.report.inputs import read_machine
from batchscale.rundir import read_run
from batchscale.sweep.runner import read_summary

HEAVY = ("torch", "transformers")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600)


def test_reading_commands_never_import_the_training_stack(tmp_path):
    sweep = make_timed_sweep(tmp_path / "sweep")
    write_generation_profile(sweep / "profiles" / "generation.json")
    write_training_profile(sweep / "profiles" / "training.json")
    log = write_verl_log(tmp_path / "verl.jsonl")
    sweep_file = write_sweep(tmp_path)
    proc = run_python(f"""
        import sys
        from batchscale.cli import main
        commands = [
            ["analyze", {str(sweep)!r}, "--json"],
            ["plan", {str(sweep)!r}, "--json"],
            ["plan", "--predict", {str(sweep / "runs" / "p8_g8_sqrt__s0")!r}, "--generation-profile",
             {str(sweep / "profiles" / "generation.json")!r}, "--training-profile",
             {str(sweep / "profiles" / "training.json")!r}, "--json"],
            ["report", {str(sweep)!r}, "--json"],
            ["import", "verl", {str(log)!r}, "--out", {str(tmp_path / "imported")!r}, "--prompts-per-step", "4",
             "--samples-per-prompt", "2"],
            ["export", "verl", {str(sweep_file)!r}, "--out", {str(tmp_path / "exported")!r}],
        ]
        for argv in commands:
            assert main(argv) == 0, argv
        loaded = [m for m in {HEAVY!r} if m in sys.modules]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("argv", [["--help"], ["plan", "--help"]])
def test_help_loads_neither_torch_nor_matplotlib(argv):
    proc = run_python(f"""
        import sys
        from batchscale.cli import main
        assert main({argv!r}) == 0
        loaded = [m for m in ("torch", "transformers", "matplotlib") if m in sys.modules]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture()
def damaged_sweep(tmp_path):
    sweep = make_timed_sweep(tmp_path / "sweep")
    runs = sorted((sweep / "runs").iterdir())
    with open(runs[0] / "metrics.jsonl", "a") as f:
        f.write('{"kind": "eval", "step": 99, "sam')  # a crashed run's torn last line
    (runs[1] / "summary.json").unlink()  # an unfinished run
    return sweep, runs


def test_one_policy_for_a_truncated_line_and_an_unfinished_run(damaged_sweep):
    sweep, runs = damaged_sweep
    with pytest.warns(DataWarning, match="truncated last line"):
        direct = read_run(runs[0])
    with pytest.warns(DataWarning, match="truncated last line"):  # the analysis
        _, details = compute_analysis(sweep, None, None, 1)
    assert len(details["labels"][direct.label]["n_star_per_seed"]) == 2
    with pytest.warns(DataWarning, match="truncated last line"):  # the plan's throughput
        throughput = measure_sweep_throughput(sweep)
    assert sum(len(v) for v in throughput.values()) == len(runs)
    with pytest.warns(DataWarning, match="truncated last line"):
        assert direct.summary == read_run(runs[0]).summary
    machine, total, finished = read_machine(sweep)  # the report: the unfinished run has no summary
    assert (total, finished) == (len(runs), len(runs) - 1)
    assert read_summary(sweep, runs[2].name)["finished"] is True  # the sweep
    assert read_run(runs[1]).summary is None and not read_run(runs[1]).finished


def test_one_policy_for_a_corrupt_middle_line(damaged_sweep):
    sweep, runs = damaged_sweep
    lines = (runs[2] / "metrics.jsonl").read_text().splitlines()
    lines[3] = lines[3][:-5]
    (runs[2] / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    consumers = [lambda: analyze(sweep), lambda: measure_sweep_throughput(sweep), lambda: read_machine(sweep),
                 lambda: read_summary(sweep, runs[2].name)]
    for consume in consumers:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataWarning)
            with pytest.raises(UserError, match=f"{runs[2].name}/metrics.jsonl line 4: is not valid JSON"):
                consume()


def test_run_json_records_the_updates_of_a_ppo_step(tmp_path):
    from batchscale.config import derive_plan, run_descriptor

    cfg = load_config(None, ["algorithm.name=ppo", "batch.prompts_per_step=16", "batch.samples_per_prompt=2",
                             "batch.micro_batch_size=8", "algorithm.ppo_epochs=2", "algorithm.ppo_mini_batches=2",
                             "rollout.max_concurrency=24"])
    descriptor = run_descriptor(cfg, derive_plan(cfg))
    assert descriptor.updates_per_step == 4 and descriptor.samples_per_update == 16 * 2 // 2
    assert descriptor.generation_batch == 32 and descriptor.max_concurrency == 24
    assert descriptor.rollout_mode == "sync" and descriptor.schema_version == 2
    single_cfg = load_config(None, [])
    single = run_descriptor(single_cfg, derive_plan(single_cfg))
    assert single.updates_per_step == 1 and single.samples_per_update == single.samples_per_step == 128
    json.dumps(descriptor.to_json(), allow_nan=False)


def test_an_import_reads_the_updates_from_verls_config(tmp_path):
    from batchscale.ingest.importer import import_log

    (tmp_path / "run").mkdir()
    log = write_verl_log(tmp_path / "run" / "verl.jsonl")
    (tmp_path / "run" / "config.yaml").write_text(textwrap.dedent("""
        data: {train_batch_size: 8}
        actor_rollout_ref:
          rollout: {n: 4}
          actor: {ppo_mini_batch_size: 2, ppo_epochs: 3, optim: {lr: 1.0e-6}}
    """))
    run = read_run(Path(import_log("verl", log, tmp_path / "imported")["run_dir"]))
    assert (run.descriptor.samples_per_step, run.descriptor.samples_per_update) == (32, 8)
    assert run.descriptor.updates_per_step == 3 * 4
