"""The summary of benchmarks/gpu_check.sh: OUT/summary.json, OUT/summary.md and OUT/logs.tar.gz from WORK.

Standard library only, run with `python3 -I` (no PYTHONPATH, so neither batchscale nor pydantic): the summary is
written exactly when set-up is broken too. It therefore reads the stages' documents as plain JSON by their keys
(`profile generation/training --json`, `analyze --json`, `plan --json`: the schemas of batchscale.rundir.documents);
a document missing or without a key is reported as such, never a crash.

Reported: the stage table and what did not run, and why; the device and the two ceilings measured in the same run
(copy bandwidth, bf16 matmul rate); the CUDA tests; engine vs HF generate tokens/s per concurrency with the fraction of
both ceilings (decode weight bytes read per second over the copy bandwidth; 2 x matmul parameters x tokens/s over the
bf16 rate), the knee with its "extrapolated" flag; training time per batch with utilization of the measured bf16 rate
and of the datasheet peak; the GRPO sweep's N*, rN, decision and regime.

    python3 -I benchmarks/gpu_summary.py WORK OUT          write the summary (gpu_check.sh's last step)
    python3 -I benchmarks/gpu_summary.py --tests XML cuda|cpu  the CUDA tests' verdict: exit 1 with the reason
"""

from __future__ import annotations

import csv
import json
import sys
import tarfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

MODELS = {"smollm2": "SmolLM2-135M shape", "qwen": "Qwen2.5-0.5B shape"}
RANDOM_WEIGHTS = ("SmolLM2-135M and the Qwen2.5-0.5B shape are built from their configs (examples/models/) with seeded "
                  "random weights: their costs are real, their text is not; the GRPO sweep runs the warm-started tiny "
                  "model shipped in git.")
NOT_ATTEMPTED = {"vllm": "not attempted: no registry on the GPU machine, and its wheels are far over the 64 MiB that "
                         "travel"}
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
ARCHIVED = {".log", ".json", ".jsonl", ".tsv", ".xml", ".toml", ".csv", ".md", ".txt"}
ARCHIVE_FILE_MAX = 4 * 2**20  # per file; the archive as a whole stays far under the 16 MiB a returned file may hold


def load(path: Path):
    """(document, None) or (None, why)."""
    if not path.is_file():
        return None, f"{path.name} was not written"
    try:
        return json.loads(path.read_text()), None
    except (OSError, ValueError) as e:
        return None, f"{path.name} is unreadable ({e})"


def read_stages(work: Path) -> list[dict]:
    path = work / "stages.tsv"
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [{**row, "seconds": int(row["seconds"]), "limit_s": int(row["limit_s"])} for row in rows]


def read_tests(xml: Path) -> dict | None:
    if not xml.is_file():
        return None
    root = ElementTree.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    reasons = sorted({(case.find("skipped").get("message") or "")[:160] for case in suite.iter("testcase")
                      if case.find("skipped") is not None})
    return {**counts, "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
            "failed": failed, "skip_reasons": reasons}


def tests_verdict(tests: dict | None, device: str) -> str | None:
    """Why the CUDA tests did not pass, None when they did. On CUDA every selected test must run and pass ("all
    skipped" is a failure); on the CPU rehearsal every one must be selected and skipped for want of CUDA."""
    if tests is None:
        return "no JUnit XML: pytest did not run"
    if tests["tests"] == 0:
        return "no test selected: -m gpu found nothing in the files"
    if tests["failed"]:
        return f"{len(tests['failed'])} failed: {', '.join(tests['failed'][:5])}"
    if device == "cuda" and (tests["skipped"] or not tests["passed"]):
        return f"{tests['skipped']} of {tests['tests']} skipped on a GPU: {'; '.join(tests['skip_reasons'])}"
    if device == "cpu" and tests["passed"]:
        return f"{tests['passed']} ran without CUDA: a test marked gpu does not need the GPU"
    return None


def best(block: dict | None) -> float | None:
    return None if block is None else block["best"]


