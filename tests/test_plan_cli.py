"""`batchscale plan` end to end through `main()`: CSV tables, sweep directories, the JSON schema and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from document_fixtures import generation_profile, label_analysis, write_analysis

from batchscale.cli import main
from batchscale.rundir import write_document

GRPO_CSV = """label,samples_to_target,throughput,prompts_per_step,samples_per_prompt,feasible
P=128,100000,10,128,8,true
P=1024,220000,31,1024,8,yes
P=2048,160000,13,2048,8,1
P=8192,100000,500,8192,8,no
P=4096,censored,14,4096,8,true
"""


def run_plan(capsys, *args) -> tuple[int, str, str]:
    code = main(["plan", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_table_json_schema_and_decision(tmp_path, capsys):
    table = write(tmp_path / "t.csv", GRPO_CSV)
    code, out, _ = run_plan(capsys, "--table", table, "--reference", "P=128", "--json")
    assert code == 0
    doc = json.loads(out)  # stdout holds only the JSON document
    assert {"reference", "best", "rows", "explanation", "regime"} <= doc.keys()
    assert doc["reference"] == "P=128" and doc["best"] == "P=1024"
    for row in doc["rows"]:
        assert {"label", "r_n", "throughput_gain", "time_to_target", "normalized_time_to_target", "feasible"} <= row.keys()
    rows = {r["label"]: r for r in doc["rows"]}
    assert rows["P=1024"]["r_n"] == pytest.approx(2.2)
    assert rows["P=1024"]["throughput_gain"] == pytest.approx(3.1)
    assert rows["P=1024"]["time_to_target"] == pytest.approx(220000 / 31)
    assert rows["P=1024"]["normalized_time_to_target"] == pytest.approx(2.2 / 3.1)
    assert rows["P=8192"]["feasible"] is False and rows["P=8192"]["eligible"] is False
    assert rows["P=4096"]["censoring"] == "censored" and rows["P=4096"]["r_n"] is None
    assert rows["P=1024"]["samples_per_step"] == 8192
    assert "P=1024 is the best estimate, not yet resolved: 3.10x throughput for a 2.20x sample penalty (rN), T/T_ref = 0.71" in doc["explanation"]
    assert doc["regime"]["name"] == "unknown"


def test_table_human_output_shows_winner_and_regime(tmp_path, capsys):
    table = write(tmp_path / "t.csv", GRPO_CSV)
    code, out, _ = run_plan(
        capsys, "--table", table, "--critical-generation-batch", "512", "--critical-training-batch", "4096"
    )
    assert code == 0
    assert "P=1024 is the best estimate, not yet resolved" in out and "T/T_ref" in out and "censored" in out
    assert "Generation knee first" in out


def test_table_reference_defaults_to_first_row(tmp_path, capsys):
    table = write(tmp_path / "t.csv", GRPO_CSV)
    code, out, _ = run_plan(capsys, "--table", table, "--json")
    assert code == 0 and json.loads(out)["reference"] == "P=128"


@pytest.mark.parametrize(
    "text, args, needle",
    [
        ("label,samples_to_target\nA,100\n", [], "throughput"),  # missing column
        ("label,samples_to_target,throughput\nA,100,10\nB,100,0\n", [], "line 3 (label 'B') column throughput"),
        ("label,samples_to_target,throughput\nA,100,10\nB,-5,20\n", [], "column samples_to_target"),
        ("label,samples_to_target,throughput\nA,100,10\nB,abc,20\n", [], "must be a number"),
        ("label,samples_to_target,throughput\nA,100,10\nB,100,20\n", ["--reference", "Z"], "'Z' is not one of"),
        ("label,samples_to_target,throughput\nA,100,10\nA,100,20\n", [], "'A' already appears on line 2"),
        ("label,samples_to_target,throughput,feasible\nA,100,10,maybe\n", [], "column feasible"),
        ("label,samples_to_target,throughput\n", [], "no rows"),
        ("", [], "is empty"),
        ("label,samples_to_target,throughput,feasible\nA,100,10,false\nB,100,20,true\n", [], "infeasible"),
        ("label,samples_to_target,throughput\nA,censored,10\nB,100,20\n", [], "never reached the target"),
    ],
)
def test_bad_tables_exit_2_and_write_nothing(tmp_path, capsys, text, args, needle):
    table = write(tmp_path / "t.csv", text)
    code, out, err = run_plan(capsys, "--table", table, "--json", *args)
    assert code == 2
    assert out == ""  # nothing on stdout: no half-written result
    assert needle in err and "Fix:" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_needs_exactly_one_source(tmp_path, capsys):
    assert run_plan(capsys)[0] == 2
    table = write(tmp_path / "t.csv", GRPO_CSV)
    code, _, err = run_plan(capsys, tmp_path, "--table", table)
    assert code == 2 and "exactly one" in err


# ---- sweep directories: analysis.json (issue 5 schema) + run logs ----------------------------------------------------

STEP_TIMES_S = {  # per label, per seed: time/step of each step; the first step is warm-up and is dropped
    "P4": {0: [9.0, 1.0, 1.2, 0.8], 1: [7.0, 2.0, 2.0, 2.0]},  # medians 1.0 and 2.0 s
    "P16": {0: [9.0, 1.0, 1.0], 1: [9.0, 1.0, 1.0]},
    "P64": {0: [9.0, 4.0, 4.0]},
    "P256": {0: [9.0, 8.0, 8.0]},
}
SAMPLES_PER_PROMPT = 4


def write_run(runs_dir: Path, label: str, seed: int, step_times_s: list[float]) -> None:
    prompts = int(label[1:])
    per_step = prompts * SAMPLES_PER_PROMPT
    run_dir = runs_dir / f"{label}__s{seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({
        "label": label, "seed": seed, "algorithm": "grpo", "prompts_per_step": prompts,
        "samples_per_prompt": SAMPLES_PER_PROMPT, "samples_per_step": per_step, "source": "batchscale",
    }))  # fmt: skip
    lines, wall_s = [], 0.0
    for step, t in enumerate(step_times_s, start=1):
        wall_s += t
        lines.append(json.dumps({
            "kind": "step", "step": step, "samples": step * per_step, "wall_s": wall_s, "prompts": prompts,
            "time/step": t, "time/generate": 0.75 * t, "time/train": 0.25 * t,
        }))  # fmt: skip
        lines.append(json.dumps({"kind": "eval", "step": step, "samples": step * per_step, "wall_s": wall_s,
                                 "eval/accuracy": 0.1 * step}))  # fmt: skip
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + '\n{"kind": "step", "st')  # torn last line


def stt(mean, reached, censored=0):
    return {"mean": mean, "ci_low": mean, "ci_high": mean, "reached": reached, "censored": censored}


def make_sweep(tmp_path: Path, b_simple=512.0) -> Path:
    sweep = tmp_path / "sweep"
    for label, seeds in STEP_TIMES_S.items():
        for seed, times in seeds.items():
            write_run(sweep / "runs", label, seed, times)
    n_star = {"P4": stt(1000, 2), "P16": stt(1200, 2), "P64": stt(2000, 1), "P256": stt(None, 0, 1)}
    configs = {label: label_analysis(int(label[1:]), SAMPLES_PER_PROMPT, n_star[label], list(STEP_TIMES_S[label]))
               for label in STEP_TIMES_S}
    write_analysis(sweep / "analysis.json", "P4", 0.3, configs, b_simple)
    return sweep


KNEE = {"metric": "tokens_per_s", "q_max": 100.0, "b_half": 64 / 9, "b_90": 64.0, "doubling_knee": 32,
        "doubling_threshold": 0.1, "r2": 1.0, "extrapolated": False, "method": "curve_fit"}


def test_sweep_throughput_from_logs_and_decision(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    write_document(sweep / "profiles" / "generation.json", generation_profile([1, 64], [10.0, 90.0], knee=KNEE))
    code, out, _ = run_plan(capsys, sweep, "--json")
    assert code == 0
    doc = json.loads(out)
    rows = {r["label"]: r for r in doc["rows"]}
    # q = samples_per_step / median(time/step after warm-up), geometric mean over seeds: P4 sqrt(16/1.0 * 16/2.0)
    assert rows["P4"]["throughput_samples_per_s"] == pytest.approx(128 ** 0.5)
    assert rows["P16"]["throughput_samples_per_s"] == pytest.approx(64.0)
    assert rows["P64"]["throughput_samples_per_s"] == pytest.approx(64.0)
    assert rows["P256"]["throughput_samples_per_s"] == pytest.approx(128.0)
    assert rows["P4"]["generate_s"] == pytest.approx(0.75 * 1.5)
    assert rows["P16"]["r_n"] == pytest.approx(1.2)
    assert rows["P16"]["throughput_gain"] == pytest.approx(64 / 128 ** 0.5)
    assert rows["P16"]["time_to_target"] == pytest.approx(1200 / 64)
    assert rows["P16"]["normalized_time_to_target"] == pytest.approx(1.2 / (64 / 128 ** 0.5))
    assert rows["P256"]["censoring"] == "censored"
    assert doc["reference"] == "P4" and doc["best"] == "P16"  # P256 is fastest by q but never reached the target
    assert doc["target"] == 0.3
    assert doc["regime"]["name"] == "generation-knee-first"
    assert doc["regime"]["critical_generation_batch"] == 64.0 and doc["regime"]["critical_training_batch"] == 512.0
    assert "P64 loses: its 5.66x throughput for rN 2.00 gives T/T_ref = 0.35" in doc["explanation"]


def test_sweep_reference_override_and_human_output(tmp_path, capsys):
    sweep = make_sweep(tmp_path, b_simple=None)
    code, out, _ = run_plan(capsys, sweep, "--reference", "P16")
    assert code == 0
    assert "reference P16" in out and "P16 (the reference) is the best estimate, not yet resolved" in out and "Unknown: missing" in out


def test_sweep_errors_exit_2(tmp_path, capsys):
    code, out, err = run_plan(capsys, tmp_path / "nope")
    assert code == 2 and out == "" and "does not exist" in err
    sweep = make_sweep(tmp_path)
    code, out, err = run_plan(capsys, sweep, "--reference", "P256", "--json")
    assert code == 2 and out == "" and "never reached the target" in err
    for run_dir in (sweep / "runs").glob("P64__s*"):  # a log without step times: no throughput to plan with
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()[:-1]
        untimed = [{k: v for k, v in json.loads(line).items() if k != "time/step"} for line in lines]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in untimed))
    code, out, err = run_plan(capsys, sweep, "--json")
    assert code == 2 and out == "" and "label 'P64'" in err and "no run with timed step records" in err
    (sweep / "runs" / "P64__s0" / "metrics.jsonl").unlink()
    code, out, err = run_plan(capsys, sweep, "--json")
    assert code == 2 and out == "" and "P64__s0/metrics.jsonl: is missing" in err
    (sweep / "analysis.json").unlink()
    code, out, err = run_plan(capsys, sweep)
    assert code == 2 and "analysis.json" in err


def test_plan_never_imports_torch():
    code = "import sys, batchscale.plan, batchscale.plan.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
