"""Tasks from reasoning-gym: procedural generators of verifiable-reward problems, each with its own scorer.

`task.name = "reasoning_gym"`, `task.dataset` a reasoning-gym dataset ("basic_arithmetic", "chain_sum", "countdown",
"gsm_symbolic", ...), `task.params` its config fields, passed to `reasoning_gym.create_dataset` as they are. Needs the
optional extra `reasoning-gym` (`pip install 'batchscale[reasoning-gym]'`); without it the task is refused, naming it.

- The pool: `create_dataset(dataset, seed=task.split_seed, size=..., **params)`. Its item i is a pure function of
  (seed, i), so the same task config gives the same problems on every machine and in every process. `size` is
  `params.size` when given, else POOL_SIZE (reasoning-gym's own default, 500, would repeat a few hundred prompts).
  `params.seed` is refused: the pool's seed is `task.split_seed`, shared by every run and seed, like the eval set.
  Each param is checked against its field's type in the dataset's config dataclass first (an int field takes an
  integer within numpy's int64, a float field a finite number, a bool field a boolean), and an item the generator then
  fails to build is a UserError naming the dataset and params, never a traceback.
- The split, as in the built-in arithmetic task: a stable hash of (split_seed, i) holds out one index in EVAL_SHARE.
  The eval set is the first `eval_size` held-out items with distinct questions, in index order. Training draws indices
  uniformly with the run's generator and redraws a held-out index or one whose question is in the eval set, so train
  and eval never share a prompt, even where two indices generate the same question.
- The reward is the dataset's own `score_answer(answer, entry)`, in-process. The answer is the text inside the last
  `<answer>...</answer>` of the response (reasoning_gym.utils.extract_answer, reasoning-gym's convention), or the
  stripped response when it holds no such tags. Departure: reasoning-gym's own evaluation scores an untagged response
  as no answer; a small model asked for the answer alone rarely writes tags. `task.reward` does not apply.
  With `task.answer_format` set, the answer is extracted in that format first (tasks.answers; none found: the empty
  answer): a number format (`strict`, `last_number`, `hash`) hands the scorer the canonical number ("1,234" as
  "1234"), and is refused, naming an eval answer, for a dataset whose answers are not all numbers.
- Model output is untrusted, and several scorers run it as Python: `eval` (EVALUATING_SCORERS: spiral_matrix,
  binary_matrix, n_queens, string_insertion) or sympy's `parse_expr` (polynomial_multiplication, simple_integration,
  intermediate_integration; countdown and puzzle24, ARITHMETIC_SCORERS); a composite dataset inherits its members'.
  Those datasets are scored in a confined worker (tasks.isolated_scorer: a fresh process per answer, no file or
  network access under Landlock, resource and time limits), never in-process. Where Landlock is missing the
  EVALUATING_SCORERS datasets are refused, naming the dataset, before any compute. The ARITHMETIC_SCORERS also keep
  their older guard: an answer with any character outside ARITHMETIC_CHARS (digits, + - * / ( ) . and spaces) is scored
  as no answer (the empty string) without reaching the scorer, so they run (in the worker, time-limited) without
  Landlock too. An answer that hangs, exhausts or kills its scorer is scored as no answer, and said once.
  Every other dataset's scorer reads the answer as data (compares, parses numbers or JSON) and runs in-process.
- `eval/accuracy` is the share of eval answers that `score_answer` gives full marks (1.0); `eval/reward` the mean score.
- The prompt is the dataset's question, or `task.template` with `{question}` filled in (a template must hold it).
"""

from __future__ import annotations

import difflib
import hashlib
import sys
from dataclasses import dataclass, field, fields, is_dataclass

import numpy as np

from batchscale.errors import UserError
from batchscale.tasks.answers import NUMERIC_FORMATS, canonical_number, extract_answer, normalize_answer
from batchscale.tasks.arithmetic import EVAL_SHARE
from batchscale.tasks.base import Example, Task
from batchscale.tasks.confinement import landlock_missing_reason
from batchscale.tasks.isolated_scorer import IsolatedScorer