def summarize_ceilings(results: Path) -> dict:
    doc, why = load(results / "ceilings.json")
    if doc is None:
        return {"missing": why}
    copy, matmul = doc["copy"], doc["matmul_bf16"]
    return {"device": doc["name"], "copy_bytes_per_s": copy["bytes_per_s"]["best"],
            "copy_bytes_per_s_median": copy["bytes_per_s"]["median"], "copy_buffer_bytes": copy["buffer_bytes"],
            "matmul_bf16_flops_per_s": matmul["flops_per_s"]["best"],
            "matmul_bf16_flops_per_s_median": matmul["flops_per_s"]["median"], "matmul_n": matmul["n"]}


def knee_text(knee: dict | None, largest: int) -> str:
    """The knee with its flag: an extrapolated B_90 lies beyond every level measured, so it is a forecast."""
    if knee is None:
        return "no knee (fewer than 2 levels)"
    where = (f"extrapolated: beyond the largest level measured, {largest}; throughput still rising there"
             if knee["extrapolated"] else "within the levels measured")
    doubling = knee["doubling_knee"] if knee["doubling_knee"] is not None else f"none up to {largest}"
    return (f"B_90 = {knee['b_90']:.3g} ({where}); doubling knee ({knee['doubling_threshold']:.0%}): {doubling}; "
            f"fit R^2 {knee['r2']:.3f}")


def summarize_generation(doc: dict, ceilings: dict) -> dict:
    itemsize = ITEMSIZE.get(doc["compute_dtype"], 4)
    roofline = doc.get("roofline")
    weight_bytes = roofline["weight_bytes"] if roofline else doc["params"] * itemsize
    copy, matmul = ceilings.get("copy_bytes_per_s"), ceilings.get("matmul_bf16_flops_per_s")
    rows = {}
    for row in doc["rows"]:
        bytes_per_s = (row["decode_steps"] or 0) * weight_bytes / row["time_s"]
        flops_per_s = 2 * weight_bytes / itemsize * row["tokens_per_s"]  # each generated token through every matrix
        rows[row["concurrency"]] = {
            "tokens_per_s": row["tokens_per_s"], "weight_bytes_per_s": bytes_per_s, "flops_per_s": flops_per_s,
            "of_copy_ceiling": bytes_per_s / copy if copy else None,
            "of_matmul_ceiling": flops_per_s / matmul if matmul else None,
            "of_datasheet_bandwidth": row.get("bandwidth_fraction"), "active_mean": row["active_mean"],
            "cuda_max_allocated_mb": row.get("cuda_max_allocated_mb")}
    largest = max(rows)
    return {"model": doc["model"], "params": doc["params"], "compute_dtype": doc["compute_dtype"],
            "device": doc["device"], "hardware": roofline["hardware"] if roofline else None,
            "max_new_tokens": doc["sampling"]["max_new_tokens"], "rows": rows, "knee": doc["knee"],
            "knee_text": knee_text(doc["knee"], largest)}


def summarize_training(doc: dict, ceilings: dict) -> dict:
    matmul = ceilings.get("matmul_bf16_flops_per_s")
    return {"model": doc["model"], "params": doc["params"], "compute_dtype": doc["compute_dtype"],
            "device": doc["device"], "micro_batch_size": doc["micro_batch_size"], "synthetic_lengths": doc.get("synthetic_lengths"),
            "hardware": (doc.get("roofline") or {}).get("hardware"), "fit": doc["fit"],
            "rows": [{"samples_per_update": r["samples_per_update"], "tokens": r["tokens"], "seconds": r["seconds"],
                      "tokens_per_s": r["tokens_per_s"], "flops_per_s": r["flops_per_s"],
                      "of_matmul_ceiling": r["flops_per_s"] / matmul if matmul else None,
                      "of_datasheet_peak": r.get("utilization_of_preset"),
                      "of_profile_gemm": r["utilization"], "cuda_max_allocated_mb": r.get("cuda_max_allocated_mb")}
                     for r in doc["rows"]]}


