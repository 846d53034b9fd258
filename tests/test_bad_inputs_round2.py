"""The catalogue of hostile inputs, round two (issue 30): what --overwrite may delete, one writer per run, config
values beyond their useful range. Same contract as tests/test_bad_inputs.py: one `error:` line, exit 2, no traceback,
nothing half-written under out/, and no input changed (its `snapshot` covers every file of the world, symlinks and
the marker files included)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from test_bad_inputs import assert_refused_cleanly, expand_args, run_config, write_sweep_file
from test_ingest_verl import write_verl_log

from batchscale.cli import main

BATCH = ["--prompts-per-step", "4", "--samples-per-prompt", "2"]


def project_folder(path: Path, *batchscale_names: str) -> Path:
    """A user's project folder holding some of the names batchscale writes among the user's own files."""
    (path / "src").mkdir(parents=True)
    (path / "src" / "main.py").write_text("print('mine')\n")
    (path / "NOTES.md").write_text("# my notes\n")
    for name in batchscale_names:
        (path / name).write_text('{"label": "mine", "seed": 0}\n')
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory, random_model_dir):
    from batchscale.analysis.synthetic import write_synthetic_run, write_synthetic_sweep
    from batchscale.rundir.ownership import MARKER_FILE, mark_directory

    w = tmp_path_factory.mktemp("hostile2")
    (w / "out").mkdir()
    (w / "base.toml").write_text(run_config(random_model_dir))
    write_sweep_file(w / "sweep_ok.toml", '[grid]\n"batch.prompts_per_step" = [2]\n')
    write_verl_log(w / "verl.jsonl")
    # a finished batchscale run, and one whose own metrics.jsonl is the log being imported
    write_synthetic_run(w / "run", "p4_g8_sqrt", 0, 4, 8, "sqrt", 1e-6)
    write_synthetic_run(w / "run_log_inside", "p4_g8_sqrt", 0, 4, 8, "sqrt", 1e-6)
    write_synthetic_sweep(w / "sweep", prompts_per_step=(4, 8), seeds=(0, 1))
    # users' folders holding names batchscale writes
    project_folder(w / "project_run", "run.json", "metrics.jsonl")
    project_folder(w / "project_metrics", "metrics.jsonl")
    project_folder(w / "project_sweep", "sweep.json")
    (w / "project_sweep" / "runs").mkdir()
    (w / "user_report").mkdir()
    (w / "user_report" / "report.md").write_text("# my report\n")
    (w / "user_report_html").mkdir()
    (w / "user_report_html" / "report.html").write_text("<p>mine</p>\n")
    write_synthetic_run(w / "user_report_html" / "mine", "p4_g8_sqrt", 0, 4, 8, "sqrt", 1e-6)
    (w / "user_demo").mkdir()
    (w / "user_demo" / "sweep.toml").write_text("# my own sweep\nseeds = [0]\n")
    # a run with the user's notes added, a run whose marker names another kind, a marker that is a symlink
    write_synthetic_run(w / "run_with_notes", "p4_g8_sqrt", 0, 4, 8, "sqrt", 1e-6)
    (w / "run_with_notes" / "notes.txt").write_text("mine\n")
    write_synthetic_run(w / "run_marked_export", "p4_g8_sqrt", 0, 4, 8, "sqrt", 1e-6)
    mark_directory(w / "run_marked_export", "export")  # batchscale's own marker of another kind (a hand-written one is none)
    project_folder(w / "marker_link", "run.json", "metrics.jsonl")
    (w / "marker_link" / MARKER_FILE).symlink_to(w / "run" / MARKER_FILE)
    project_folder(w / "marker_garbage", "run.json", "metrics.jsonl")
    (w / "marker_garbage" / MARKER_FILE).write_text('{"kind": "run"' + " " * 5000 + "}")
    # an export that the user has since run: its engine logs in work/
    assert main(["export", "verl", str(w / "sweep_ok.toml"), "--out", str(w / "export_used")]) == 0
    (w / "export_used" / "work").mkdir()
    (w / "export_used" / "work" / "train.log").write_text("verl's log\n")
    write_sweep_file(w / "sweep_seeds.toml", 'seeds = [0, 1]\n[grid]\n"batch.prompts_per_step" = [2]\n')
    for name, kind in (("samples_decrease", "step"), ("samples_decrease_eval", "eval")):
        run = write_synthetic_run(w / name, "p4_g8_sqrt", 0, 4, 8, "sqrt", 1e-6)
        lines = (run / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        last = max(i for i, r in enumerate(records) if r["kind"] == kind)
        records[last]["samples"] = 1  # a counter that went back
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    foreign_point = w / "sweep_foreign_point" / "runs" / "grpo-P2-G2-sqrt__s0"  # the user's folder where a point goes
    foreign_point.mkdir(parents=True)
    (foreign_point / "notes.txt").write_text("mine\n")
    mark_directory(w / "sweep_foreign_point", "sweep")
    # model configs whose heads do not split evenly
    shape = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 128,
             "vocab_size": 100, "max_position_embeddings": 64}
    for name, extra in (("model_heads", {}), ("model_kv_heads", {"num_attention_heads": 4, "num_key_value_heads": 3})):
        (w / name).mkdir()
        (w / name / "config.json").write_text(json.dumps({**shape, **extra}))
    # a link to a user's folder
    (w / "link_to_project").symlink_to(w / "project_run")
    # locks held by pid 1 (alive, not ours: never taken over)
    lock = json.dumps({"pid": 1, "host": socket.gethostname(), "started": 0})
    (w / ".locked_run.lock").write_text(lock)
    (w / "out" / ".locked_import.lock").write_text(lock)
    return w


IMPORT = ["import", "verl", "{w}/verl.jsonl", *BATCH]
TRAIN = ["train", "{w}/base.toml"]
SET = "--set"
CASES = [
    # --- what --overwrite may delete ----------------------------------------------------------------------------
    ("import-overwrite-log-inside", ["import", "verl", "{w}/run_log_inside/metrics.jsonl", *BATCH, "--out",
                                     "{w}/run_log_inside", "--overwrite"], 2, "holds the input PATH"),
    ("import-overwrite-project-folder", [*IMPORT, "--out", "{w}/project_run", "--overwrite"], 2,
     "non-empty directory without a run batchscale wrote"),
    ("import-overwrite-metrics-only", [*IMPORT, "--out", "{w}/project_metrics", "--overwrite"], 2,
     "without a run batchscale wrote"),
    ("train-overwrite-project-folder", [*TRAIN, "--out", "{w}/project_run", "--overwrite"], 2,
     "without a run batchscale wrote"),
    ("train-overwrite-run-with-notes", [*TRAIN, "--out", "{w}/run_with_notes", "--overwrite"], 2,
     "holds 1 entry batchscale did not write (notes.txt)"),
    ("import-overwrite-run-with-notes", [*IMPORT, "--out", "{w}/run_with_notes", "--overwrite"], 2,
     "(notes.txt); --overwrite would delete them"),
    ("train-overwrite-sweep", [*TRAIN, "--out", "{w}/sweep", "--overwrite"], 2,
     "is a sweep directory, not a run directory"),
    ("train-overwrite-marker-other-kind", [*TRAIN, "--out", "{w}/run_marked_export", "--overwrite"], 2,
     "is a export directory, not a run directory"),
    ("train-overwrite-marker-symlink", [*TRAIN, "--out", "{w}/marker_link", "--overwrite"], 2,
     "without a run batchscale wrote"),
    ("import-overwrite-marker-oversized", [*IMPORT, "--out", "{w}/marker_garbage", "--overwrite"], 2,
     "without a run batchscale wrote"),
    ("import-overwrite-link-to-project", [*IMPORT, "--out", "{w}/link_to_project", "--overwrite"], 2,
     "project_run is a non-empty directory without a run"),
    ("train-model-inside-out", [*TRAIN, "--out", "{w}/run", "--overwrite", "--set", "model.name='{w}/run'"], 2,
     "holds the input model.name"),
    ("analyze-out-user-report", ["analyze", "{w}/sweep", "--out", "{w}/user_report"], 2, "already holds report.md"),
    ("report-user-report-html", ["report", "{w}/user_report_html"], 2, "already holds report.html"),
    ("demo-out-user-sweep-toml", ["demo", "--quick", "--out", "{w}/user_demo"], 2,
     "non-empty directory without a demo batchscale wrote"),
    ("demo-out-sweep", ["demo", "--quick", "--out", "{w}/sweep"], 2, "is a sweep directory, not a demo's"),
    ("export-overwrite-native-sweep", ["export", "verl", "{w}/sweep_ok.toml", "--out", "{w}/sweep", "--overwrite"], 2,
     "is a sweep directory, not a export directory"),
    ("export-overwrite-run", ["export", "verl", "{w}/sweep_ok.toml", "--out", "{w}/run", "--overwrite"], 2,
     "is a run directory"),
    ("export-overwrite-used-export", ["export", "verl", "{w}/sweep_ok.toml", "--out", "{w}/export_used",
                                      "--overwrite"], 2, "batchscale did not write (work)"),
    ("sweep-out-foreign-sweep-json", ["sweep", "{w}/sweep_ok.toml", "--out", "{w}/project_sweep"], 2,
     "non-empty directory without a sweep batchscale wrote"),
    ("sweep-out-run-dir", ["sweep", "{w}/sweep_ok.toml", "--out", "{w}/run"], 2,
     "is a run directory, not a sweep directory"),
    ("sweep-foreign-point-dir", ["sweep", "{w}/sweep_ok.toml", "--out", "{w}/sweep_foreign_point"], 2,
     "is not a run batchscale wrote, but the sweep writes point grpo-P2-G2-sqrt__s0 there"),
    ("sweep-out-export-dir", ["sweep", "{w}/sweep_ok.toml", "--out", "{w}/export_used"], 2,
     "not a sweep directory"),
    # --- config values beyond their useful range (refused by the config, with the range) ----------------------
    ("train-seed-2-64", [*TRAIN, SET, f"run.seed={2**64}"], 2, "run.seed: got 18446744073709551616"),
    ("train-seed-2-32", [*TRAIN, SET, f"run.seed={2**32}"], 2, "less than or equal to 4294967295"),
    ("train-split-seed-huge", [*TRAIN, SET, f"task.split_seed={2**70}"], 2, "task.split_seed"),
    ("train-prompts-2-63", [*TRAIN, SET, f"batch.prompts_per_step={2**63}"], 2, "batch.prompts_per_step"),
    ("train-group-2-40", [*TRAIN, SET, f"batch.samples_per_prompt={2**40}"], 2, "less than or equal to 2147483647"),
    ("train-budget-2-60", [*TRAIN, SET, f"run.budget_samples={2**60}"], 2, "run.budget_samples"),
    ("train-max-new-tokens-2-62", [*TRAIN, SET, f"sampling.max_new_tokens={2**62}"], 2,
     "less than or equal to 65536"),
    ("train-max-new-tokens-100000", [*TRAIN, SET, "sampling.max_new_tokens=100000"], 2, "sampling.max_new_tokens"),
    ("train-max-new-tokens-past-context", [*TRAIN, SET, "sampling.max_new_tokens=64"], 2,
     "leave no room for the prompt in the model's context of 64 positions"),
    ("train-threads-100000", [*TRAIN, SET, "run.threads=100000"], 2, "run.threads"),
    ("train-generator-threads-huge", [*TRAIN, SET, "rollout.generator_threads=5000"], 2, "rollout.generator_threads"),
    ("train-lr-rule-negative", [*TRAIN, SET, "optim.lr_rule=-0.5"], 2, "must be in [0, 1], got -0.5"),
    ("train-lr-rule-above-one", [*TRAIN, SET, "optim.lr_rule=1.5"], 2, "optim.lr_rule"),
    ("train-critic-lr-rule-negative", [*TRAIN, SET, "critic.lr_rule=-1.0"], 2, "critic.lr_rule"),
    ("train-template-unknown", [*TRAIN, SET, "task.template='{a}{op}{c}='"], 2, "placeholder {c}"),
    ("train-template-attribute", [*TRAIN, SET, "task.template='{a.__class__}{op}{b}'"], 2, "task.template"),
    ("train-template-unbalanced", [*TRAIN, SET, "task.template='{a{op}{b}='"], 2, "task.template"),
    ("train-template-format-spec", [*TRAIN, SET, "task.template='{a:>99999999}{op}{b}='"], 2, "with a format"),
    ("train-label-nul", [*TRAIN, SET, 'run.label="a\\u0000b"'], 2, "control character"),
    ("train-label-newline", [*TRAIN, SET, 'run.label="a\\nb"'], 2, "control character"),
    ("train-label-hidden", [*TRAIN, SET, "run.label='.hidden'"], 2, "must not be blank or start with '.'"),
    ("train-label-blank", [*TRAIN, SET, "run.label=' '"], 2, "run.label"),
    ("train-temperature-tiny", [*TRAIN, SET, "sampling.temperature=1e-300"], 2, "greater than or equal to 0.01"),
    ("train-temperature-small", [*TRAIN, SET, "sampling.temperature=0.001"], 2, "sampling.temperature"),
    ("sweep-seed-huge", ["sweep", "{w}/sweep_ok.toml", "--out", "{w}/out/{id}", SET, f"run.seed={2**64}"], 2,
     "run.seed"),
    ("export-label-hidden", ["export", "verl", "{w}/sweep_ok.toml", "--out", "{w}/out/{id}", SET,
                             "run.label='.hidden'"], 2, "start with '.'"),
    ("roofline-heads-not-dividing", ["roofline", "{w}/model_heads", "H100-SXM"], 2,
     "3 heads do not divide hidden_size 64"),
    ("roofline-kv-heads-not-dividing", ["roofline", "{w}/model_kv_heads", "H100-SXM"], 2,
     "3 key/value heads do not divide the 4 attention heads"),
    # --- what the sweep file and a run's log may say -------------------------------------------------------------
    ("sweep-set-swept-key", ["sweep", "{w}/sweep_ok.toml", "--out", "{w}/out/{id}", SET, "batch.prompts_per_step=4"],
     2, "--set batch.prompts_per_step: is a key the sweep file varies"),
    ("sweep-set-seed-with-seeds", ["sweep", "{w}/sweep_seeds.toml", "--out", "{w}/out/{id}", SET, "run.seed=3"], 2,
     "--set run.seed"),
    ("export-set-swept-key", ["export", "verl", "{w}/sweep_ok.toml", "--out", "{w}/out/{id}", SET,
                              "batch.prompts_per_step=4"], 2, "is a key the sweep file varies"),
    ("analyze-samples-decrease", ["analyze", "{w}/samples_decrease", "--out", "{w}/out/{id}"], 2,
     "cumulative samples decrease"),
    ("analyze-samples-decrease-eval", ["analyze", "{w}/samples_decrease_eval", "--out", "{w}/out/{id}"], 2,
     "cumulative samples decrease (step at step"),
    # --- one writer per run -------------------------------------------------------------------------------------
    ("train-locked-by-live-pid", [*TRAIN, "--out", "{w}/locked_run"], 2, "locked by a run (pid 1 on host"),
    ("import-locked-by-live-pid", [*IMPORT, "--out", "{w}/out/locked_import"], 2, "locked by a run (pid 1 on host"),
]


def snapshot(world: Path) -> dict:
    """Every entry of the world outside out/: files by size, links by target (a link replaced is a change)."""
    found = {}
    for root, dirs, files in os.walk(world):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(world))
            if rel.startswith(("out", "__pycache__")):
                continue
            found[rel] = os.readlink(path) if path.is_symlink() else (path.stat().st_size if path.is_file() else "dir")
    return found


@pytest.mark.parametrize("case_id,args,code,fragment", CASES, ids=[c[0] for c in CASES])
def test_hostile_input(case_id, args, code, fragment, world, random_model_dir, capsys):
    assert_refused_cleanly(expand_args(args, world, case_id, random_model_dir), code, fragment, world / "out" / case_id,
                           lambda: snapshot(world), capsys)


def test_the_second_catalogue_covers_deletion_and_locks():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) and len(CASES) >= 20
    assert {"train", "import", "sweep", "analyze", "report", "export", "demo"} <= {args[0] for _, args, _, _ in CASES}


def test_the_command_line_wins_over_the_sweep_files_set(world):
    from batchscale.sweep.spec import load_sweep_spec

    path = world / "out" / "sweep_with_set.toml"
    write_sweep_file(path, '[set]\n"run.budget_samples" = 512\n[grid]\n"batch.prompts_per_step" = [2]\n',
                     base=str(world / "base.toml"))
    assert [p.config.run.budget_samples for p in load_sweep_spec(path)] == [512]
    assert [p.config.run.budget_samples for p in load_sweep_spec(path, ["run.budget_samples=256"])] == [256]


def test_seeds_with_identical_curves_analyse_plan_and_report_without_a_traceback(tmp_path, capsys):
    import shutil

    from batchscale.analysis.synthetic import write_synthetic_run

    first = write_synthetic_run(tmp_path / "runs" / "a__s0", "a", 0, 4, 8, "sqrt", 1e-6)
    for name, changes in (("a__s1", {"seed": 1}), ("b__s0", {"label": "b"}), ("b__s1", {"label": "b", "seed": 1})):
        copy = shutil.copytree(first, tmp_path / "runs" / name)
        for document in ("run.json", "summary.json"):
            data = json.loads((copy / document).read_text())
            (copy / document).write_text(json.dumps({**data, **changes}))
    for command in (["analyze"], ["plan"], ["report"]):
        assert main([*command, str(tmp_path)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_report_on_a_run_directory_names_only_paths_that_exist(tmp_path, capsys):
    import re

    from batchscale.analysis.synthetic import write_synthetic_run

    run = write_synthetic_run(tmp_path / "one_run", "a", 0, 4, 8, "sqrt", 1e-6)
    assert main(["report", str(run)]) == 0
    for text in ((run / "report.md").read_text(), capsys.readouterr().err):
        assert "runs/" not in text.replace(str(tmp_path), "")
        for path in re.findall(re.escape(str(tmp_path)) + r"[^\s,;:)]*", text):
            assert Path(path.rstrip(".")).exists(), path
