"""`import_log`: one framework log in, one batchscale run directory out (written through `rundir.write_run`).

Pipeline: check --out -> parse the log into rows -> resolve P and G (flags, else the framework's config, else error)
and the updates each step makes -> build records (records.py; keys mapped by the table in common.py) -> write the run
directory atomically. Every problem with the input is a UserError raised before anything is written.
"""

from __future__ import annotations

import re
from pathlib import Path

from batchscale.config import read_lr_rule
from batchscale.errors import UserError
from batchscale.ingest.batch_size import resolve_batch
from batchscale.ingest.common import ParsedLog
from batchscale.ingest.frameworkconfig import find_config_file, read_config_file
from batchscale.ingest.inputs import input_kind
from batchscale.ingest.newer_formats import newer_reader
from batchscale.ingest.newer_frameworks import STEP_KEYS_BY_FRAMEWORK
from batchscale.ingest.openrlhf_console import looks_like_text, read_openrlhf_console
from batchscale.ingest.records import build_records
from batchscale.ingest.runs import check_one_run
from batchscale.ingest.tensorboard import read_tensorboard
from batchscale.ingest.trl import read_trl_state
from batchscale.ingest.verl import read_verl
from batchscale.ingest.verl_legacy import normalize_legacy_verl
from batchscale.ingest.wandb_csv import read_wandb_csv
from batchscale.rundir import RunDescriptor, check_out_dir, is_run_dir, summarize_run, write_run
from batchscale.rundir.lock import RunLock

def read_openrlhf(path: Path) -> ParsedLog:
    """OpenRLHF: a console log, else (a directory or an event file) its TensorBoard events."""
    return read_openrlhf_console(path) if looks_like_text(path) else read_tensorboard(path)


READERS = {"verl": read_verl, "openrlhf": read_openrlhf, "tensorboard": read_tensorboard, "trl": read_trl_state,
           "wandb-csv": read_wandb_csv, **{style: newer_reader(style) for style in STEP_KEYS_BY_FRAMEWORK}}
STREAMED_NOT = ("tensorboard",)  # formats whose reader needs a regular file (TFRecord reader, by name)
MULTI_RUN_FORMATS = ("wandb-csv",)  # a chart export may hold several runs: OUT is then their parent
ALGORITHM_NAMES = {"gae": "ppo"}  # verl / OpenRLHF estimator names that batchscale calls differently


def parse_log(fmt: str, path: Path) -> ParsedLog | list[ParsedLog]:
    """Dispatch to the format's reader; unknown formats and missing paths are UserErrors."""
    if fmt not in READERS:
        raise UserError("FORMAT", f"unknown format '{fmt}'", f"use one of: {', '.join(READERS)}")
    if not path.exists():
        raise UserError("PATH", f"{path} does not exist", "pass the log file or directory to import")
    kind = input_kind(path)  # a device (/dev/zero) or socket is refused here, before a byte is read
    if kind == "file" and path.stat().st_size == 0:
        raise UserError(str(path), "the file is empty", "pass a log that holds at least one step")
    if kind == "stream" and fmt in STREAMED_NOT:
        raise UserError(str(path), f"is a pipe: {fmt} event files are read from disk, not streamed",
                        "pass the event file or its directory (pipes are read for verl, openrlhf consoles, trl, "
                        "wandb-csv)")
    return READERS[fmt](path)


def attach_framework_config(parsed: ParsedLog, path: Path, config_path: Path | None) -> None:
    """Attach the framework config to `parsed`: the one given with --config, else the one the log printed (verl's
    console), else a verl Hydra config.yaml found beside or above the log (frameworkconfig.find_config_file)."""
    if config_path is not None:
        if not config_path.is_file():
            raise UserError("--config", f"{config_path} is not a file", "pass the framework's config file")
        if parsed.config:
            parsed.notes.append(f"--config {config_path} replaces the config printed in the log")
        parsed.config, parsed.config_path = read_config_file(config_path), str(config_path)
        return
    if parsed.config or parsed.style != "verl":
        return
    found = find_config_file(path, parsed.notes)
    if found is not None:  # a config we went looking for must not fail the import: note it and go on without it
        try:
            parsed.config, parsed.config_path = read_config_file(found), str(found)
        except UserError as e:
            parsed.notes.append(f"ignored {found}: {e.rule}")


