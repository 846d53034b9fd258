"""The summary of benchmarks/gpu_check.sh: OUT_DIR/summary.json and OUT_DIR/summary.md from what its stages wrote.

Reads the stage table (stages.tsv, written by gpu_check.sh), the `gpu` tests' JUnit XML, the generation and training
profiles and the sweep's analysis and plan (each through `batchscale.rundir.read_document`, the one reader of those
documents), and reports: engine vs HF generate tokens/s per concurrency and the engine's speed-up, the fraction of the
HBM roofline at concurrency 1, training utilization of the dense bf16 peak, CUDA peak memory, and the GRPO sweep's
N*, rN, decision and regime. A stage that did not run or failed is listed with its reason; its section says so instead
of a number. Torch-free: it only reads files.

    .venv/bin/python benchmarks/gpu_summary.py OUT_DIR
"""

from __future__ import annotations

import csv
import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from batchscale.errors import UserError
from batchscale.rundir import AnalysisDocument, GenerationProfile, PlanDocument, TrainingProfile, read_document

MODELS = {"smollm2": "SmolLM2-135M", "qwen": "Qwen2.5-0.5B-shaped (random weights, examples/models/qwen2.5-0.5b)"}
NOT_STAGES = {"vllm": "not attempted: installing vLLM for CUDA takes longer than the whole 9-minute budget"}


def read_stages(out: Path) -> list[dict]:
    path = out / "stages.tsv"
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return [{**row, "seconds": int(row["seconds"]), "limit_s": int(row["limit_s"])}
                for row in csv.DictReader(f, delimiter="\t")]


def read_tests(out: Path) -> dict | None:
    path = out / "gpu_tests.xml"
    if not path.is_file():
        return None
    suite = ElementTree.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    return {**counts, "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
            "failed": failed}


def optional(path: Path, kind):
    """The document at `path`, or None with the reason (missing, or invalid: the UserError's line)."""
    if not path.is_file():
        return None, f"{path.name} was not written"
    try:
        return read_document(path, kind), None
    except UserError as e:
        return None, str(e)


def summarize_generation(out: Path, model: str) -> dict:
    profiles, missing = {}, {}
    for backend in ("engine", "hf"):
        profile, why = optional(out / f"generation_{model}_{backend}.json", GenerationProfile)
        if profile is None:
            missing[backend] = why
        else:
            profiles[backend] = profile
    result = {"model": MODELS[model], "missing": missing}
    for backend, profile in profiles.items():
        result[backend] = {
            "compute_dtype": profile.compute_dtype,
            "tokens_per_s": {row.concurrency: row.tokens_per_s for row in profile.rows},
            "cuda_max_allocated_mb": {row.concurrency: row.cuda_max_allocated_mb for row in profile.rows},
            "bandwidth_fraction_at_1": profile.roofline.bandwidth_fraction_at_1 if profile.roofline else None,
            "hardware": profile.roofline.hardware if profile.roofline else None,
            "knee_b_90": profile.knee.b_90 if profile.knee else None,
        }
    if len(profiles) == 2:
        engine, hf = result["engine"]["tokens_per_s"], result["hf"]["tokens_per_s"]
        result["engine_over_hf"] = {c: engine[c] / hf[c] for c in engine if c in hf}
    return result


def summarize_training(out: Path) -> dict:
    profile, why = optional(out / "training_qwen.json", TrainingProfile)
    if profile is None:
        return {"model": MODELS["qwen"], "missing": why}
    return {
        "model": MODELS["qwen"], "compute_dtype": profile.compute_dtype, "device": profile.device,
        "hardware": profile.roofline.hardware if profile.roofline else None,
        "utilization_best": profile.roofline.utilization_best if profile.roofline else None,
        "rows": [{"samples_per_update": row.samples_per_update, "seconds": row.seconds, "tokens_per_s": row.tokens_per_s,
                  "flops_per_s": row.flops_per_s, "utilization_of_preset": row.utilization_of_preset,
                  "utilization_of_measured_matmul": row.utilization, "cuda_max_allocated_mb": row.cuda_max_allocated_mb}
                 for row in profile.rows],
    }


def summarize_sweep(out: Path) -> dict:
    analysis, why_analysis = optional(out / "analysis.json", AnalysisDocument)
    plan, why_plan = optional(out / "plan.json", PlanDocument)
    result = {"missing": [why for why in (why_analysis, why_plan) if why]}
    if analysis is not None:
        result.update(reference=analysis.reference, target=analysis.target, b_simple=analysis.b_simple,
                      learning_signal=analysis.learning_signal,
                      labels={label: {"samples_per_step": a.samples_per_step, "n_star": a.samples_to_target.mean,
                                      "r_n": a.r_n, "r_n_predicted": a.r_n_predicted}
                              for label, a in sorted(analysis.configs.items(), key=lambda kv: kv[1].samples_per_step)})
    if plan is not None:
        result.update(best=plan.best, resolved=plan.resolved, explanation=plan.explanation,
                      regime=plan.regime.model_dump(mode="json"),
                      rows={row.label: {"throughput_samples_per_s": row.throughput_samples_per_s,
                                        "normalized_time_to_target": row.normalized_time_to_target}
                            for row in plan.rows})
    return result