def summarize_sweep(results: Path) -> dict:
    analysis, why_analysis = load(results / "analysis.json")
    plan, why_plan = load(results / "plan.json")
    result = {"missing": [why for why in (why_analysis, why_plan) if why]}
    if analysis is not None:
        result.update(reference=analysis["reference"], target=analysis["target"], b_simple=analysis["b_simple"],
                      learning_signal=analysis["learning_signal"], why_no_signal=analysis.get("why_no_signal"),
                      labels={label: {"samples_per_step": c["samples_per_step"],
                                      "n_star": c["samples_to_target"]["mean"], "r_n": c["r_n"],
                                      "r_n_predicted": c["r_n_predicted"]}
                              for label, c in sorted(analysis["configs"].items(),
                                                     key=lambda kv: kv[1]["samples_per_step"])})
    if plan is not None:
        result.update(best=plan["best"], resolved=plan["resolved"], explanation=plan["explanation"],
                      regime=plan["regime"]["sentence"],
                      rows={row["label"]: {"throughput_samples_per_s": row["throughput_samples_per_s"],
                                           "normalized_time_to_target": row["normalized_time_to_target"]}
                            for row in plan["rows"]})
    return result


def guarded(what: str, build, *args) -> dict:
    """`build(*args)`, or {"missing": why} when a document lacks a key the schema promises."""
    try:
        return build(*args)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        return {"missing": f"{what} is not as batchscale writes it ({type(e).__name__}: {e})"}


def summarize(work: Path) -> dict:
    results = work / "results"
    stages = read_stages(work)
    ceilings = guarded("ceilings.json", summarize_ceilings, results)
    documents = {}
    for model in MODELS:
        for kind in ("generation", "training"):
            for backend in (("engine", "hf") if kind == "generation" else ("",)):
                name = f"{kind}_{model}{'_' + backend if backend else ''}"
                doc, why = load(results / f"{name}.json")
                build = summarize_generation if kind == "generation" else summarize_training
                documents[name] = {"missing": why} if doc is None else guarded(f"{name}.json", build, doc, ceilings)
    preflight, _ = load(results / "preflight.json")
    settings, _ = load(results / "settings.json")
    smi = results / "nvidia-smi.csv"
    not_ok = [{"stage": s["stage"], "status": s["status"], "why": s["note"]} for s in stages if s["status"] != "ok"]
    not_ok += [{"stage": name, "status": "skipped", "why": why} for name, why in NOT_ATTEMPTED.items()]
    return {"settings": settings, "preflight": preflight, "models_note": RANDOM_WEIGHTS,
            "nvidia_smi": smi.read_text().strip().splitlines()[-1] if smi.is_file() else None,
            "total_s": sum(s["seconds"] for s in stages), "stages": stages, "not_run_or_failed": not_ok,
            "ceilings": ceilings, "gpu_tests": read_tests(results / "gpu_tests.xml"), "documents": documents,
            "grpo_sweep": guarded("analysis.json/plan.json", summarize_sweep, results)}