def import_log(fmt: str, path: Path, out: Path, label: str | None = None, prompts_per_step: int | None = None,
               samples_per_prompt: int | None = None, seed: int | None = None, overwrite: bool = False,
               config_path: Path | None = None, lr_rule: str | None = None) -> dict:
    """Import one run; returns {run_dir, run (the descriptor), summary}. A file holding several runs (a W&B chart
    export) gives one run directory per run, `OUT/<run name>/` labelled with the run name, and returns
    {"run_dir": OUT, "runs": [...]}. Raises UserError, writing nothing, on bad input. OUT is locked for the whole
    import (rundir.lock.RunLock): a second writer (import or train) of it is refused, naming this one."""
    with RunLock(out):
        return _import_locked(fmt, Path(path), Path(out), label, prompts_per_step, samples_per_prompt, seed,
                              overwrite, config_path, lr_rule)


def _import_locked(fmt: str, path: Path, out: Path, label: str | None, prompts_per_step: int | None,
                   samples_per_prompt: int | None, seed: int | None, overwrite: bool, config_path: Path | None,
                   lr_rule: str | None) -> dict:
    inputs = {"PATH": path, "--config": config_path}  # --overwrite never deletes the log being imported
    check_lr_rule(lr_rule)
    if seed is not None and seed < 0:
        raise UserError("--seed", f"must be a non-negative integer, got {seed}", "pass --seed 0 or larger")
    if fmt not in MULTI_RUN_FORMATS:  # a bad --out is reported before the log is read
        check_out_dir(out, overwrite, inputs)
    parsed = parse_log(fmt, path)
    runs = parsed if isinstance(parsed, list) else [parsed]
    if len(runs) > 1 and (label is not None or seed is not None):
        raise UserError("--label/--seed", f"{path} holds {len(runs)} runs ({', '.join(r.run_name for r in runs)})",
                        "import it without --label and --seed: each run is labelled with its run name")
    outs = [out / safe_name(r.run_name) for r in runs] if len(runs) > 1 else [out]
    check_distinct_names(runs, outs)
    if len(runs) > 1 and out.exists() and (not out.is_dir() or is_run_dir(out)):
        raise UserError("--out", f"{out} must be a directory to hold the {len(runs)} runs", "choose a new --out")
    for run_out in outs:
        check_out_dir(run_out, overwrite, inputs)
    prepared = [prepare_run(fmt, path, r, label or (r.run_name and safe_name(r.run_name) if len(runs) > 1 else None),
                            prompts_per_step, samples_per_prompt, seed, config_path, lr_rule) for r in runs]
    results = []
    for run_out, (descriptor, records, summary) in zip(outs, prepared):
        run_dir = write_run(run_out, descriptor, records, summary, overwrite, inputs=inputs)
        results.append({"run_dir": str(run_dir), "run": descriptor.to_json(), "summary": summary.model_dump(mode="json")})
    return results[0] if len(results) == 1 else {"run_dir": str(out), "runs": results}


def check_distinct_names(runs: list[ParsedLog], outs: list[Path]) -> None:
    """Two runs of one file whose names map to one directory (`a/b`, `a:b` -> `a_b`) are refused before writing."""
    seen: dict[Path, str] = {}
    for run, run_out in zip(runs, outs):
        if run_out in seen:
            raise UserError(f"run {run.run_name!r}", f"and run {seen[run_out]!r} both map to the directory "
                            f"{run_out.name}", "rename one of the runs in W&B and export the chart again")
        seen[run_out] = str(run.run_name)


def safe_name(name: str) -> str:
    """A run name as a directory name and label: letters, digits and . _ + - kept, anything else becomes _."""
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name).strip("._") or "run"