def summarize(out: Path) -> dict:
    stages = read_stages(out)
    gpu = (out / "nvidia-smi.csv").read_text().strip().splitlines()[-1] if (out / "nvidia-smi.csv").is_file() else None
    not_ok = [{"stage": s["stage"], "status": s["status"], "why": s["note"]} for s in stages if s["status"] != "ok"]
    not_ok += [{"stage": name, "status": "skipped", "why": why} for name, why in NOT_STAGES.items()]
    return {
        "gpu": gpu,
        "total_s": sum(s["seconds"] for s in stages),
        "stages": stages,
        "not_run_or_failed": not_ok,
        "gpu_tests": read_tests(out),
        "generation": {model: summarize_generation(out, model) for model in MODELS},
        "training": summarize_training(out),
        "grpo_sweep": summarize_sweep(out),
    }


def fmt(value, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def render_markdown(summary: dict) -> str:
    lines = [f"# GPU check: {summary['gpu'] or 'GPU unknown'}", "",
             f"Stages took {summary['total_s']} s in all.", "", "| stage | status | s | limit s | note |",
             "|---|---|---|---|---|"]
    lines += [f"| {s['stage']} | {s['status']} | {s['seconds']} | {s['limit_s']} | {s['note']} |"
              for s in summary["stages"]]
    lines += ["", "Not run or failed: " + ("; ".join(f"{x['stage']} ({x['status']}: {x['why']})"
                                                     for x in summary["not_run_or_failed"]) or "none")]
    tests = summary["gpu_tests"]
    lines += ["", "## gpu tests", "", "not run" if tests is None else
              f"{tests['passed']} passed, {tests['failures'] + tests['errors']} failed, {tests['skipped']} skipped"
              + (f": {', '.join(tests['failed'])}" if tests["failed"] else "")]
    for generation in summary["generation"].values():
        lines += ["", f"## Generation: {generation['model']}", ""]
        lines += [f"- {backend}: {why}" for backend, why in generation["missing"].items()]
        if "engine" in generation and "hf" in generation:
            lines += ["| concurrency | engine tok/s | HF tok/s | engine / HF | engine peak MB |", "|---|---|---|---|---|"]
            for c, tokens_per_s in generation["engine"]["tokens_per_s"].items():
                lines.append(f"| {c} | {tokens_per_s:.0f} | {fmt(generation['hf']['tokens_per_s'].get(c), '.0f')} | "
                             f"{fmt(generation['engine_over_hf'].get(c), '.2f')} | "
                             f"{fmt(generation['engine']['cuda_max_allocated_mb'].get(c), '.0f')} |")
            lines.append("")
        for backend in ("engine", "hf"):
            if backend in generation:
                g = generation[backend]
                lines.append(f"- {backend} ({g['compute_dtype']}): concurrency 1 realizes "
                             f"{fmt(g['bandwidth_fraction_at_1'], '.1%')} of {g['hardware'] or 'the'} HBM bandwidth; "
                             f"knee B_90 {fmt(g['knee_b_90'])}")
    training = summary["training"]
    lines += ["", f"## Training: {training['model']}", ""]
    if "rows" not in training:
        lines.append(f"- {training['missing']}")
    else:
        lines += [f"{training['compute_dtype']} arithmetic on {training['device']}; best update "
                  f"{fmt(training['utilization_best'], '.1%')} of {training['hardware'] or 'the preset'}'s dense bf16 peak",
                  "", "| samples/update | s | tok/s | TFLOP/s | of bf16 peak | peak MB |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['samples_per_update']} | {r['seconds']:.3f} | {r['tokens_per_s']:.0f} | "
                  f"{r['flops_per_s'] / 1e12:.2f} | {fmt(r['utilization_of_preset'], '.1%')} | "
                  f"{fmt(r['cuda_max_allocated_mb'], '.0f')} |" for r in training["rows"]]
    sweep = summary["grpo_sweep"]
    lines += ["", "## GRPO sweep (tiny model, G = 8, P = 4, 8, 16, one seed)", ""]
    lines += [f"- {why}" for why in sweep["missing"]]
    if "labels" in sweep:
        lines += [f"reference {sweep['reference']}, target {fmt(sweep['target'])}, B_simple {fmt(sweep['b_simple'])}", "",
                  "| label | B_train | N* | rN | rN predicted | q samples/s | T/T_ref |", "|---|---|---|---|---|---|---|"]
        rows = sweep.get("rows", {})
        lines += [f"| {label} | {a['samples_per_step']} | {fmt(a['n_star'], '.0f')} | {fmt(a['r_n'], '.2f')} | "
                  f"{fmt(a['r_n_predicted'], '.2f')} | {fmt(rows.get(label, {}).get('throughput_samples_per_s'), '.1f')} | "
                  f"{fmt(rows.get(label, {}).get('normalized_time_to_target'), '.2f')} |"
                  for label, a in sweep["labels"].items()]
    if "best" in sweep:
        lines += ["", f"decision: {sweep['best']} (resolved: {sweep['resolved']}): {sweep['explanation']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: benchmarks/gpu_summary.py OUT_DIR (the directory gpu_check.sh wrote)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    summary = summarize(out)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(render_markdown(summary))
    print(render_markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
