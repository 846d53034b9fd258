"""A task from the user's own data, in the shapes users already have, read without conversion.

Files (tasks.data_files): JSONL, Parquet, or a Hugging Face dataset saved with `save_to_disk` (its directory; of a
DatasetDict, a split's directory).

Shapes: the prompt is the column `prompt`, the answer the first of ANSWER_COLUMNS the first row has, unless
`task.columns.prompt` / `task.columns.answer` name others (dotted paths into nested columns: "reward_model.ground_truth";
a column whose own name holds a dot is found first). That reads, as they come:
- batchscale's own rows: {"prompt": "2+2=", "answer": "4"};
- verl's parquet (verl examples/data_preprocess/gsm8k.py): `prompt` a list of chat messages, the answer under
  `reward_model.ground_truth`; `data_source`, `ability` and `extra_info` are not read (the reward is task.reward, not
  verl's scorer chosen by data_source);
- TRL's shapes (docs/source/dataset_formats.md): prompt-only, standard (`prompt` text) or conversational (`prompt`
  messages), with the answer in `solution` (trl.rewards.accuracy_reward) or `answer` (GSM8K); prompt-completion, whose
  `completion` (text, or messages: the last one's content) is the answer. A whole solution as the answer (GSM8K's
  "... #### 72", a MATH solution's \\boxed{}) is read as its final answer, a completion written like a response
  ("It is 3.") in the response's format (tasks.answers.reference_answer).
A prompt is non-empty text, or a non-empty list of messages, each {"role": text, "content": text} (other keys are not
read): kept as messages (tasks.base.Chat) for the policy's chat template, so such data needs model.chat_template =
true (build_task says so before any compute). An answer is text or a finite number (written as text). Every row is
checked before any compute: a missing column, an empty prompt, a malformed message or an answer of another type is
one error naming the file, the row and the column, and what to set.

Held-out rows come from `eval_path` when given, else the last `eval_size` rows of `path` (so the split is fixed by the
file, not by the seed). Training prompts are drawn uniformly with replacement from the rest with the run's generator.
Answers are read in `task.answer_format` (default `last_number`: instruct models answer in a sentence); a format that
reads a number (`last_number`, `hash`) refuses data whose answers are not numbers, naming the row.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from batchscale.errors import UserError
from batchscale.tasks.answers import canonical_number, normalize_answer, reference_answer
from batchscale.tasks.base import Chat, Example, Task
from batchscale.tasks.data_files import read_rows
from batchscale.tasks.rewards import UserReward, accuracy_reward, answer_format_of, resolve_reward

ANSWER_COLUMNS = ("answer", "solution", "reward_model.ground_truth", "completion")  # the first a row has
DEFAULT_ANSWER_FORMAT = "last_number"
SHOWN_CHARS = 60
_MISSING = object()


def lookup(row: dict, path: str):
    """The value at a column name, or a dotted path into nested columns; _MISSING if there is none."""
    if path in row:
        return row[path]
    node = row
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _columns_hint(row: dict) -> str:
    return ", ".join(repr(str(k))[:SHOWN_CHARS] for k in list(row)[:12]) or "none"


def choose_columns(row: dict, prompt_column: str | None, answer_column: str | None, where: str) -> tuple[str, str]:
    """(prompt column, answer column) for a file, from task.columns or the shapes the first row fits."""
    prompt = prompt_column or "prompt"
    if lookup(row, prompt) is _MISSING:
        field = "task.columns.prompt" if prompt_column else where
        guess = next((c for c in ("question", "problem", "query", "instruction") if c in row), None)
        hint = f"e.g. task.columns.prompt = {guess!r}" if guess else "task.columns.prompt = 'COLUMN'"
        raise UserError(field, f"no column {prompt!r} (its columns: {_columns_hint(row)}); each row needs a 'prompt' "
                        "and an 'answer'", f"name the prompt's column: {hint}")
    if answer_column:
        if lookup(row, answer_column) is _MISSING:
            raise UserError("task.columns.answer", f"{where} has no column {answer_column!r} (its columns: "
                            f"{_columns_hint(row)})", "name a column it has (a dotted path for nested ones)")
        return prompt, answer_column
    answer = next((c for c in ANSWER_COLUMNS if lookup(row, c) is not _MISSING), None)
    if answer is None:
        raise UserError(where, f"no answer column (none of {', '.join(ANSWER_COLUMNS)}; its columns: "
                        f"{_columns_hint(row)}); each row needs a 'prompt' and an 'answer'",
                        "name the answer's column: task.columns.answer = 'COLUMN' (a dotted path for nested ones)")
    return prompt, answer


def read_prompt(value, where: str, column: str) -> str | Chat:
    """A prompt cell: non-empty text, or a list of chat messages (module docstring)."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value:
        messages = []
        for k, message in enumerate(value):
            role = message.get("role") if isinstance(message, dict) else None
            content = message.get("content") if isinstance(message, dict) else None
            if not (isinstance(role, str) and role and isinstance(content, str)):
                raise UserError(where, f"column {column!r}: message {k} is not {{'role': text, 'content': text}} "
                                f"({str(message)[:SHOWN_CHARS]!r})", "write each message as {\"role\": \"user\", "
                                "\"content\": \"...\"} (text content only)")
            messages.append((role, content))
        return Chat(tuple(messages))
    raise UserError(where, f"column {column!r} must be non-empty text or a list of chat messages, got "
                    f"{str(value)[:SHOWN_CHARS]!r}", "fix that row, or name another column in task.columns.prompt")


