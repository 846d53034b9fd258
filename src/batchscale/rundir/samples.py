"""`<run>/samples.jsonl`: what the policy said. Each eval writes its first `run.log_samples` held-out examples, one
JSON object a line: `step` and `samples` (the eval's, as in metrics.jsonl), `prompt`, `response` (the greedy
response, decoded), `answer` (the task's reference) and `reward` (the training reward the task gives that response).
The eval set is fixed, so the same prompts come back at every eval and the first and last evals can be compared.

Writer: `SamplesLog` appends and fsyncs one line at a time, like metrics.jsonl. Reader: `read_samples`, under the
run log's policy: a torn last line (a crash mid-write) is dropped with a DataWarning, a corrupt line anywhere else is
a UserError naming the file and line; nothing in the file is executed, and every field is type-checked (it is model
output: a reader escapes it before showing it). `rewind_samples` cuts the file back to a checkpoint on resume, as
rundir.checkpoint.rewind_metrics does metrics.jsonl.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from batchscale.errors import DataWarning, UserError
from batchscale.files import decode_error, dumps_strict, loads_strict, unique_suffix, write_error

SAMPLES_FILE = "samples.jsonl"


class SampleRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int = Field(ge=0)
    samples: int = Field(ge=0)
    prompt: str
    response: str
    answer: str
    reward: float

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


def sample_rows(step: int, samples: int, examples: list[tuple[str, str, str, float]]) -> list[SampleRow]:
    """One eval's (prompt, response, answer, reward) examples as rows."""
    return [SampleRow(step=step, samples=samples, prompt=prompt, response=response, answer=answer, reward=reward)
            for prompt, response, answer, reward in examples]


class SamplesLog:
    """Appends rows to samples.jsonl, each line flushed and fsynced; opened lazily, so a run that logs no samples
    writes no file."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / SAMPLES_FILE
        self._file = None

    def write(self, rows: list[SampleRow]) -> None:
        if not rows:
            return
        text = "".join(dumps_strict(row.to_json()) + "\n" for row in rows)  # NaN refused, as in metrics.jsonl
        try:
            if self._file is None:
                self._file = open(self.path, "a", encoding="utf-8")
            self._file.write(text)
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as e:
            raise write_error(self.path, e, len(text.encode())) from None

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            try:
                self._file.close()
            except OSError:
                pass


def read_samples(run_dir: Path) -> list[SampleRow]:
    """samples.jsonl's rows in file order ([] when the run wrote none)."""
    path = Path(run_dir) / SAMPLES_FILE
    if not path.is_file():
        return []
    lines = path.read_bytes().split(b"\n")
    rows, offset = [], 0
    for i, line in enumerate(lines):
        offset, line_offset = offset + len(line) + 1, offset
        if not line.strip():
            continue
        try:
            rows.append(SampleRow.model_validate(loads_strict(line)))
        except (ValueError, ValidationError) as e:
            if i == len(lines) - 1 and not isinstance(e, ValidationError):
                warnings.warn(f"{path}: dropping the truncated last line {i + 1} (the run was interrupted while "
                              "writing it)", DataWarning, stacklevel=2)
                continue
            if isinstance(e, UnicodeDecodeError):
                raise decode_error(path, e, f"{path} line {i + 1}", line_offset) from None
            reason = e.errors()[0]["msg"] if isinstance(e, ValidationError) else f"is not valid JSON ({e})"
            raise UserError(f"{path} line {i + 1}", f"is not a sample row: {reason}",
                            "repair or remove samples.jsonl (rundir/samples.py lists its keys)") from None
    return rows


def rewind_samples(run_dir: Path, last_step: int | None) -> list[SampleRow]:
    """Keep the rows of evals at steps <= `last_step` (None: none), a new file renamed over the old, so a crash here
    changes nothing; returns the rows kept. The eval a checkpoint follows is written before it, so its rows stay."""
    path = Path(run_dir) / SAMPLES_FILE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # a torn last line is cut here anyway
        rows = read_samples(run_dir)
    kept = [row for row in rows if last_step is not None and row.step <= last_step]
    if not path.is_file() or (len(kept) == len(rows) and path.read_bytes().endswith(b"\n")):
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
