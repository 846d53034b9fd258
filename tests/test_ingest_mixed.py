"""A sweep directory mixing native run directories and verl-imported ones is analysed and planned unchanged.

The test writes synthetic native runs (analysis/synthetic.py), re-expresses some of them as verl file-logger JSONL and
some as verl's console log (what `trainer.logger=console` prints, saved with `tee`), imports those with
`batchscale import verl` into the same sweep (one label has one native and one imported seed), and
checks that `batchscale analyze` and `batchscale plan` give exactly the answers they give on the all-native twin sweep.
"""

from __future__ import annotations

import json
import pprint
import shutil
import warnings
from pathlib import Path

import pytest

from batchscale.analysis.synthetic import write_synthetic_run
from batchscale.cli import main

G, SEEDS, NOISE_SCALE = 8, (0, 1), 1024.0
PROMPTS = (8, 16, 64, 128)
IMPORTED = {(16, 1), (64, 0), (64, 1), (128, 0), (128, 1)}  # (P, seed); P = 8, the reference, stays native
CONSOLE = {(64, 1), (128, 0)}  # of IMPORTED: re-expressed as verl's console log instead of its JSONL
VAL_KEY = "val-core/synthetic/acc/mean@1"


def label_of(prompts: int) -> str:
    return f"grpo-P{prompts}-G{G}-sqrt"


def native_to_verl_jsonl(run_dir: Path, log: Path, console: bool = False) -> Path:
    """The same run as verl's file logger would have written it: {"step": N, "data": {...}} per line; with `console`,
    as verl >= 0.5 prints it (`step:N - key:pprint.pformat(value)`, behind Ray's prefix)."""
    lines: dict[int, dict] = {}
    for record in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()):
        data = lines.setdefault(record["step"], {})
        if record["kind"] == "eval":
            data[VAL_KEY] = record["eval/accuracy"]
            continue
        data.update({
            "training/global_step": record["step"], "timing_s/gen": record["time/generate"],
            "timing_s/update_actor": record["time/train"], "timing_s/step": record["time/step"],
            "actor/grad_norm": record["grad_norm/actor"], "actor/lr": record["lr/actor"],
            "critic/score/mean": record["reward/mean"], "response_length/mean": record["response/length_mean"],
        })
    if console:
        log.write_text("".join("(TaskRunner pid=7) " + " - ".join([f"step:{step}"] + [
            f"{k}:{pprint.pformat(v)}" for k, v in data.items()]) + "\n" for step, data in sorted(lines.items())))
        return log
    log.write_text("".join(json.dumps({"step": step, "data": data}) + "\n" for step, data in sorted(lines.items())))
    return log


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """(mixed sweep, all-native twin): the same curves, some of the mixed sweep's runs imported from verl logs."""
    root = tmp_path_factory.mktemp("mixed")
    native, mixed = root / "native", root / "mixed"
    for prompts in PROMPTS:
        lr = 1e-6 * (prompts / PROMPTS[0]) ** 0.5
        for seed in SEEDS:
            name = f"{label_of(prompts)}__s{seed}"
            write_synthetic_run(native / "runs" / name, label_of(prompts), seed, prompts, G, "sqrt", lr,
                                noise_scale=NOISE_SCALE)
            if (prompts, seed) not in IMPORTED:
                shutil.copytree(native / "runs" / name, mixed / "runs" / name)
                continue
            console = (prompts, seed) in CONSOLE
            log = native_to_verl_jsonl(native / "runs" / name, root / f"{name}.{'log' if console else 'jsonl'}",
                                       console)
            code = main(["import", "verl", str(log), "--out", str(mixed / "runs" / name), "--label", label_of(prompts),
                         "--prompts-per-step", str(prompts), "--samples-per-prompt", str(G), "--seed", str(seed),
                         "--lr-rule", "sqrt"])  # what an exported launcher's import line passes
            assert code == 0
    return mixed, native


def run_json(capsys, *argv) -> dict:
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_mixed_sweep_really_mixes_sources(sweeps):
    mixed, _ = sweeps
    sources = {p.name: json.loads((p / "run.json").read_text())["source"] for p in (mixed / "runs").iterdir()}
    assert sorted(sources.values()).count("verl") == len(IMPORTED)
    assert sources[f"{label_of(16)}__s0"] == "synthetic" and sources[f"{label_of(16)}__s1"] == "verl"
    shapes = {p.name: json.loads((p / "run.json").read_text()).get("import", {}).get("shape")
              for p in (mixed / "runs").iterdir()}
    assert shapes[f"{label_of(64)}__s1"] == "console text" and shapes[f"{label_of(64)}__s0"] == "file logger JSONL"


def test_analyze_and_plan_give_the_native_answers(sweeps, capsys):
    mixed, native = sweeps
    got, want = run_json(capsys, "analyze", str(mixed)), run_json(capsys, "analyze", str(native))
    assert set(got["configs"]) == {label_of(p) for p in PROMPTS}
    assert got["reference"] == want["reference"] == label_of(PROMPTS[0])
    assert got["target"] == pytest.approx(want["target"])
    for label, config in want["configs"].items():
        assert got["configs"][label] == config, label  # the same numbers, not merely close ones
    assert got["b_simple"] == pytest.approx(want["b_simple"])
    assert got["configs"][label_of(16)]["seeds"] == want["configs"][label_of(16)]["seeds"]  # both seeds, both sources

    got_plan, want_plan = run_json(capsys, "plan", str(mixed)), run_json(capsys, "plan", str(native))
    assert got_plan["best"] == want_plan["best"] and got_plan["reference"] == want_plan["reference"]
    rows = {r["label"]: r for r in want_plan["rows"]}
    assert {r["label"] for r in got_plan["rows"]} == set(rows)
    for row in got_plan["rows"]:
        for key in ("r_n", "throughput_gain", "time_to_target", "normalized_time_to_target", "feasible"):
            assert row[key] == pytest.approx(rows[row["label"]][key]), (row["label"], key)


def test_import_keeps_the_lr_rule_it_is_given(sweeps, tmp_path, capsys):
    mixed, native = sweeps
    run = json.loads((mixed / "runs" / f"{label_of(64)}__s0" / "run.json").read_text())
    assert run["lr_rule"] == "sqrt" and run["source"] == "verl"  # so it stays in the reference's LR family
    log = native_to_verl_jsonl(native / "runs" / f"{label_of(64)}__s0", tmp_path / "log.jsonl")
    args = ["import", "verl", str(log), "--out", str(tmp_path / "run"), "--prompts-per-step", "64",
            "--samples-per-prompt", str(G)]
    assert main([*args, "--lr-rule", "cubic"]) == 2
    assert "--lr-rule" in capsys.readouterr().err and not (tmp_path / "run").exists()
    assert main(args) == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["lr_rule"] == "unknown"
