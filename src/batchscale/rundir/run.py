"""The run directory: its file names, the descriptor and record contract, the summary, one writer of each kind, and
the one reader every consumer uses.

    <run>/metrics.jsonl   `step` and `eval` records, one JSON object a line, appended and fsynced one line at a time
    <run>/run.json        `RunDescriptor`: flat facts any tool can read without knowing the config's nesting
    <run>/config.json     the full resolved config (native runs only)
    <run>/summary.json    `RunSummary`, written last and atomically: its presence is what marks a run finished
    <run>/.batchscale     the marker naming the directory a run (rundir.ownership: what --overwrite may replace)
    <sweep>/sweep.json    the sweep's points; <sweep>/runs/<label>__s<seed>/ its run directories

Writers. `RunLog` streams a run while it trains (native training). `write_run` writes a whole run at once into a
hidden sibling directory and renames it into place (importers, synthetic runs). Both refuse NaN and infinity: a value
JSON cannot hold is an error where it is produced, never a `null` in a finished run.

Reader. `read_run` returns the descriptor, the step and eval records and the summary (None: the run did not finish),
under one policy for every command: a truncated last line (a crash mid-write) is dropped with a `DataWarning`; a
corrupt line anywhere else is a UserError naming the file and line; a (kind, step) logged twice keeps the later
record (a resumed run); records of another kind are ignored; cumulative samples that decrease with the step are a
UserError, and so is a key of fixed meaning (NUMERIC_KEYS: the step keys, the eval score, gns/*) holding anything
but a number or null (a string there would read as "not logged": gns terms as pure noise). metrics.jsonl is streamed
line by line under caps (MAX_METRICS_BYTES, MAX_LINE_BYTES): a sparse 8 GiB file is refused, never read whole.

Versions. run.json carries `schema_version` (2). A run.json without one (version 1, before the batch facts) reads with
the defaults of a single-pass synchronous update: samples_per_update = samples_per_step, updates_per_step = 1,
generation_batch = samples_per_step. A summary.json without one is rebuilt from the records, keeping its `finished`.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from batchscale.errors import DataWarning, UserError
from batchscale.files import (append_whole, dumps_strict, iter_json_lines, read_json_object, resolve_out,
                              staged_directory, write_error, write_json_atomic)
from batchscale.rundir.ownership import check_inputs_outside, check_replaceable, directory_kind, mark_directory

METRICS_FILE = "metrics.jsonl"
DESCRIPTOR_FILE = "run.json"
CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"
SWEEP_FILE = "sweep.json"
RUNS_DIR = "runs"
SCHEMA_VERSION = 2

MAX_METRICS_BYTES = 8 * 2**30  # a million steps of a few kB each
MAX_LINE_BYTES = 16 * 2**20  # one record: a few hundred bytes to a few kB
RECORD_KINDS = ("step", "eval")
RECORD_KEYS = ("kind", "step", "samples", "wall_s")  # every record
STEP_KEYS = ("prompts", "reward/mean", "response/length_mean", "tokens/generated", "time/generate", "time/train",
             "time/step", "grad_norm/actor", "lr/actor")  # every step record (DESIGN.md)
CRITIC_STEP_KEYS = ("grad_norm/critic", "lr/critic", "time/train_critic")  # PPO adds these
GNS_STEP_KEYS = {  # optional: the online gradient noise scale (telemetry.gradnoise), B_noise in samples
    network: {name: f"gns/{prefix}{name}" for name in ("grad_sq", "trace_sigma", "b_noise")}
    for network, prefix in (("actor", ""), ("critic", "critic/"))
}
EVAL_SCORE_KEYS = ("eval/accuracy", "eval/score")  # the primary eval score, first present wins
NUMERIC_KEYS = (*STEP_KEYS, *CRITIC_STEP_KEYS, *EVAL_SCORE_KEYS,
                *(key for names in GNS_STEP_KEYS.values() for key in names.values()))  # a number or null where present


# --- run.json -------------------------------------------------------------------------------------------------------

class RunDescriptor(BaseModel):
    """run.json. Batch facts: a step consumes samples_per_step = P * G responses in updates_per_step optimizer updates
    of samples_per_update responses each (1 and P * G in the paper's single pass); generation_batch responses are in
    flight at once in the generator (= P * G when synchronous), of which at most max_concurrency decode together
    (None when unknown, as for most imports): the active decode batch that KV-cache feasibility depends on."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    schema_version: int = SCHEMA_VERSION
    label: str = Field(min_length=1)
    seed: int = Field(ge=0, strict=True)
    algorithm: str | None = None
    prompts_per_step: int | None = Field(None, ge=1)
    samples_per_prompt: int | None = Field(None, ge=1)
    samples_per_step: int = Field(ge=1)
    samples_per_update: int = Field(ge=1)
    updates_per_step: int = Field(1, ge=1)
    lr: float | None = Field(None, gt=0)  # actor, after scaling; None when the log does not say
    lr_rule: str | None = None  # "sqrt", "linear", "none", "a=0.25", or "unknown" for imports
    rollout_mode: Literal["sync", "async"] = "sync"
    generation_batch: int | None = Field(None, ge=1)
    max_concurrency: int | None = Field(None, ge=1)
    max_staleness: int | None = Field(None, ge=0)  # asynchronous runs: policy versions a sample may lag
    first_step: int = Field(1, ge=0)  # the first logged step (imports of resumed logs start later)
    model: str | None = None
    task: str | None = None
    source: str = "batchscale"  # batchscale, verl, openrlhf, trl, synthetic, ...

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        """Version 1 (no schema_version) and writers that leave the single-pass defaults out."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if isinstance(data.get("lr_rule"), (int, float)) and not isinstance(data.get("lr_rule"), bool):
            data["lr_rule"] = f"a={data['lr_rule']:g}"
        samples_per_step = data.get("samples_per_step")
        if isinstance(samples_per_step, int) and not isinstance(samples_per_step, bool):
            updates = data.get("updates_per_step", 1)
            data.setdefault("samples_per_update", samples_per_step if updates == 1 else None)
            if data.get("rollout_mode", "sync") == "sync":
                data.setdefault("generation_batch", samples_per_step)
        return data

    @model_validator(mode="after")
    def _check_batch_facts(self) -> "RunDescriptor":
        if self.schema_version > SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is newer than this batchscale reads "
                             f"({SCHEMA_VERSION}); upgrade batchscale")
        if self.prompts_per_step and self.samples_per_prompt:
            if self.prompts_per_step * self.samples_per_prompt != self.samples_per_step:
                raise ValueError(f"prompts_per_step x samples_per_prompt = {self.prompts_per_step} x "
                                 f"{self.samples_per_prompt} != samples_per_step {self.samples_per_step}")
        if self.samples_per_update > self.samples_per_step or self.samples_per_step % self.samples_per_update:
            raise ValueError(f"samples_per_update {self.samples_per_update} must divide samples_per_step "
                             f"{self.samples_per_step} (each update takes a whole share of the step)")
        if self.generation_batch is not None and self.generation_batch < self.samples_per_step:
            raise ValueError(f"generation_batch {self.generation_batch} < samples_per_step {self.samples_per_step}")
        return self

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


# --- summary.json ---------------------------------------------------------------------------------------------------

class StoppedRun(BaseModel):
    """Why a run ended before its budget: a racing sweep's rule (sweep.race) stopped it at an eval boundary."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    reason: Literal["target", "cannot_win"]  # reached the sweep's fixed target / its point can no longer win
    samples: int  # cumulative samples when it stopped
    message: str  # for people: "reached the target 0.587 at N = 3,584", "cannot win (T > 41 s at N = 5,120)"


class RunSummary(BaseModel):
    """summary.json, one schema for native and imported runs; everything but `finished`, `warnings` and `machine`
    is computed from the records by `summarize_run`, so the two kinds of run can never disagree on what a key means."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    schema_version: int = SCHEMA_VERSION
    finished: bool | None  # True: trained to its budget or to a stop rule (native); None: unknown (an import)
    label: str
    seed: int
    steps: int  # step records
    last_step: int | None
    samples: int  # cumulative samples at the last record
    wall_s: float | None
    eval_start: float | None  # the primary eval score (eval/accuracy, else eval/score)
    eval_end: float | None
    eval_best: float | None
    eval_best_samples: int | None
    time_step_mean_s: float | None
    samples_per_s: float | None  # samples_per_step / mean time/step: the training loop's throughput, evals excluded
    time_shares: dict[str, float] = {}  # phase -> share of total time/step ("generate", "train", ...)
    warnings: list[str] = []  # what the run noticed about itself (e.g. a reward collapse)
    machine: dict[str, Any] = {}  # where it ran (native): cpu, flags, threads, versions, model_params
    stopped: StoppedRun | None = None  # set when a racing sweep's rule ended the run before its budget


def summarize_run(descriptor: RunDescriptor, records: list[dict], finished: bool | None,
                  machine: dict | None = None, notes: list[str] = (), stopped: StoppedRun | None = None) -> RunSummary:
    steps = [r for r in records if r["kind"] == "step"]
    scored = [(r["samples"], score) for r in records if r["kind"] == "eval"
              if (score := primary_eval_score(r)) is not None]
    step_times = [r["time/step"] for r in steps if _is_number(r.get("time/step"))]
    total_s = sum(step_times) if len(step_times) == len(steps) and steps else None
    shares = {}
    if total_s:
        for key in sorted({k for r in steps for k in r if k.startswith("time/") and k != "time/step"}):
            values = [r.get(key) for r in steps]
            if all(_is_number(v) for v in values):
                shares[key.removeprefix("time/")] = sum(values) / total_s
    last_samples = max((r["samples"] for r in records), default=0)
    best = max(scored, key=lambda p: p[1]) if scored else None
    return RunSummary(
        finished=finished, label=descriptor.label, seed=descriptor.seed, steps=len(steps),
        last_step=steps[-1]["step"] if steps else None, samples=int(last_samples),
        wall_s=next((r["wall_s"] for r in reversed(records) if r["wall_s"] is not None), None),
        eval_start=scored[0][1] if scored else None, eval_end=scored[-1][1] if scored else None,
        eval_best=best[1] if best else None, eval_best_samples=int(best[0]) if best else None,
        time_step_mean_s=total_s / len(steps) if total_s else None,
        samples_per_s=len(steps) * descriptor.samples_per_step / total_s if total_s else None,
        time_shares=shares, warnings=list(notes), machine=dict(machine or {}), stopped=stopped)


# --- records --------------------------------------------------------------------------------------------------------

def primary_eval_score(record: dict) -> float | None:
    """The primary eval score of a record: `eval/accuracy`, else `eval/score`; None when absent or not finite."""
    for key in EVAL_SCORE_KEYS:
        value = record.get(key)
        if _is_number(value):
            return float(value)
    return None


def record_contract_problem(record: dict) -> str | None:
    """Why `record` breaks the contract, or None when it keeps it (kinds, required keys, types)."""
    if not isinstance(record, dict):
        return "is not a JSON object"
    if record.get("kind") not in RECORD_KINDS:
        return f"kind {record.get('kind')!r} is not one of {RECORD_KINDS}"
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        return f"lacks {', '.join(missing)}"
    step, samples, wall_s = record["step"], record["samples"], record["wall_s"]
    if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
        return f"step {step!r} is not an integer >= 0"
    if not (_is_number(samples) and samples >= 0):
        return f"samples {samples!r} is not a number >= 0"
    if wall_s is not None and not _is_number(wall_s):
        return f"wall_s {wall_s!r} is not a number or null"
    for key in NUMERIC_KEYS:  # a string here would read as "not logged" (gns: as pure noise), never as an error
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{key} {value!r:.40} is not a number or null"
    return None


def dumps_record(record: dict) -> str:
    """One metrics.jsonl line. A record that breaks the contract or holds NaN/inf is a ValueError naming the key."""
    problem = record_contract_problem(record)
    if problem:
        raise ValueError(f"record {problem}: {record}")
    for key, value in record.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"record at step {record['step']}: {key} = {value} is not finite")
    return dumps_strict(record)


# --- writers --------------------------------------------------------------------------------------------------------

class RunLog:
    """The streaming writer of native training: run.json and config.json first, then one record a line, each flushed
    and fsynced, so a crash loses at most the line being written; `finish` writes summary.json last, atomically."""

    def __init__(self, run_dir: Path, descriptor: RunDescriptor, config: dict | None = None):
        self.dir = Path(run_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise write_error(self.dir, e) from None
        mark_directory(self.dir, "run")
        write_json_atomic(self.dir / DESCRIPTOR_FILE, descriptor.to_json())
        if config is not None:
            write_json_atomic(self.dir / CONFIG_FILE, config)
        try:
            self._file = open(self.dir / METRICS_FILE, "ab", buffering=0)
        except OSError as e:
            raise write_error(self.dir / METRICS_FILE, e) from None

    def write(self, record: dict) -> None:
        line = (dumps_record(record) + "\n").encode()
        try:
            append_whole(self._file, line)  # a full disk cuts the half-written line back off
        except OSError as e:
            raise write_error(self.dir / METRICS_FILE, e, len(line)) from None

    def finish(self, summary: RunSummary) -> None:
        self.close()
        write_json_atomic(self.dir / SUMMARY_FILE, summary.model_dump(mode="json"))

    def close(self) -> None:
        if not self._file.closed:
            try:
                self._file.close()
            except OSError:  # a full disk fails the buffered flush again; write() has reported it already
                pass


def write_run(out: Path, descriptor: RunDescriptor, records: list[dict], summary: RunSummary,
              overwrite: bool = False, config: dict | None = None, inputs: dict[str, Path | None] | None = None) -> Path:
    """Write a whole run into a hidden sibling directory and rename it to `out` when complete; returns `out` (a link
    followed to its target). Every record is checked before anything is written; `inputs` as for check_out_dir."""
    lines = [dumps_record(record) + "\n" for record in records]
    check_out_dir(out, overwrite, inputs)
    out = resolve_out(out)
    with staged_directory(out, "writing") as staging:
        mark_directory(staging, "run")
        text = "".join(lines)
        try:
            (staging / METRICS_FILE).write_text(text)
        except OSError as e:
            raise write_error(Path(out) / METRICS_FILE, e, len(text.encode())) from None
        write_json_atomic(staging / DESCRIPTOR_FILE, descriptor.to_json())
        if config is not None:
            write_json_atomic(staging / CONFIG_FILE, config)
        write_json_atomic(staging / SUMMARY_FILE, summary.model_dump(mode="json"))
    return out


def is_finished_run(path: Path) -> bool:
    """A run directory whose run finished: summary.json is written last, so its presence says so."""
    return (Path(path) / SUMMARY_FILE).is_file()


def is_run_dir(path: Path) -> bool:
    """A directory batchscale wrote as a run: its marker says so, or (written before the marker) it holds run.json,
    metrics.jsonl and nothing a run does not hold (rundir.ownership)."""
    return directory_kind(path) == "run"


def check_out_dir(out: Path, overwrite: bool, inputs: dict[str, Path | None] | None = None) -> None:
    """Raise before any work if `out` cannot receive a run: batchscale replaces only a run of its own holding only
    what batchscale wrote (with `--overwrite`), never a directory holding anything else, nor one holding one of
    `inputs` (option name -> path). A link is followed to its target."""
    out = resolve_out(out)
    if out.exists() and not out.is_dir():
        raise UserError("--out", f"{out} exists and is not a directory", "choose another --out")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not overwrite and is_run_dir(out):
        if is_finished_run(out):
            raise UserError("--out", f"{out} already holds a run", "choose another --out or pass --overwrite")
        raise UserError("--out", f"{out} already holds an unfinished run (no summary.json)",
                        f"continue it with `batchscale train --resume {out}`, or choose another --out, or pass "
                        "--overwrite")
    check_replaceable(out, "run")
    check_inputs_outside(out, inputs or {})


# --- reader ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoadedRun:
    """One run directory as read: its descriptor, records sorted by step, and summary (None: unfinished)."""

    path: Path
    descriptor: RunDescriptor
    steps: list[dict]
    evals: list[dict]
    summary: RunSummary | None

    @property
    def label(self) -> str:
        return self.descriptor.label

    @property
    def seed(self) -> int:
        return self.descriptor.seed

    @property
    def samples_per_step(self) -> int:
        return self.descriptor.samples_per_step

    @property
    def finished(self) -> bool:
        return self.summary is not None


def read_descriptor(run_dir: Path) -> RunDescriptor:
    path = Path(run_dir) / DESCRIPTOR_FILE
    if not path.is_file():
        raise UserError(str(path), "is missing", "point at a run directory (it holds run.json and metrics.jsonl)")
    try:
        data = read_json_object(path)
        return RunDescriptor.model_validate({"schema_version": 1, **data})  # no version: written before version 2
    except ValidationError as e:
        raise validation_error(path, e, "rewrite run.json as DESIGN.md describes (or re-import the run)") from None


def read_records(run_dir: Path) -> list[dict]:
    """metrics.jsonl's records in file order, under the one policy (see the module docstring)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise UserError(str(path), "is missing", "point at a run directory that has started training")
    records = []
    for i, record in iter_json_lines(path, MAX_METRICS_BYTES, MAX_LINE_BYTES, "repair or remove the run directory"):
        if isinstance(record, dict) and record.get("kind") not in RECORD_KINDS:
            continue  # another kind of record: not part of this contract
        problem = record_contract_problem(record)
        if problem:
            raise UserError(f"{path} line {i + 1}", f"the record {problem}",
                            "repair or remove the run directory (DESIGN.md lists each record's keys)")
        records.append(record)
    return records


def read_summary(run_dir: Path, descriptor: RunDescriptor, records: list[dict]) -> RunSummary | None:
    path = Path(run_dir) / SUMMARY_FILE
    if not path.is_file():
        return None
    data = read_json_object(path)
    if "schema_version" not in data:  # version 1: rebuilt from the records, keeping whether it finished
        finished = data.get("finished") if isinstance(data.get("finished"), bool) else None
        return summarize_run(descriptor, records, finished)
    try:
        return RunSummary.model_validate(data)
    except ValidationError as e:
        raise validation_error(path, e, "remove summary.json to mark the run unfinished, or rerun it") from None


def read_run(run_dir: Path) -> LoadedRun:
    """Read one run directory; a (kind, step) logged twice keeps the later record."""
    run_dir = Path(run_dir)
    descriptor = read_descriptor(run_dir)
    records = read_records(run_dir)
    latest = {(r["kind"], r["step"]): r for r in records}
    steps = sorted((r for (kind, _), r in latest.items() if kind == "step"), key=lambda r: r["step"])
    check_samples_grow(run_dir, sorted(latest.values(), key=lambda r: (r["step"], r["kind"] == "step")))
    evals = sorted((r for (kind, _), r in latest.items() if kind == "eval"), key=lambda r: (r["samples"], r["step"]))
    return LoadedRun(run_dir, descriptor, steps, evals, read_summary(run_dir, descriptor, steps + evals))


def check_samples_grow(run_dir: Path, records: list[dict]) -> None:
    """Cumulative samples never decrease with the step (an eval at step s counts the samples of step s): a log that
    says otherwise is not one run's learning curve (two runs' logs mixed, or a broken counter)."""
    previous = None
    for record in records:
        if previous is not None and record["samples"] < previous["samples"]:
            raise UserError(f"{Path(run_dir) / METRICS_FILE} step {record['step']}",
                            f"cumulative samples decrease ({previous['kind']} at step {previous['step']}: "
                            f"{previous['samples']:,}; {record['kind']} at step {record['step']}: {record['samples']:,})",
                            "repair or re-import the run: samples must be cumulative (non-decreasing with the step)")
        previous = record


def find_run_dirs(path: Path) -> list[Path]:
    """Run directories under `path`: itself if it holds run.json, else the children of `path/runs` or of `path`.
    Hidden directories (a sweep's staging) are not runs; other directories without run.json are skipped, warned."""
    path = Path(path)
    if not path.is_dir():
        raise UserError("path", f"{path} is not a directory", "pass a run directory or a sweep directory")
    if (path / DESCRIPTOR_FILE).is_file():
        return [path]
    parent = path / RUNS_DIR if (path / RUNS_DIR).is_dir() else path
    run_dirs = []
    for child in sorted(p for p in parent.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (child / DESCRIPTOR_FILE).is_file():
            run_dirs.append(child)
        else:
            warnings.warn(f"skipping {child}: no run.json", DataWarning, stacklevel=2)
    if not run_dirs:
        raise UserError("path", f"no run directories (with run.json) found in {parent}",
                        "pass a run directory, a directory of run directories, or a sweep directory holding "
                        "runs/<label>__s<seed>/")
    return run_dirs


# --- sweep layout ---------------------------------------------------------------------------------------------------

RUN_DIR_NAME = re.compile(r"^(?P<label>.+)__s(?P<seed>\d+)$")  # <label>__s<seed>: a label holds no "__" (config)


def run_dir_name(label: str, seed: int) -> str:
    """The directory of a configuration's run at `seed` in a sweep: <label>__s<seed>, so its seeds sort together."""
    return f"{label}__s{seed}"


def parse_run_dir_name(name: str) -> tuple[str, int] | None:
    """(label, seed) of a directory named by `run_dir_name`; None for any other name."""
    match = RUN_DIR_NAME.match(name)
    return (match["label"], int(match["seed"])) if match else None


def sweep_runs_dir(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / RUNS_DIR


def sweep_of(run_dir: Path) -> Path | None:
    """The sweep directory a run directory (or a sweep's staging directory) lies in: <sweep>/runs/<run>, with
    <sweep>/sweep.json; None for a run outside a sweep."""
    parent = Path(run_dir).absolute().parent
    return parent.parent if parent.name == RUNS_DIR and (parent.parent / SWEEP_FILE).is_file() else None


def validation_error(path: Path, error: ValidationError, fix: str) -> UserError:
    """The first problem of a pydantic ValidationError as a one-line UserError naming the file and the key."""
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "(document)"
    got = f" (got {first['input']!r})" if "input" in first and not isinstance(first["input"], dict) else ""
    return UserError(f"{path} {key}", f"{first['msg'][0].lower()}{first['msg'][1:]}{got}", fix)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