def fmt(value, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def render_generation(model: str, engine: dict, hf: dict) -> list[str]:
    present = [(backend, doc) for backend, doc in (("engine", engine), ("hf", hf)) if "rows" in doc]
    lines = ["", f"## Generation: {present[0][1]['model'] if present else MODELS[model]} ({model} stages)", ""]
    lines += [f"- {backend}: {doc['missing']}" for backend, doc in (("engine", engine), ("HF", hf)) if "missing" in doc]
    if not present:
        return lines
    first = present[0][1]
    lines += [f"{first['params'] / 1e6:.1f}M parameters, {first['compute_dtype']} on {first['device']}, "
              f"{first['max_new_tokens']} new tokens per response. Fractions: of the copy bandwidth (weight bytes read "
              f"per decode step x steps/s) and of the bf16 matmul rate (2 x parameters x tok/s), both measured in this "
              f"run; prefill is in the time, so both are lower bounds.", "",
              "| B | engine tok/s | HF tok/s | engine/HF | engine: copy / bf16 | HF: copy / bf16 | engine MB |",
              "|---|---|---|---|---|---|---|"]
    levels = sorted({c for _, doc in present for c in doc["rows"]}, key=int)
    for c in levels:
        e, h = engine.get("rows", {}).get(c, {}), hf.get("rows", {}).get(c, {})
        ratio = e["tokens_per_s"] / h["tokens_per_s"] if e and h else None
        both = [f"{fmt(x.get('of_copy_ceiling'), '.1%')} / {fmt(x.get('of_matmul_ceiling'), '.2%')}" for x in (e, h)]
        lines.append(f"| {c} | {fmt(e.get('tokens_per_s'), '.4g')} | {fmt(h.get('tokens_per_s'), '.4g')} | "
                     f"{fmt(ratio, '.2f')} | {both[0]} | {both[1]} | {fmt(e.get('cuda_max_allocated_mb'), '.0f')} |")
    lines.append("")
    for backend, doc in present:
        at_1 = doc["rows"].get(min(doc["rows"], key=int), {}).get("of_datasheet_bandwidth")
        datasheet = f"; at B = 1 {fmt(at_1, '.1%')} of {doc['hardware']}'s datasheet bandwidth" if doc["hardware"] else ""
        lines.append(f"- {backend} knee: {doc['knee_text']}{datasheet}")
    return lines


def render_training(model: str, doc: dict) -> list[str]:
    lines = ["", f"## Training: {doc.get('model', MODELS[model])} (training_{model})", ""]
    if "missing" in doc:
        return lines + [f"- {doc['missing']}"]
    lengths = doc["synthetic_lengths"] or {}
    lines += [f"{doc['params'] / 1e6:.1f}M parameters, {doc['compute_dtype']} arithmetic on "
              f"{doc['device']}, micro-batch {doc['micro_batch_size']}, samples of {lengths.get('prompt_tokens')} + "
              f"{lengths.get('response_tokens')} random tokens (the task's ~11-token samples would leave the GPU "
              f"launch-bound). Utilization by 6 N D: of the bf16 rate measured in this run, of "
              f"{doc['hardware'] or 'the'} datasheet peak, of the profile's own model-shaped GEMM.", "",
              "| samples/update | tokens | s | tok/s | TFLOP/s | of measured bf16 | of datasheet | of GEMM | peak MB |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['samples_per_update']} | {r['tokens']} | {r['seconds']:.3f} | {r['tokens_per_s']:.4g} | "
              f"{r['flops_per_s'] / 1e12:.3g} | {fmt(r['of_matmul_ceiling'], '.1%')} | "
              f"{fmt(r['of_datasheet_peak'], '.1%')} | {fmt(r['of_profile_gemm'], '.1%')} | "
              f"{fmt(r['cuda_max_allocated_mb'], '.0f')} |" for r in doc["rows"]]
    return lines


def render_sweep(sweep: dict) -> list[str]:
    lines = ["", "## GRPO sweep (tiny model, one seed)", ""] + [f"- {why}" for why in sweep["missing"]]
    if "labels" in sweep:
        lines += [f"reference {sweep['reference']}, target {fmt(sweep['target'])}, B_simple {fmt(sweep['b_simple'])}"
                  + ("" if sweep["learning_signal"] else f"; no learning signal: {sweep['why_no_signal']}"), "",
                  "| label | B_train | N* | rN | rN predicted | q samples/s | T/T_ref |", "|---|---|---|---|---|---|---|"]
        rows = sweep.get("rows", {})
        lines += [f"| {label} | {a['samples_per_step']} | {fmt(a['n_star'], '.0f')} | {fmt(a['r_n'], '.2f')} | "
                  f"{fmt(a['r_n_predicted'], '.2f')} | {fmt(rows.get(label, {}).get('throughput_samples_per_s'), '.1f')} | "
                  f"{fmt(rows.get(label, {}).get('normalized_time_to_target'), '.2f')} |"
                  for label, a in sweep["labels"].items()]
    if "best" in sweep:
        decision = f"{sweep['best']}" if sweep["best"] else "none"
        lines += ["", f"decision: {decision} (resolved: {sweep['resolved']}); regime: {sweep['regime']}"]
    return lines


def render_markdown(summary: dict) -> str:
    pre, settings, ceilings = summary["preflight"] or {}, summary["settings"] or {}, summary["ceilings"]
    device = pre.get("gpu") or summary["nvidia_smi"] or settings.get("device") or "device unknown"
    lines = [f"# GPU check: {device}", "",
             f"Python {pre.get('python', '?')}, torch {pre.get('torch', '?')} (CUDA {pre.get('torch_cuda')}), sizes "
             f"{settings.get('size', '?')}, budget {settings.get('budget_s', '?')} s; stages took {summary['total_s']} s. "
             + summary["models_note"], "", "| stage | status | s | limit s | note |", "|---|---|---|---|---|"]
    lines += [f"| {s['stage']} | {s['status']} | {s['seconds']} | {s['limit_s']} | {s['note']} |" for s in summary["stages"]]
    lines += ["", "Not run or failed: " + ("; ".join(f"{x['stage']} ({x['status']}: {x['why']})"
                                                     for x in summary["not_run_or_failed"]) or "none")]
    lines += ["", "## Ceilings measured in this run", ""]
    lines.append(f"- {ceilings['missing']}" if "missing" in ceilings else
                 f"copy {ceilings['copy_bytes_per_s'] / 1e9:.1f} GB/s (read + written, "
                 f"{ceilings['copy_buffer_bytes'] / 2**20:.0f} MiB buffer; median {ceilings['copy_bytes_per_s_median'] / 1e9:.1f}); bf16 matmul "
                 f"{ceilings['matmul_bf16_flops_per_s'] / 1e12:.3g} TFLOP/s at n = {ceilings['matmul_n']} (median "
                 f"{ceilings['matmul_bf16_flops_per_s_median'] / 1e12:.3g}). H200 datasheet: 4800 GB/s, 989 TFLOP/s.")
    tests, verdict = summary["gpu_tests"], tests_verdict(summary["gpu_tests"], settings.get("device", "cuda"))
    lines += ["", "## CUDA tests (pytest -m gpu)", "", "not run" if tests is None else
              f"{tests['passed']} passed, {tests['failures'] + tests['errors']} failed, {tests['skipped']} skipped: "
              + (verdict or ("all ran and passed" if settings.get("device") == "cuda" else
                             "all skipped for want of CUDA, as they must be on the CPU"))]
    docs = summary["documents"]
    for model in MODELS:
        lines += render_generation(model, docs[f"generation_{model}_engine"], docs[f"generation_{model}_hf"])
        lines += render_training(model, docs[f"training_{model}"])
    lines += render_sweep(summary["grpo_sweep"])
    return "\n".join(lines) + "\n"


def archive(work: Path, target: Path) -> list[str]:
    """The logs and result documents (no model weights, caches or installed wheels) as one .tar.gz; returns what was
    left out for its size."""
    left_out = []
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            relative = path.relative_to(work)
            if not path.is_file() or path.is_symlink() or relative.parts[0] in ("cache", "site") \
                    or "policy" in relative.parts or path.suffix not in ARCHIVED:
                continue
            if path.stat().st_size > ARCHIVE_FILE_MAX:
                left_out.append(f"{relative} ({path.stat().st_size / 2**20:.1f} MiB)")
                continue
            tar.add(path, arcname=str(relative))
    return left_out


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--tests":
        verdict = tests_verdict(read_tests(Path(argv[1])), argv[2])
        print(f"gpu tests: {verdict or 'ok'}")
        return 1 if verdict else 0
    if len(argv) != 2 or not Path(argv[0]).is_dir():
        print("usage: gpu_summary.py WORK OUT | --tests JUNIT_XML cuda|cpu", file=sys.stderr)
        return 2
    work, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(work)
    summary["archive_left_out"] = archive(work, out / "logs.tar.gz")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    markdown = render_markdown(summary)
    if summary["archive_left_out"]:
        markdown += "\nLeft out of logs.tar.gz for size: " + ", ".join(summary["archive_left_out"]) + "\n"
    (out / "summary.md").write_text(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
