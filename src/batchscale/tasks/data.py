"""A task from the user's own data: JSONL or Parquet rows with a `prompt` and an `answer` column.

Held-out rows come from `eval_path` when given, else the last `eval_size` rows of `path` (so the split is fixed by the
file, not by the seed). Training prompts are drawn uniformly with replacement from the rest with the run's generator.
Every row is checked before any compute: a missing column, an empty prompt or a non-string answer names the file and
row.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from batchscale.errors import UserError
from batchscale.files import loads_strict, read_text_utf8
from batchscale.tasks.base import Example, Task
from batchscale.tasks.rewards import resolve_reward


def _read_rows(path: Path, field: str) -> list[dict]:
    if not path.is_file():
        raise UserError(field, f"no file at {path}", "give the path of a .jsonl or .parquet file")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError(field, "reading Parquet needs pyarrow", "pip install pyarrow, or convert the file to JSONL") from None
        try:
            return pq.read_table(path).to_pylist()
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid and ArrowIOError derive from these
            reason = " ".join(str(e).split())[:200]
            raise UserError(field, f"{path} is not a readable Parquet file ({type(e).__name__}: {reason})",
                            "rewrite it (e.g. pandas.DataFrame.to_parquet) or convert it to JSONL") from None
    rows = []
    for lineno, line in enumerate(read_text_utf8(path, field).splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(loads_strict(line))
        except ValueError as e:  # JSONDecodeError, or a NaN/Infinity token
            reason = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
            raise UserError(f"{field} ({path}:{lineno})", f"not valid JSON ({reason})", "write one JSON object per line") from None
    return rows


def read_examples(path: Path, field: str) -> list[Example]:
    examples = []
    for i, row in enumerate(_read_rows(path, field), 1):
        if not isinstance(row, dict) or "prompt" not in row or "answer" not in row:
            raise UserError(f"{field} ({path} row {i})", "each row needs a 'prompt' and an 'answer'",
                            'write rows like {"prompt": "2+2=", "answer": "4"}')
        prompt, answer = row["prompt"], row["answer"]
        if not isinstance(prompt, str) or not prompt:
            raise UserError(f"{field} ({path} row {i})", "'prompt' must be a non-empty string", "fix that row")
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
        if not isinstance(answer, str):
            raise UserError(f"{field} ({path} row {i})", "'answer' must be a string or a number", "fix that row")
        examples.append(Example(prompt, answer))
    if not examples:
        raise UserError(field, f"{path} holds no rows", "add {prompt, answer} rows")
    return examples


class DataTask(Task):
    name = "data"

    def __init__(self, path: str, eval_path: str | None = None, eval_size: int = 256, reward: str = "integer_match",
                 reward_timeout_s: float = 10.0):
        rows = read_examples(Path(path), "task.path")  # the data first: a bad file fails before a reward worker starts
        if eval_path:
            self._train, self._eval = rows, read_examples(Path(eval_path), "task.eval_path")[:eval_size]
        else:
            if len(rows) <= eval_size:
                raise UserError("task.eval_size", f"holding out {eval_size} of {len(rows)} rows leaves none to train on",
                                f"set task.eval_size < {len(rows)} or give task.eval_path")
            self._train, self._eval = rows[:-eval_size], rows[-eval_size:]
        self.reward_fn = self.accuracy_fn = resolve_reward(reward, reward_timeout_s)  # eval/accuracy: mean reward

    def sample_train(self, rng: np.random.Generator, count: int) -> list[Example]:
        return [self._train[i] for i in rng.integers(0, len(self._train), count).tolist()]

    def eval_examples(self) -> list[Example]:
        return self._eval
