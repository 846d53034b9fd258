"""`plan`, `predict` and the report with a generation profile measured on a server (backend openai): its knee sets the
regime and the generation side of q, and every output says which backend and server it came from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from document_fixtures import SERVER, generation_profile, label_analysis, server_profile, write_analysis

from batchscale.cli import main
from batchscale.rundir import write_document

G = 4
B_HALF = 64 / 9  # the server saturates early: q(B) = 100 B / (B + B_half) tokens/s
KNEE = {"metric": "tokens_per_s", "q_max": 100.0, "b_half": B_HALF, "b_90": 64.0, "doubling_knee": 32,
        "doubling_threshold": 0.1, "r2": 1.0, "extrapolated": False, "method": "curve_fit"}
# per label: P, time/step, time/generate and tokens per sample of every step (both seeds alike)
LABELS = {"P4": (4, 1.0, 0.75, 8), "P64": (64, 4.0, 3.0, 10)}


def write_sweep(sweep: Path) -> Path:
    for label, (prompts, step_s, generate_s, length) in LABELS.items():
        for seed in (0, 1):
            run_dir = sweep / "runs" / f"{label}__s{seed}"
            run_dir.mkdir(parents=True)
            per_step = prompts * G
            (run_dir / "run.json").write_text(json.dumps({
                "label": label, "seed": seed, "algorithm": "grpo", "prompts_per_step": prompts,
                "samples_per_prompt": G, "samples_per_step": per_step, "source": "batchscale"}))
            lines = [json.dumps({"kind": "step", "step": step, "samples": step * per_step, "wall_s": step * step_s,
                                 "prompts": prompts, "time/step": step_s, "time/generate": generate_s,
                                 "time/train": step_s - generate_s, "tokens/generated": per_step * length})
                     for step in range(1, 5)]
            lines += [json.dumps({"kind": "eval", "step": 4, "samples": 4 * per_step, "wall_s": 4 * step_s,
                                  "eval/accuracy": 0.5})]
            (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    stt = {"mean": 1000.0, "ci_low": 900.0, "ci_high": 1100.0, "reached": 2, "censored": 0}
    configs = {label: label_analysis(p, G, {**stt, "mean": 1000.0 * (1 + p / 64)}, [0, 1])
               for label, (p, *_) in LABELS.items()}
    write_analysis(sweep / "analysis.json", "P4", 0.3, configs, b_simple=512.0)
    return sweep


def plan_json(capsys, *args) -> dict:
    assert main(["plan", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_server_profile_carries_the_generation_side_of_q(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "sweep")
    engine = write_document(tmp_path / "engine.json", generation_profile([1, 64], [10.0, 90.0], knee=KNEE))
    server = write_document(tmp_path / "server.json", server_profile([1, 64], [10.0, 90.0], knee=KNEE))
    measured = plan_json(capsys, sweep, "--generation-profile", engine)
    rows = {r["label"]: r for r in measured["rows"]}
    assert rows["P64"]["throughput_samples_per_s"] == pytest.approx(256 / 4.0)  # an engine profile: q as measured
    assert measured["generation_backend"] == "engine" and "engine on cpu" in measured["generation_source"]

    doc = plan_json(capsys, sweep, "--generation-profile", server)
    rows = {r["label"]: r for r in doc["rows"]}
    # the known truth: s(B) = B / rate(B) is proportional to B + B_half; times tokens per sample; anchored at P4
    carried = 0.75 * ((256 + B_HALF) * 10) / ((16 + B_HALF) * 8)
    assert rows["P4"]["generate_s"] == pytest.approx(0.75) and rows["P4"]["throughput_samples_per_s"] == pytest.approx(16.0)
    assert rows["P64"]["generate_s"] == pytest.approx(carried)
    assert rows["P64"]["generate_s_measured"] == pytest.approx(3.0)
    assert rows["P64"]["step_s"] == pytest.approx(4.0 - 3.0 + carried)
    assert rows["P64"]["throughput_samples_per_s"] == pytest.approx(256 / (1.0 + carried))
    assert rows["P64"]["throughput_max_samples_per_s"] == pytest.approx(256 / (1.0 + carried))
    assert doc["generation_backend"] == "openai"
    assert doc["generation_source"].startswith(f"the openai server at {SERVER['url']} (model served-model, "
                                               "version 0.32.0")
    assert "knee of the openai server at" in doc["throughput_method"]
    assert "tokens per sample" in doc["throughput_method"]
    assert doc["regime"]["sentence"].endswith(f"Generation knee from {doc['generation_source']}.")
    # the measured plan has P64 winning on throughput; the server's early knee takes most of that gain away
    assert rows["P64"]["throughput_gain"] < measured["rows"][1]["throughput_gain"]

    assert main(["plan", str(sweep), "--generation-profile", str(server)]) == 0
    out = capsys.readouterr().out
    assert "Generation: knee from the openai server at http://127.0.0.1:8000/v1" in out.replace("\n", " ")


def test_predict_says_which_server_its_generation_time_came_from(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "sweep")
    server = write_document(tmp_path / "server.json", server_profile([1, 64], [10.0, 90.0], knee=KNEE))
    run_dir = sweep / "runs" / "P4__s0"
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for record in lines:  # one run that logs the gradient noise terms, as every batchscale run does
        if record["kind"] == "step":
            record.update({"gns/grad_sq": 1.0, "gns/trace_sigma": 64.0, "gns/b_noise": 64.0})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    code = main(["predict", str(run_dir), "--generation-profile", str(server), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["generation_source"].startswith("the openai server at http://127.0.0.1:8000/v1")
    assert "measured on the openai server" in doc["throughput_method"]


@pytest.mark.slow
def test_the_report_names_the_server(tmp_path):
    from batchscale.report.build import write_report

    sweep = write_sweep(tmp_path / "sweep")
    write_document(sweep / "profiles" / "generation.json", server_profile([1, 64], [10.0, 90.0], knee=KNEE))
    written = write_report(sweep)
    for key in ("report_md", "report_html"):
        text = Path(written[key]).read_text(encoding="utf-8")
        assert "127.0.0.1:8000" in text and "ignore_eos honoured" in text, key
    shutil.rmtree(sweep)