EXTRA = "reasoning-gym"  # the optional extra (pyproject.toml) that installs the library
POOL_SIZE = 100_000  # indices in the pool when task.params gives no size
MAX_REDRAWS = 1000  # per training prompt: a pool that is nearly all eval questions is an error, not a hang
SHOWN_CHARS = 80
EVALUATING_SCORERS = frozenset({"spiral_matrix", "binary_matrix", "n_queens", "string_insertion",
                                "polynomial_multiplication", "simple_integration", "intermediate_integration"})
ARITHMETIC_SCORERS = frozenset({"countdown", "puzzle24"})  # parse_expr too, but only arithmetic reaches it
ARITHMETIC_CHARS = frozenset("0123456789+-*/(). ")


@dataclass(frozen=True)
class GymExample(Example):
    """An Example that carries the dataset's entry (question, answer, metadata): what its score_answer reads."""

    entry: dict = field(default_factory=dict, compare=False, hash=False, repr=False)


def import_reasoning_gym():
    """The reasoning_gym module, or a UserError naming the extra that installs it."""
    try:
        import reasoning_gym
    except ImportError:
        raise UserError("task.name", "'reasoning_gym' needs the reasoning-gym library, which is not installed",
                        f"pip install 'batchscale[{EXTRA}]' (or pip install reasoning-gym)") from None
    return reasoning_gym


