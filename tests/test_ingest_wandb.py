"""`batchscale import wandb-csv`: W&B history exports in verl, OpenRLHF and TRL key styles."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_ingest_common import check_run_dir

from batchscale.cli import main
from batchscale.errors import UserError
from batchscale.ingest.importer import import_log

P, G = 16, 4


def write_csv(path: Path, rows: list[dict]) -> Path:
    """A W&B history CSV: the union of the rows' keys as columns, empty cells where a row did not log a key."""
    columns = sorted({key for row in rows for key in row})
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_verl_style_history(tmp_path):
    rows = [{"_step": s, "_runtime": 100.0 + 7 * s, "timing_s/step": 6.0, "timing_s/gen": 4.0,
             "critic/score/mean": 0.1 * s, "actor/grad_norm": 0.5, "actor/lr": 3e-6, "response_length/mean": 200}
            for s in range(1, 4)]
    rows[1]["val-core/math/acc/mean@1"] = 0.33
    import_log("wandb-csv", write_csv(tmp_path / "h.csv", rows), tmp_path / "run", prompts_per_step=P,
               samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert run["source"] == "verl" and run["import"]["format"] == "wandb-csv"
    assert [r["wall_s"] for r in records if r["kind"] == "step"] == [6.0, 12.0, 18.0]  # time/step before _runtime
    assert [(r["step"], r["eval/accuracy"]) for r in records if r["kind"] == "eval"] == [(2, 0.33)]


def test_openrlhf_style_history_uses_global_step_and_runtime(tmp_path):
    rows = []
    for call, step in enumerate(range(1, 5)):
        rows.append({"_step": 2 * call, "_runtime": 30.0 * step, "train/global_step": step,
                     "train/actor_grad_norm": 1.0, "train/rollout/reward_mean": 0.2 * step,
                     "train/timing/generation": 20.0, "train/timing/ppo_train": 8.0})
        if step == 4:
            rows.append({"_step": 2 * call + 1, "_runtime": 30.0 * step + 5, "eval/global_step": step,
                         "eval/eval_gsm8k_pass1": 0.61, "eval/eval_gsm8k_pass8": 0.8})
    rows[2]["train/actor_grad_norm"] = "NaN"  # W&B writes NaN for a diverged value
    args = tmp_path / "args.json"  # OpenRLHF's arguments, newer dotted names, P and G taken from them
    args.write_text(json.dumps({"rollout": {"batch_size": P, "n_samples_per_prompt": G},
                                "actor": {"adam": {"lr": 1e-6}}, "seed": 7}))
    result = import_log("wandb-csv", write_csv(tmp_path / "h.csv", rows), tmp_path / "run", config_path=args)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert run["source"] == "openrlhf" and run["import"]["wall_s_from"] == "timestamps"
    assert run["lr"] == 1e-6 and run["seed"] == 7 and run["import"]["batch_from"]["prompts_per_step"] == "config"
    steps = [r for r in records if r["kind"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4] and [r["wall_s"] for r in steps] == [30.0, 60.0, 90.0, 120.0]
    assert "grad_norm/actor" not in steps[2]
    assert any("NaN" in p for p in result["run"]["import"]["problems"])
    (evaluation,) = [r for r in records if r["kind"] == "eval"]
    assert evaluation["step"] == 4 and evaluation["eval/accuracy"] == 0.61 and evaluation["wall_s"] == 120.0


def test_trl_style_history(tmp_path):
    rows = [{"_step": i, "_runtime": 9.0 * i, "train/global_step": 10 * i, "train/reward": 0.1 * i,
             "train/learning_rate": 1e-6, "train/grad_norm": 0.4, "train/completions/mean_length": 70.0,
             "train/epoch": 0.1 * i} for i in range(1, 4)]
    rows.append({"_step": 4, "_runtime": 30.0, "train/global_step": 30, "eval/reward": 0.5})
    import_log("wandb-csv", write_csv(tmp_path / "h.csv", rows), tmp_path / "run", prompts_per_step=P,
               samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert run["source"] == "trl" and run["import"]["unknown_keys"] == []
    assert [r["step"] for r in records] == [10, 20, 30, 30] and records[-1]["eval/score"] == 0.5


def test_csv_errors_and_truncated_row(tmp_path):
    rows = [{"_step": s, "_runtime": float(s), "timing_s/step": 1.0, "actor/grad_norm": 0.5} for s in range(1, 4)]
    path = write_csv(tmp_path / "h.csv", rows)
    path.write_text(path.read_text() + "4,4.0")  # killed mid-row
    result = import_log("wandb-csv", path, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    assert result["summary"]["steps"] == 3
    assert any("truncated" in p for p in result["run"]["import"]["problems"])
    bad = write_csv(tmp_path / "bad.csv", [{"_step": 1, "actor/grad_norm": "inf-ish"}])
    with pytest.raises(UserError, match="row 2, key 'actor/grad_norm'"):
        import_log("wandb-csv", bad, tmp_path / "run2", prompts_per_step=P, samples_per_prompt=G)
    no_step = write_csv(tmp_path / "nostep.csv", [{"actor/grad_norm": 1.0, "timing_s/step": 2.0}])
    with pytest.raises(UserError, match="missing step key"):
        import_log("wandb-csv", no_step, tmp_path / "run2", prompts_per_step=P, samples_per_prompt=G)
    alien = write_csv(tmp_path / "alien.csv", [{"_step": 1, "loss": 0.3, "top5": 0.9}])
    with pytest.raises(UserError, match="no column matches"):
        import_log("wandb-csv", alien, tmp_path / "run2", prompts_per_step=P, samples_per_prompt=G)
    assert not (tmp_path / "run2").exists()


def write_chart_export(path: Path, runs: dict[str, int], metric: str = "val-core/openai/gsm8k/reward/mean@1") -> Path:
    """A W&B panel's "Export as CSV": the x-axis column, then per run '<run> - <metric>' and its __MIN/__MAX band;
    runs logged at different steps leave each other's cells empty."""
    header = ["Step"] + [f"{run} - {metric}{band}" for run in runs for band in ("", "__MIN", "__MAX")]
    lines = [",".join(f'"{h}"' for h in header)]
    for step in range(0, 9):
        cells = [str(step)]
        for every in runs.values():
            value = f"{0.1 + 0.02 * step:.4f}" if step % every == 0 else ""
            cells += [value, value, value]
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_chart_export_gives_one_run_directory_per_run(tmp_path, capsys):
    chart = write_chart_export(tmp_path / "chart.csv", {"gsm8k-p64 (seed 1)": 2, "gsm8k-p128": 4})
    code = main(["import", "wandb-csv", str(chart), "--out", str(tmp_path / "runs"), "--prompts-per-step", str(P),
                 "--samples-per-prompt", str(G), "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(Path(r["run_dir"]).name for r in result["runs"]) == ["gsm8k-p128", "gsm8k-p64__seed_1"]
    records, run = check_run_dir(tmp_path / "runs" / "gsm8k-p64__seed_1", P, G)
    assert [(r["step"], r["eval/accuracy"]) for r in records] == [(s, pytest.approx(0.1 + 0.02 * s))
                                                                   for s in (0, 2, 4, 6, 8)]
    assert run["label"] == "gsm8k-p64__seed_1" and run["import"]["run_name"] == "gsm8k-p64 (seed 1)"
    assert run["import"]["shape"] == "W&B chart export"
    records, _ = check_run_dir(tmp_path / "runs" / "gsm8k-p128", P, G)
    assert [r["step"] for r in records] == [0, 4, 8]


def test_chart_export_refusals_name_the_run_and_the_fix(tmp_path):
    chart = write_chart_export(tmp_path / "chart.csv", {"a": 1, "b": 2})
    with pytest.raises(UserError, match=r"--label/--seed.*holds 2 runs \(a, b\).*each run is labelled"):
        import_log("wandb-csv", chart, tmp_path / "out", label="x", prompts_per_step=P, samples_per_prompt=G)
    chart = write_chart_export(tmp_path / "other.csv", {"a": 1}, metric="my/custom_metric")
    with pytest.raises(UserError, match=r"other.csv: run 'a'.*no metric matches.*my/custom_metric.*Fix: export a chart"):
        import_log("wandb-csv", chart, tmp_path / "out", prompts_per_step=P, samples_per_prompt=G)
    assert not (tmp_path / "out").exists()


def test_chart_export_with_a_stray_column_names_it(tmp_path):
    chart = tmp_path / "chart.csv"
    chart.write_text('"Step","a - critic/score/mean","notes"\n1,0.5,x\n')
    with pytest.raises(UserError, match=r"chart.csv: header: column 'notes' is not '<run> - <metric>'.*Fix: export"):
        import_log("wandb-csv", chart, tmp_path / "out", prompts_per_step=P, samples_per_prompt=G)
