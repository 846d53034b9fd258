"""Hostile inputs, round three, part A (issue 39): nothing a model says runs as code, locks and markers never write or
delete through what the user made, outputs never replace inputs or special files, and text from runs is inert on
display. Each test is one case of the issue's catalogue: the input, and the outcome now expected (before the fix each
of them reproduced the failure the issue names). Payloads only ever aim at files under pytest's tmp_path."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from batchscale.cli import main
from batchscale.errors import UserError

needs_gym = pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None,
                               reason="needs the optional extra reasoning-gym")


def landlock_or_skip():
    from batchscale.tasks.confinement import landlock_missing_reason

    if why := landlock_missing_reason():
        pytest.skip(f"no Landlock here ({why}): those datasets are refused instead (tested below)")


def gym_task(dataset: str, *overrides: str):
    from batchscale.config import load_config
    from batchscale.tasks import build_task

    return build_task(load_config(None, ["task.name=reasoning_gym", f"task.dataset={dataset}", "task.eval_size=2",
                                         *overrides]).task)


def touch_payload(path: Path) -> str:
    return f"__import__('pathlib').Path({str(path)!r}).touch()"


# ---- 1. no response is ever executed ---------------------------------------------------------------------------

EVALUATING = ["spiral_matrix", "binary_matrix", "n_queens", "string_insertion", "polynomial_multiplication",
              "simple_integration", "intermediate_integration"]


@needs_gym
@pytest.mark.parametrize("dataset", [
    pytest.param(name, marks=() if name == "spiral_matrix" else pytest.mark.slow) for name in EVALUATING])
def test_an_answer_evaluated_by_the_scorer_cannot_write_a_file(tmp_path, dataset):
    landlock_or_skip()
    task = gym_task(dataset)
    try:
        ex = task.eval_examples()[0]
        marker = tmp_path / "ran"
        payload = touch_payload(marker)
        scores = task.score([payload, f"<answer>{payload}</answer>", f"[{payload}]", ex.answer], [ex] * 4)
        assert not marker.exists()  # eval / parse_expr ran it in-process before the fix
        assert scores[:3] == [0.0, 0.0, 0.0] and scores[3] == 1.0  # the scorer still scores
        assert task._scorer.confinement["landlock_abi"] > 0
    finally:
        task.close()


@needs_gym
@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["countdown", "puzzle24"])
def test_arithmetic_scorers_run_in_the_worker_too(tmp_path, dataset):
    task = gym_task(dataset, "task.params={min_numbers=3, max_numbers=3}" if dataset == "countdown" else "task.eval_size=2")
    try:
        ex = task.eval_examples()[0]
        marker = tmp_path / "ran"
        scores = task.score([touch_payload(marker), ex.answer], [ex] * 2)
        assert not marker.exists() and scores[1] == 1.0 and task._scorer is not None
    finally:
        task.close()


@needs_gym
@pytest.mark.slow
def test_an_answer_cannot_change_how_the_next_one_is_scored_nor_reach_the_network(tmp_path):
    landlock_or_skip()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    task = gym_task("spiral_matrix")
    try:
        ex = task.eval_examples()[0]
        cheat = ("setattr(__import__('reasoning_gym.algorithmic.spiral_matrix', fromlist=['x']).SpiralMatrixDataset, "
                 "'score_answer', lambda *a: 1.0)")
        call = f"__import__('socket').create_connection(('127.0.0.1', {port}), 2)"
        escape_file = f"open({str(tmp_path / 'w')!r}, 'w').write('x')"
        assert task.score([cheat, "wrong", call, escape_file, "wrong"], [ex] * 5) == [0.0] * 5
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing connected
        assert not (tmp_path / "w").exists()
    finally:
        task.close()
        listener.close()


@needs_gym
@pytest.mark.slow
def test_an_answer_that_hangs_or_kills_the_scorer_is_scored_as_no_answer(monkeypatch, capsys):
    landlock_or_skip()
    monkeypatch.setattr("batchscale.tasks.isolated_scorer.ANSWER_TIMEOUT_S", 2.0)
    task = gym_task("spiral_matrix")
    try:
        ex = task.eval_examples()[0]
        answers = ["[__import__('time').sleep(60)]", "__import__('os')._exit(3)", "exit()", ex.answer]
        assert task.score(answers, [ex] * 4) == [0.0, 0.0, 0.0, 1.0]
        assert "is scored as no answer" in capsys.readouterr().err
    finally:
        task.close()


@needs_gym
def test_without_landlock_an_evaluating_dataset_is_refused_naming_it(monkeypatch):
    monkeypatch.setattr("batchscale.tasks.reasoning_gym_task.landlock_missing_reason", lambda: "no Landlock here")
    with pytest.raises(UserError, match="'n_queens' scores an answer by evaluating it") as info:
        gym_task("n_queens")
    assert info.value.field == "task.dataset"
    with pytest.raises(UserError, match="string_insertion"):  # a composite inherits its members' scorers
        gym_task("composite", 'task.params={datasets=[{name="string_insertion", weight=1.0, config={}}]}')


def test_landlock_confines_a_process_to_reading_the_library(tmp_path):
    from batchscale.tasks.confinement import landlock_missing_reason

    if why := landlock_missing_reason():
        pytest.skip(why)
    (tmp_path / "theirs").write_text("data\n")
    code = (f"import os, sys; from batchscale.tasks.confinement import restrict_filesystem as r; r([sys.prefix]); "
            f"d = {str(tmp_path)!r}\n"
            "for act in (lambda: open(d + '/new', 'w'), lambda: os.mkdir(d + '/dir'), lambda: os.unlink(d + '/theirs'),"
            " lambda: open(d + '/theirs').read(), lambda: os.symlink('/', d + '/l')):\n"
            "    try: act(); print('allowed')\n"
            "    except PermissionError: print('refused')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.stdout.split() == ["refused"] * 5, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs"]


# ---- 2. locks, markers and links -------------------------------------------------------------------------------

@pytest.mark.parametrize("make", ["symlink", "hardlink", "foreign", "fifo", "directory"])
def test_a_lock_path_that_is_not_batchscales_lock_is_refused_and_left_as_it_is(tmp_path, make):
    from batchscale.rundir.lock import RunLock, SweepLock

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    lock = sweep / "sweep.lock"
    {"symlink": lambda: lock.symlink_to(victim), "hardlink": lambda: os.link(victim, lock),
     "foreign": lambda: lock.write_text("my notes\n"), "fifo": lambda: os.mkfifo(lock),
     "directory": lambda: lock.mkdir()}[make]()
    before = os.lstat(lock)
    with pytest.raises(UserError, match="not a lock file batchscale wrote"):
        SweepLock(sweep).acquire()
    assert victim.read_text() == "the user's file\n" and os.lstat(lock).st_mode == before.st_mode
    if make == "symlink":  # the run lock, beside its run, too
        (tmp_path / ".run.lock").symlink_to(victim)
        with pytest.raises(UserError, match="symbolic link"):
            RunLock(tmp_path / "run").acquire()
        assert victim.read_text() == "the user's file\n"


def test_a_stale_lock_of_batchscales_is_still_taken_over(tmp_path):
    from batchscale.rundir.lock import SweepLock

    (tmp_path / "sweep.lock").write_text(json.dumps({"pid": 2 ** 22 + 7, "host": socket.gethostname(), "started": 0}))
    with SweepLock(tmp_path):
        assert json.loads((tmp_path / "sweep.lock").read_text())["pid"] == os.getpid()
    assert not (tmp_path / "sweep.lock").exists()


def test_the_build_lock_never_follows_a_link(tmp_path):
    from batchscale.files import exclusive_lock

    (tmp_path / ".model.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UserError, match="a link is never followed"):
        with exclusive_lock(tmp_path / ".model.lock"):
            pass
    assert not (tmp_path / "elsewhere").exists()


def marked_run(path: Path) -> Path:
    from batchscale.analysis.synthetic import write_synthetic_run

    return write_synthetic_run(path, "p4_g8_sqrt", 0, 4, 8, "sqrt", 1e-6)


def test_a_hand_written_or_copied_marker_is_no_marker(tmp_path):
    from batchscale.rundir.ownership import MARKER_FILE, check_replaceable, directory_kind, read_marker

    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("run.json", "metrics.jsonl", "notes.md"):
        (folder / name).write_text("mine\n")
    (folder / MARKER_FILE).write_text(json.dumps({"kind": "run", "written_by": "batchscale"}))
    assert read_marker(folder) is None and directory_kind(folder) is None
    with pytest.raises(UserError, match="without a run batchscale wrote"):
        check_replaceable(folder, "run")
    run = marked_run(tmp_path / "run")
    (folder / MARKER_FILE).write_bytes((run / MARKER_FILE).read_bytes())  # a real marker, copied
    assert read_marker(run) == "run" and read_marker(folder) is None
    check_replaceable(run, "run")  # batchscale's own still is


@pytest.mark.parametrize("case, kept", [
    ("marker_directory", ".batchscale"),
    ("user_folder_in_checkpoints", "checkpoints/mine"),
    ("folder_inside_a_checkpoint", "checkpoints/step-000000002/mine"),
    ("user_folder_in_policy", "policy/mine"),
    ("folder_where_a_file_goes", "report.md"),
])
def test_overwrite_judges_the_whole_tree_and_names_what_it_keeps(tmp_path, case, kept):
    from batchscale.rundir.ownership import MARKER_FILE, check_replaceable

    run = marked_run(tmp_path / "run")
    if case == "marker_directory":
        (run / MARKER_FILE).unlink()
        (run / MARKER_FILE).mkdir()
        (run / MARKER_FILE / "thesis.tex").write_text("mine\n")
    else:
        mine = run / kept
        mine.mkdir(parents=True)
        (mine / "data.csv").write_text("mine\n")
        (run / "checkpoints" / "step-000000001").mkdir(parents=True, exist_ok=True)
    with pytest.raises(UserError, match="keeps") as info:
        check_replaceable(run, "run")
    assert kept in str(info.value)


def test_a_users_mlruns_in_a_premarker_run_makes_it_the_users(tmp_path):
    from batchscale.rundir.ownership import MARKER_FILE, directory_kind

    run = marked_run(tmp_path / "run")
    (run / MARKER_FILE).unlink()
    assert directory_kind(run) == "run"  # a pre-marker run, recognised by its content
    (run / "mlruns" / "0").mkdir(parents=True)  # the user's own MLflow store: batchscale wrote none before the marker
    assert directory_kind(run) is None
    assert main(["import", "verl", str(tmp_path / "none.jsonl"), "--prompts-per-step", "4", "--samples-per-prompt",
                 "2", "--out", str(run), "--overwrite"]) == 2
    assert (run / "mlruns" / "0").is_dir()


def unfinished_run(path: Path) -> Path:
    path.mkdir()
    (path / "config.json").write_text("{}\n")
    (path / "metrics.jsonl").write_text("")
    return path


@pytest.mark.parametrize("entry", ["policy", "checkpoints", "mlruns", "metrics.jsonl"])
def test_resume_refuses_a_run_whose_own_entries_are_links(tmp_path, entry):
    from batchscale.train.resume import check_resumable

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "step-000000001").mkdir()
    (theirs / "keep.txt").write_text("mine\n")
    run = unfinished_run(tmp_path / "run")
    if entry == "metrics.jsonl":
        (run / entry).unlink()
        (run / entry).symlink_to(theirs / "keep.txt")
    else:
        (run / entry).symlink_to(theirs)
    with pytest.raises(UserError, match="symbolic links where a run keeps its own files") as info:
        check_resumable(run)
    assert entry in str(info.value)
    assert sorted(p.name for p in theirs.iterdir()) == ["keep.txt", "step-000000001"]


def test_checkpoints_and_the_policy_are_never_replaced_through_a_link(tmp_path):
    from batchscale.files import staged_directory
    from batchscale.rundir.checkpoint import checkpoint_steps, prune

    theirs = tmp_path / "theirs"
    (theirs / "step-000000001").mkdir(parents=True)
    (theirs / ".step-000000001.checkpoint-1-0123abcd").mkdir()
    run = unfinished_run(tmp_path / "run")
    (run / "checkpoints").symlink_to(theirs)
    assert checkpoint_steps(run) == [] and prune(run, keep=0) == []
    assert len(list(theirs.iterdir())) == 2
    (run / "policy").symlink_to(theirs)
    with pytest.raises(UserError, match="never writes or deletes through a link"):
        with staged_directory(run / "policy", "saving", follow_link=False):
            pass
    assert len(list(theirs.iterdir())) == 2


def test_a_tracker_run_trackers_json_names_is_never_deleted_and_only_batchscales_is_ended(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from batchscale.telemetry.trackers.mlflow_tracker import SUPERSEDED_TAG, TOKEN_TAG, supersede

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.create_experiment("mine")
    users = client.create_run(experiment, run_name="my experiment").info.run_id
    ours = client.create_run(experiment, run_name="p4__s0", tags={TOKEN_TAG: "t0k"}).info.run_id
    for run_id in (users, ours):
        supersede({"run_id": run_id, "tracking_uri": uri, "token": "t0k"}, uri, "NEW")
    user_run, our_run = client.get_run(users), client.get_run(ours)
    assert user_run.info.lifecycle_stage == "active" and user_run.info.status == "RUNNING"
    assert SUPERSEDED_TAG not in user_run.data.tags  # trackers.json named it; it has no token of ours: untouched
    assert our_run.info.lifecycle_stage == "active" and our_run.info.status == "KILLED"
    assert our_run.data.tags[SUPERSEDED_TAG] == "NEW"


# ---- 3. outputs never replace inputs or special files ----------------------------------------------------------

@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    from batchscale.analysis.synthetic import write_synthetic_sweep

    path = tmp_path_factory.mktemp("round3a") / "sweep"
    write_synthetic_sweep(path, prompts_per_step=(4, 8), seeds=(0, 1))
    assert main(["analyze", str(path)]) == 0
    return path


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("args, says", [
    (["analyze", "{run}", "--csv", "{run}/metrics.jsonl"], "is an input of this command"),
    (["plan", "{sweep}", "--csv", "{sweep}/analysis.json"], "is an input of this command"),
    (["plan", "{sweep}", "--parquet", "{sweep}/runs/p4_g8_sqrt__s0/run.json"], "is an input of this command"),
    (["analyze", "{sweep}", "--csv", "/dev/stdout"], "not a regular file"),
    (["analyze", "{sweep}", "--csv", "{tmp}/fd"], "not a regular file"),
    (["plan", "{sweep}", "--csv", "/dev/null"], "not a regular file"),
    (["analyze", "{sweep}", "--csv", "{tmp}/fifo"], "not a regular file"),
    (["analyze", "{sweep}", "--csv", "{tmp}/t.csv", "--parquet", "{tmp}/t.csv"], "is also the --csv path"),
    (["analyze", "{sweep}", "--csv", "{sweep}/report.md"], "a file this command writes itself"),
    (["plan", "{sweep}", "--csv", "{tmp}"], "is a directory"),
])
def test_a_table_never_replaces_an_input_or_a_special_file(sweep, tmp_path, capsys, args, says):
    pytest.importorskip("pyarrow") if "--parquet" in args else None
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "fd").symlink_to("/proc/self/fd/1")
    run = sweep / "runs" / "p4_g8_sqrt__s0"
    argv = [a.format(run=run, sweep=sweep, tmp=tmp_path) for a in args]
    before = snapshot(sweep)
    assert main(argv) == 2
    assert says in capsys.readouterr().err
    assert snapshot(sweep) == before
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode) and (tmp_path / "fd").is_symlink()
    assert not (tmp_path / "t.csv").exists()


def test_a_table_through_a_link_to_a_file_replaces_the_target_and_keeps_the_link(sweep, tmp_path):
    (tmp_path / "table.csv").write_text("old\n")
    (tmp_path / "link.csv").symlink_to(tmp_path / "table.csv")
    assert main(["plan", str(sweep), "--csv", str(tmp_path / "link.csv")]) == 0
    assert (tmp_path / "link.csv").is_symlink() and (tmp_path / "table.csv").read_text().startswith("label,")


# ---- 4. text from runs is inert on display ---------------------------------------------------------------------

HOSTILE = "ok\rFAKE \x1b[2J\x1b]8;;http://x\x07link \u202egnp.exe \u2066x\u2069 \x9b31m"
RAW = ("\r", "\x1b", "\x07", "\u202e", "\u2066", "\u2069", "\x9b")


def test_controls_escapes_and_bidi_overrides_are_escaped_in_markdown_html_and_console():
    from batchscale.markup import console_text, html_text, markdown_text
    from batchscale.report.samples import Change, LabelSamples, samples_html, samples_markdown
    from batchscale.rundir.samples import SampleRow

    row = SampleRow(step=1, samples=8, prompt=HOSTILE, answer=HOSTILE, response=HOSTILE, reward=0.0, correct=False)
    item = LabelSamples(HOSTILE, [0], [Change(0, row, row.model_copy(update={"correct": True}))], 1)
    for text in (markdown_text(HOSTILE), html_text(HOSTILE), console_text(HOSTILE), "\n".join(samples_markdown([item])),
                 samples_html([item])):
        assert not any(c in text for c in RAW), repr(text)
        assert "\\u202e" in text and "\\x1b" in text


def test_error_lines_show_controls_from_input_inert(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "no\x1b[2Jsuch\u202ecod.exe")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "\x1b" not in err and "\u202e" not in err and "\\u202e" in err


def test_a_first_bare_override_whose_value_holds_a_slash_is_an_override(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr("batchscale.train.run_progress.train_with_progress",
                        lambda cfg, run_dir, *a, **k: (seen.append(cfg), ({}, run_dir))[1])
    data = tmp_path / "data" / "train.jsonl"
    data.parent.mkdir()
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    assert main(["train", f"task.path={data}", "task.name=data", "--out", str(tmp_path / "run")]) == 0
    assert seen[0].task.path == str(data) and seen[0].task.name == "data"


def test_a_marked_run_with_its_trackers_json_is_still_batchscales(tmp_path):
    from batchscale.rundir.ownership import check_replaceable

    run = marked_run(tmp_path / "run")
    (run / "trackers.json").write_text('{"schema_version": 1, "runs": {}}\n')  # what a run with trackers writes
    check_replaceable(run, "run")