def prepare_run(fmt: str, path: Path, parsed: ParsedLog, label: str | None, prompts_per_step: int | None,
                samples_per_prompt: int | None, seed: int | None, config_path: Path | None, lr_rule: str | None):
    """(descriptor, records, summary) of one parsed run; every check happens here, before anything is written."""
    check_one_run(str(path), parsed)
    normalize_legacy_verl(parsed)
    attach_framework_config(parsed, path, config_path)
    fields = resolve_batch(parsed, prompts_per_step, samples_per_prompt)
    prompts, group = fields["prompts_per_step"], fields["samples_per_prompt"]
    records, report = build_records(parsed, str(path), prompts * group, prompts, fields.pop("samples_by_step", None))
    descriptor_fields = describe_run(parsed, fields, records, label, seed, report["first_step"])
    descriptor_fields["lr_rule"] = lr_rule or "unknown"
    descriptor_fields["import"] = {
        "path": str(path.absolute()),
        "format": fmt,
        "key_style": parsed.style,
        "shape": parsed.shape or fmt,
        "run_name": parsed.run_name,
        "config_path": parsed.config_path,
        "batch_from": fields["batch_from"],
        "wall_s_from": report["wall_s_from"],
        "eval_primary": report["eval_primary"],
        "not_provided": report["not_provided"],
        "unknown_keys": report["unknown_keys"],
        "problems": parsed.problems,
        "notes": parsed.notes,
    }
    try:
        descriptor = RunDescriptor.model_validate(descriptor_fields)
    except ValueError as e:  # pydantic's ValidationError: facts from the log and config that contradict each other
        raise UserError(str(path), f"the run's facts do not add up ({e.errors()[0]['msg']})",
                        "check P, G and the framework config") from None
    return descriptor, records, summarize_run(descriptor, records, finished=None)  # a log cannot say it finished


def check_lr_rule(lr_rule: str | None) -> None:
    """--lr-rule names the rule of the run's label as batchscale writes it (sqrt, linear, none, a=0.5 or 0.5:
    `config.read_lr_rule`)."""
    if lr_rule is not None and read_lr_rule(lr_rule) is None:
        raise UserError("--lr-rule", f"unknown rule {lr_rule!r}", "use sqrt, linear, none or an exponent such as 0.5")


def describe_run(parsed: ParsedLog, fields: dict, records: list[dict], label: str | None, seed: int | None,
                 first_step: int = 1) -> dict:
    """The flat run descriptor (without the import block); defaults are explained in the notes."""
    prompts, group = fields["prompts_per_step"], fields["samples_per_prompt"]
    if parsed.style == "trl":
        parsed.notes.append(parsed.window_note or (
            "TRL logs every logging_steps optimizer steps (unknown here): its metrics are means over each window,"
            " and samples are cumulative at the window end"))
    lr = fields.get("lr")
    if lr is not None and not lr > 0:
        parsed.notes.append(f"the config's lr {lr} is not positive (a rounded value?); lr left unknown")
        lr = None
    if lr is None and not parsed.logged_lr_exact:
        parsed.problems.append("lr unknown: no config gave the optimizer's lr and the log prints it rounded; "
                               "run.json lr is null (pass --config)")
    elif lr is None:
        logged = [r["lr/actor"] for r in records if "lr/actor" in r]
        lr = max(logged) if logged and max(logged) > 0 else None
        if logged:
            parsed.notes.append("lr is the peak logged lr/actor (no config gave the optimizer's lr)")
    algorithm = fields.get("algorithm")
    if algorithm is None:
        has_critic = any("grad_norm/critic" in r or "lr/critic" in r for r in records)
        algorithm = "ppo" if has_critic else ("grpo" if parsed.style == "trl" else "unknown")
        parsed.notes.append(f"algorithm '{algorithm}' inferred from the logged keys (no config named it)")
    if seed is None:
        seed = fields.get("seed", 0)
        if "seed" not in fields:
            parsed.notes.append("seed not recorded by the log; defaulted to 0 (pass --seed)")
    source = parsed.style
    return {
        "label": label or f"{source}-p{prompts}-g{group}",
        "seed": int(seed),
        "algorithm": ALGORITHM_NAMES.get(str(algorithm), str(algorithm)),
        "prompts_per_step": prompts,
        "samples_per_prompt": group,
        "samples_per_step": prompts * group,
        "samples_per_update": fields.get("samples_per_update", prompts * group),
        "updates_per_step": fields.get("updates_per_step", 1),
        "first_step": first_step,
        "lr": lr,
        "lr_rule": "unknown",
        "model": fields.get("model"),
        "task": fields.get("task"),
        "source": source,
    }