def _is_eval_index(index: int, split_seed: int) -> bool:
    digest = hashlib.blake2b(f"{split_seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % EVAL_SHARE == 0


def _config_fields(dataset: str) -> list[str]:
    from reasoning_gym.factory import DATASETS

    config_cls = DATASETS[dataset][1]
    return [f.name for f in fields(config_cls)] if is_dataclass(config_cls) else []


def pool_kwargs(params: dict, split_seed: int) -> dict:
    return {"size": POOL_SIZE, **params, "seed": split_seed}


def evaluated_datasets(dataset: str, params: dict) -> set[str]:
    """The datasets behind `dataset` whose scorer runs the answer as Python: itself, or a composite's members."""
    names = {dataset}
    if dataset == "composite" and isinstance(params.get("datasets"), list):
        names |= {spec.get("name") for spec in params["datasets"] if isinstance(spec, dict)}
    return names & (EVALUATING_SCORERS | ARITHMETIC_SCORERS)


def create_pool(dataset: str | None, params: dict, split_seed: int):
    """The reasoning-gym dataset a task config names, every input checked with a message naming the field."""
    reasoning_gym = import_reasoning_gym()
    from reasoning_gym.factory import DATASETS

    if not dataset:
        raise UserError("task.dataset", "task.name = 'reasoning_gym' needs a dataset", "set task.dataset, e.g. 'chain_sum'")
    if dataset not in DATASETS:
        close = difflib.get_close_matches(dataset, list(DATASETS), n=3)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise UserError("task.dataset", f"{dataset!r} is not a reasoning-gym dataset",
                        f"{hint}set task.dataset to one of reasoning_gym.factory.DATASETS, e.g. 'chain_sum'")
    if "seed" in params:
        raise UserError("task.params.seed", "the pool's seed is task.split_seed (shared by every run and seed)",
                        "drop task.params.seed and set task.split_seed")
    valid = _config_fields(dataset)
    for key in params:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise UserError(f"task.params.{key}", f"not a parameter of the reasoning-gym dataset {dataset!r}",
                            f"{hint}valid parameters: {', '.join(v for v in valid if v != 'seed')}")
    check_param_types(dataset, params)
    kwargs = pool_kwargs(params, split_seed)
    try:
        return reasoning_gym.create_dataset(dataset, **kwargs)
    except (AssertionError, ValueError, TypeError) as e:  # the config dataclass's own validate() asserts
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        raise UserError("task.params", f"reasoning-gym's {dataset!r} refuses {params!r:.120}: {reason}",
                        f"change task.params so that the rule holds ({DATASETS[dataset][1].__name__} lists them)") from None


MAX_PARAM_INT = 2**63 - 1  # numpy's int64: a generator draws in it


def check_param_types(dataset: str, params: dict) -> None:
    """Each of `params` of the type its field in the dataset's config dataclass declares (int, float or bool, where
    it declares one; others are left to the dataclass's own validate)."""
    import math
    import typing

    from reasoning_gym.factory import DATASETS

    try:
        hints = typing.get_type_hints(DATASETS[dataset][1])
    except Exception:  # a config class whose annotations do not resolve: left to its own validate()
        return
    for key, value in params.items():
        kinds = set(typing.get_args(hints.get(key))) - {type(None)} or {hints.get(key)}
        if bool in kinds and not isinstance(value, bool):
            problem = "must be true or false"
        elif int in kinds and (not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_PARAM_INT):
            problem = "must be an integer within +-(2**63 - 1)"
        elif float in kinds and (not isinstance(value, (int, float)) or isinstance(value, bool) or
                                 not math.isfinite(value) or abs(value) > 1e300):
            problem = "must be a finite number"
        else:
            continue
        shown = f"an integer of {value.bit_length():,} bits" if isinstance(value, int) and value.bit_length() > 100 \
            else repr(value)[:40]
        raise UserError(f"task.params.{key}", f"{problem} for reasoning-gym's {dataset!r} (got {shown})",
                        f"set task.params.{key} as {DATASETS[dataset][1].__name__} declares it")


class ReasoningGymTask(Task):
    name = "reasoning_gym"

    def __init__(self, dataset: str | None, params: dict | None = None, template: str | None = None,
                 split_seed: int = 0, eval_size: int = 256, answer_format: str | None = None):
        params = dict(params or {})
        self.dataset_name, self.split_seed = dataset, split_seed
        if template is not None and "{question}" not in template:
            raise UserError("task.template", f"a reasoning-gym prompt fills in {{question}}, but {template!r:.60} "
                            "holds none", "put {question} in task.template, or drop it (the question alone)")
        self.template = template or "{question}"
        self.pool = create_pool(dataset, params, split_seed)
        self._evaluated = evaluated_datasets(dataset, params)
        self._needs_confinement = bool(self._evaluated & EVALUATING_SCORERS)
        if self._needs_confinement and (why := landlock_missing_reason()):
            raise UserError("task.dataset", f"reasoning-gym's {dataset!r} scores an answer by evaluating it as Python "
                            f"({', '.join(sorted(self._evaluated & EVALUATING_SCORERS))}), which batchscale runs only "
                            f"in a confined process, and {why}",
                            "run on a Linux kernel with Landlock (5.13+), or choose another dataset")
        self._kwargs = pool_kwargs(params, split_seed)
        self._scorer: IsolatedScorer | None = None
        self._said_stopped = False
        self.size = len(self.pool)
        self._entries: dict[int, dict] = {}
        self._eval = self._build_eval(eval_size)
        self._eval_questions = {ex.entry["question"] for ex in self._eval}
        self.answer_format = answer_format
        if answer_format in NUMERIC_FORMATS:
            self._check_numeric_answers()

    def _entry(self, index: int) -> dict:
        if index not in self._entries:
            try:
                self._entries[index] = self.pool[index]
            except Exception as e:  # params the dataclass accepted but its generator cannot use
                raise UserError("task.params", f"reasoning-gym's {self.dataset_name!r} fails to generate item {index} "
                                f"({type(e).__name__}: {str(e)[:SHOWN_CHARS]})",
                                "change task.params (its generator cannot use them)") from None
        return self._entries[index]

    def _example(self, index: int) -> GymExample:
        entry = self._entry(index)
        return GymExample(self.template.replace("{question}", entry["question"]), str(entry["answer"]), entry)

    def _build_eval(self, eval_size: int) -> list[GymExample]:
        """The first eval_size held-out indices with distinct questions, in index order."""
        examples: dict[str, GymExample] = {}
        for index in range(self.size):
            if len(examples) == eval_size:
                return list(examples.values())
            if _is_eval_index(index, self.split_seed):
                ex = self._example(index)
                examples.setdefault(ex.entry["question"], ex)
        raise UserError("task.eval_size", f"the pool of {self.size} {self.dataset_name!r} items holds only "
                        f"{len(examples)} distinct held-out questions, fewer than {eval_size}",
                        f"set task.eval_size <= {len(examples)}, or raise task.params.size")

    def sample_train(self, rng: np.random.Generator, count: int) -> list[Example]:
        out: list[Example] = []
        for _ in range(count):
            for _ in range(MAX_REDRAWS):
                index = int(rng.integers(0, self.size))
                if not _is_eval_index(index, self.split_seed):
                    ex = self._example(index)
                    if ex.entry["question"] not in self._eval_questions:
                        out.append(ex)
                        break
            else:
                raise UserError("task.params.size", f"{MAX_REDRAWS} draws from the {self.dataset_name!r} pool found "
                                "no question outside the eval set", "raise task.params.size or lower task.eval_size")
        return out

    def eval_examples(self) -> list[Example]:
        return self._eval

    def _check_numeric_answers(self) -> None:
        for ex in self._eval:
            if canonical_number(normalize_answer(ex.answer)) is None:
                raise UserError("task.answer_format", f"{self.answer_format!r} reads a number, but reasoning-gym's "
                                f"{self.dataset_name!r} answers {ex.answer[:SHOWN_CHARS]!r}, which is not one",
                                "drop task.answer_format (the <answer> tags, else the whole response), or set it to "
                                "'answer_tag' or 'text'")

    def extract(self, response: str) -> str:
        """The answer handed to score_answer (module docstring); "" for none."""
        if self.answer_format is None:
            from reasoning_gym.utils import extract_answer as extract_tagged

            tagged = extract_tagged(response)
            return tagged if tagged is not None else response.strip()
        found = extract_answer(response, self.answer_format)
        if found is None:
            return ""
        if self.answer_format in NUMERIC_FORMATS:
            return canonical_number(normalize_answer(found)) or ""
        return found

    def score(self, responses: list[str], examples: list[Example]) -> list[float]:
        answers = []
        for response in responses:
            answer = self.extract(response)
            if self._evaluated & ARITHMETIC_SCORERS and not set(answer) <= ARITHMETIC_CHARS:
                answer = ""  # never evaluated: module docstring
            answers.append(answer)
        if not self._evaluated:
            return [self._score_here(answer, ex) for answer, ex in zip(answers, examples, strict=True)]
        return self._score_isolated(answers, examples)

    def _score_here(self, answer: str, ex: GymExample) -> float:
        try:
            return float(self.pool.score_answer(answer, ex.entry))
        except Exception as e:  # the library's scorer failing on an answer is its bug: say where, stop the run
            raise self._scorer_bug(f"{type(e).__name__}: {str(e)[:SHOWN_CHARS]}", answer) from None

    def _scorer_bug(self, raised: str, answer: str) -> UserError:
        return UserError(f"task.dataset {self.dataset_name}", f"score_answer raised {raised} on the answer "
                         f"{answer[:SHOWN_CHARS]!r}", "report it to reasoning-gym, or choose another dataset")

    def _score_isolated(self, answers: list[str], examples: list[Example]) -> list[float]:
        """Scores from the confined worker; an answer that stopped its scorer gets the score of no answer ("")."""
        if self._scorer is None:
            self._scorer = IsolatedScorer(self.dataset_name, self._kwargs, self._needs_confinement)
        entries = [ex.entry for ex in examples]
        replies = self._scorer.score(entries, answers)
        stopped = [k for k, reply in enumerate(replies) if "stopped" in reply]
        if stopped:
            if not self._said_stopped:
                k = stopped[0]
                print(f"warning: task.dataset {self.dataset_name}: the answer {answers[k][:SHOWN_CHARS]!r} "
                      f"{replies[k]['stopped']}; it is scored as no answer, as is every such answer",
                      file=sys.stderr, flush=True)
                self._said_stopped = True
            for k, reply in zip(stopped, self._scorer.score([entries[k] for k in stopped], [""] * len(stopped))):
                replies[k] = reply if "stopped" not in reply else {"raised": f"stopped on no answer: {reply['stopped']}"}
        for reply, answer in zip(replies, answers):
            if "raised" in reply:
                raise self._scorer_bug(reply["raised"], answer)
        return [reply["score"] for reply in replies]
    def accuracy(self, responses: list[str], examples: list[Example]) -> list[float]:
        return [float(s >= 1.0) for s in self.score(responses, examples)]

    def close(self) -> None:
        """Stop the scoring worker, if one was started."""
        if self._scorer is not None:
            self._scorer.close()
            self._scorer = None