def read_answer(value, where: str, column: str) -> str:
    """An answer cell: text, a finite number (as text), or messages (a TRL completion: the last one's content)."""
    if isinstance(value, list) and value and isinstance(value[-1], dict) and isinstance(value[-1].get("content"), str):
        return value[-1]["content"]
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)
    raise UserError(where, f"column {column!r} must be text or a number (one answer), got {str(value)[:SHOWN_CHARS]!r}",
                    "fix that row, or name the column holding the final answer in task.columns.answer")


def read_examples(path: Path, field: str, prompt_column: str | None = None,
                  answer_column: str | None = None) -> list[Example]:
    """The rows of `path` as Examples, every row checked (module docstring)."""
    rows = read_rows(path, field)
    if not rows:
        raise UserError(field, f"{path} holds no rows", "add rows with a prompt and an answer")
    columns = None
    examples = []
    for i, row in enumerate(rows, 1):
        where = f"{field} ({path} row {i})"
        if not isinstance(row, dict):
            raise UserError(where, "a row must be a JSON object; each row needs a 'prompt' and an 'answer'",
                            'write rows like {"prompt": "2+2=", "answer": "4"}')
        if columns is None:
            columns = choose_columns(row, prompt_column, answer_column, where)
        prompt, answer = (lookup(row, c) for c in columns)
        for column, value in zip(columns, (prompt, answer)):
            if value is _MISSING or value is None:
                raise UserError(where, f"no value in column {column!r}, which row 1 has",
                                "give every row the same columns")
        examples.append(Example(read_prompt(prompt, where, columns[0]), read_answer(answer, where, columns[1])))
    return examples


def check_numeric_answers(examples: list[Example], answer_format: str, path: str, field: str) -> None:
    """A format that reads a number needs answers that are numbers."""
    for i, ex in enumerate(examples, 1):
        if canonical_number(normalize_answer(reference_answer(ex.answer, answer_format))) is None:
            raise UserError("task.answer_format", f"{answer_format!r} reads a number, but the answer of {field} "
                            f"({path}) row {i}, {ex.answer[:SHOWN_CHARS]!r}, is not one",
                            "set task.answer_format to 'text', 'boxed' or 'answer_tag' (or fix the row)")


class DataTask(Task):
    name = "data"

    def __init__(self, path: str, eval_path: str | None = None, eval_size: int = 256, reward: str = "digit_match",
                 reward_timeout_s: float = 10.0, answer_format: str | None = None,
                 prompt_column: str | None = None, answer_column: str | None = None):
        # the data first: a bad file fails before a reward worker starts
        rows = read_examples(Path(path), "task.path", prompt_column, answer_column)
        held_out = read_examples(Path(eval_path), "task.eval_path", prompt_column, answer_column) if eval_path else []
        self.answer_format = answer_format_of(reward, answer_format, DEFAULT_ANSWER_FORMAT)
        user_reward = ":" in reward
        if self.answer_format in ("last_number", "hash") and not (user_reward and answer_format is None):
            check_numeric_answers(rows, self.answer_format, path, "task.path")
            check_numeric_answers(held_out, self.answer_format, str(eval_path), "task.eval_path")
        if eval_path:
            self._train, self._eval = rows, held_out[:eval_size]
        else:
            if len(rows) <= eval_size:
                raise UserError("task.eval_size", f"holding out {eval_size} of {len(rows)} rows leaves none to train on",
                                f"set task.eval_size < {len(rows)} or give task.eval_path")
            self._train, self._eval = rows[:-eval_size], rows[-eval_size:]
        self.chat_prompts = any(isinstance(ex.prompt, Chat) for ex in self._train + self._eval)
        self.reward_fn = resolve_reward(reward, reward_timeout_s, self.answer_format)
        # eval/accuracy: exact on the extracted answer; a user's reward without an answer format: its mean, as before
        keep_user = isinstance(self.reward_fn, UserReward) and answer_format is None
        self.accuracy_fn = self.reward_fn if keep_user else accuracy_reward(self.answer_format)

    def sample_train(self, rng: np.random.Generator, count: int) -> list[Example]:
        return [self._train[i] for i in rng.integers(0, len(self._train), count).tolist()]

    def eval_examples(self) -> list[Example]:
        return self._eval
