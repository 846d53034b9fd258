"""`<run>/samples.jsonl`: what the policy said. Each eval writes its first `run.log_samples` held-out examples, one
JSON object a line: `step` and `samples` (the eval's, as in metrics.jsonl), `prompt`, `response` (the greedy
response, decoded), `answer` (the task's reference), `reward` (the training reward the task gives that response) and
`correct` (whether eval/accuracy counted it; absent in files written before it, read as unknown).
The eval set is fixed, so the same prompts come back at every eval and the first and last evals can be compared.

Writer: `SamplesLog` appends and fsyncs one line at a time, like metrics.jsonl. Readers: `iter_samples` (and
`read_samples`, its list), under the run log's policy (files.iter_json_lines): streamed under caps (MAX_SAMPLES_BYTES,
MAX_LINE_BYTES: a sparse 8 GiB file is refused, never read whole), a torn last line (a crash mid-write) dropped with
a DataWarning, a corrupt line anywhere else a UserError naming the file and line; nothing in the file is executed,
and every field is type-checked (it is model output: a reader escapes it before showing it). `first_and_last_evals`
keeps only the two evals a report shows while it streams. `rewind_samples` cuts the file back to a checkpoint on
resume, as rundir.checkpoint.rewind_metrics does metrics.jsonl.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from batchscale.errors import DataWarning, UserError
from batchscale.files import append_whole, dumps_strict, iter_json_lines, unique_suffix, write_error

SAMPLES_FILE = "samples.jsonl"
MAX_SAMPLES_BYTES = 2**30  # a long run's evals: a few MB
MAX_LINE_BYTES = 16 * 2**20  # one prompt and its response
FIX = "repair or remove samples.jsonl (rundir/samples.py lists its keys)"


class SampleRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int = Field(ge=0)
    samples: int = Field(ge=0)
    prompt: str
    response: str
    answer: str
    reward: float
    correct: bool | None = None  # what eval/accuracy counted; None: not recorded (an older samples.jsonl)

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


def sample_rows(step: int, samples: int, examples: list[tuple]) -> list[SampleRow]:
    """One eval's (prompt, response, answer, reward[, correct]) examples as rows."""
    return [SampleRow(step=step, samples=samples, prompt=prompt, response=response, answer=answer, reward=reward,
                      correct=rest[0] if rest else None)
            for prompt, response, answer, reward, *rest in examples]


class SamplesLog:
    """Appends rows to samples.jsonl, each line flushed and fsynced; opened lazily, so a run that logs no samples
    writes no file."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / SAMPLES_FILE
        self._file = None

    def write(self, rows: list[SampleRow]) -> None:
        if not rows:
            return
        data = "".join(dumps_strict(row.to_json()) + "\n" for row in rows).encode()  # NaN refused
        try:
            if self._file is None:
                self._file = open(self.path, "ab", buffering=0)
            append_whole(self._file, data)  # a full disk cuts the half-written rows back off
        except OSError as e:
            raise write_error(self.path, e, len(data)) from None

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            try:
                self._file.close()
            except OSError:
                pass


def iter_samples(run_dir: Path) -> Iterator[SampleRow]:
    """samples.jsonl's rows in file order, streamed (none when the run wrote none)."""
    path = Path(run_dir) / SAMPLES_FILE
    if not path.is_file():
        return
    for i, value in iter_json_lines(path, MAX_SAMPLES_BYTES, MAX_LINE_BYTES, FIX):
        try:
            yield SampleRow.model_validate(value)
        except ValidationError as e:
            raise UserError(f"{path} line {i + 1}", f"is not a sample row: {e.errors()[0]['msg']}", FIX) from None


def read_samples(run_dir: Path) -> list[SampleRow]:
    """samples.jsonl's rows in file order ([] when the run wrote none)."""
    return list(iter_samples(run_dir))


def first_and_last_evals(run_dir: Path) -> list[SampleRow]:
    """The rows of the run's first eval, then those of its last (one list when they are the same), streamed: only
    those two evals' rows are ever held."""
    first: list[SampleRow] = []
    last: list[SampleRow] = []
    for row in iter_samples(run_dir):
        if not first or row.step == first[0].step:
            first.append(row)
        elif last and row.step == last[0].step:
            last.append(row)
        else:
            last = [row]
    return first + last


def ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        return size == 0 or (f.seek(size - 1) >= 0 and f.read(1) == b"\n")


def rewind_samples(run_dir: Path, last_step: int | None) -> list[SampleRow]:
    """Keep the rows of evals at steps <= `last_step` (None: none), a new file renamed over the old, so a crash here
    changes nothing; returns the rows kept. The eval a checkpoint follows is written before it, so its rows stay."""
    path = Path(run_dir) / SAMPLES_FILE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # a torn last line is cut here anyway
        rows = read_samples(run_dir)
    kept = [row for row in rows if last_step is not None and row.step <= last_step]
    if not path.is_file() or (len(kept) == len(rows) and ends_with_newline(path)):
        return kept
    tmp = path.with_name(f".{path.name}.rewind-{unique_suffix()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(dumps_strict(row.to_json()) + "\n" for row in kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(path, e) from None
    return kept
