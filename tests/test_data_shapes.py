"""User data in the shapes users have (tasks/data.py, tasks/data_files.py), read and trained on without conversion.

The shapes, checked against the frameworks' own data preparation:
- verl: volcengine/verl examples/data_preprocess/gsm8k.py at commit 030a519ae51a9916b9debd99c6def5f4d83f991f: each row
  {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": question + " " + instruction}],
  "ability": "math", "reward_model": {"style": "rule", "ground_truth": solution}, "extra_info": {"split", "index",
  "answer", "question"}}, written by datasets' to_parquet (pyarrow: list<struct>, struct columns); built here with
  pyarrow in exactly those types (`verl_rows`).
- TRL: huggingface/trl docs/source/dataset_formats.md at commit 0087e4f5f389bf0fba0d8d5458e2243a11640f6c: prompt-only
  {"prompt": "The sky is"} (standard) or {"prompt": [{"role": "user", "content": ...}]} (conversational), and
  prompt-completion {"prompt": ..., "completion": ...} (text, or [{"role": "assistant", "content": ...}]); GRPO
  reward columns as trl/rewards/accuracy_rewards.py (commit 010eddf0110ae5461b2102eb0977f83106b4106d) reads them:
  `solution`, the raw-text solution.
- A Hugging Face dataset saved with save_to_disk: tests/user_data/hf_saved/, written by datasets 5.2.0 itself
  (tests/user_data/make_hf_saved.py): a DatasetDict of TRL's conversational prompt-only shape.
"""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_trainer import read_records

from batchscale.cli import main
from batchscale.config import TaskConfig, load_config
from batchscale.errors import UserError
from batchscale.tasks import build_task
from batchscale.tasks.base import Chat

HF_SAVED = __import__("pathlib").Path(__file__).parent / "user_data" / "hf_saved"
VERL_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'  # verl's gsm8k.py
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}|{% endfor %}"
                 "{% if add_generation_prompt %}a:{% endif %}")  # short: the random model has 64 positions


def sums(count: int, start: int = 0) -> list[tuple[str, str]]:
    return [(f"{i // 10}+{i % 10}?", str(i // 10 + i % 10)) for i in range(start, start + count)]


def verl_rows(problems, instruction: str = "") -> list[dict]:
    """Rows as verl's gsm8k.py process_fn makes them (module docstring)."""
    return [{"data_source": "openai/gsm8k",
             "prompt": [{"role": "user", "content": (question + " " + instruction).strip()}],
             "ability": "math", "reward_model": {"style": "rule", "ground_truth": answer},
             "extra_info": {"split": "train", "index": i, "answer": f"... #### {answer}", "question": question}}
            for i, (question, answer) in enumerate(problems)]


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def data_task(path, **fields):
    return build_task(TaskConfig(name="data", path=str(path), eval_size=fields.pop("eval_size", 2), **fields))


# ---- reading the shapes ----

def test_verl_parquet_reads_messages_and_the_ground_truth(tmp_path):
    path = write_parquet(tmp_path / "train.parquet", verl_rows([("Natalia sold 48 clips. How many?", "72"),
                                                                 ("What is 1,000 + 234?", "1234"), ("x", "3")],
                                                                VERL_INSTRUCTION))
    assert pq.read_schema(path).field("prompt").type == pa.list_(pa.struct([("role", pa.string()),
                                                                              ("content", pa.string())]))
    task = data_task(path, eval_size=1)
    first = task.sample_train(__import__("numpy").random.default_rng(0), 1)[0]
    assert isinstance(first.prompt, Chat) and first.prompt.messages[0][0] == "user"
    assert first.prompt.messages[0][1].endswith(VERL_INSTRUCTION) and task.chat_prompts
    assert task.eval_examples()[0].answer == "3"
    assert task.answer_format == "last_number"
    assert task.accuracy(["Step by step: 2 + 1 = 3"], task.eval_examples()) == [1.0]
    hashed = data_task(path, eval_size=1, answer_format="hash", reward="answer_match")
    assert hashed.accuracy(["2 + 1 = 3, #### 3", "3"], hashed.eval_examples() * 2) == [1.0, 0.0]


def test_trl_conversational_prompt_only_with_solution(tmp_path):
    rows = [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": q}],
             "solution": f"The sum is $\\boxed{{{a}}}$."} for q, a in sums(6)]
    task = data_task(write_jsonl(tmp_path / "d.jsonl", rows), answer_format="boxed", reward="answer_match")
    ex = task.eval_examples()[0]
    assert ex.prompt.messages == (("system", "Be brief."), ("user", "0+4?")) and ex.answer.startswith("The sum")
    assert task.accuracy(["so \\boxed{4}", "4"], [ex, ex]) == [1.0, 0.0]  # the solution is read as its boxed answer


def test_trl_standard_prompt_only_with_answer_and_prompt_completion(tmp_path):
    standard = data_task(write_jsonl(tmp_path / "s.jsonl", [{"prompt": q, "answer": a} for q, a in sums(4)]))
    assert standard.eval_examples()[0].prompt == "0+2?" and not standard.chat_prompts
    rows = [{"prompt": [{"role": "user", "content": q}], "completion": [{"role": "assistant", "content": f"It is {a}."}]}
            for q, a in sums(4)]
    completion = data_task(write_jsonl(tmp_path / "c.jsonl", rows))
    assert completion.eval_examples()[1].answer == "It is 3."
    assert completion.accuracy(["3"], completion.eval_examples()[1:]) == [1.0]
    text = data_task(write_jsonl(tmp_path / "t.jsonl", [{"prompt": q, "completion": f" {a}"} for q, a in sums(4)]))
    assert text.eval_examples()[0].answer == " 2"


def test_saved_hugging_face_dataset_split_directories(tmp_path):
    task = data_task(HF_SAVED / "train", eval_path=str(HF_SAVED / "test"), eval_size=4)
    assert [ex.answer for ex in task.eval_examples()] == ["5", "6", "7", "8"]  # 50..53: 5+0 .. 5+3
    assert task.eval_examples()[0].prompt == Chat((("user", "5+0?"),)) and task.chat_prompts
    with pytest.raises(UserError, match=r"is a DatasetDict \(splits: train, test\).*hf_saved/train"):
        data_task(HF_SAVED)


def test_column_mapping_with_dotted_paths(tmp_path):
    rows = [{"question": q, "meta": {"final": {"value": int(a)}}, "a.b": "flat"} for q, a in sums(5)]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    task = data_task(path, columns={"prompt": "question", "answer": "meta.final.value"})
    assert task.eval_examples()[0].prompt == "0+3?" and task.eval_examples()[0].answer == "3"
    flat = data_task(path, columns={"prompt": "question", "answer": "a.b"}, answer_format="text")
    assert flat.eval_examples()[0].answer == "flat"  # a column named with a dot is found before a path
    gsm8k = [{"question": q, "answer": f"{q[0]} plus {q[2]}\n#### {a}"} for q, a in sums(4)]
    raw = data_task(write_jsonl(tmp_path / "g.jsonl", gsm8k), columns={"prompt": "question"})
    assert raw.accuracy(["The answer is 2."], raw.eval_examples()[:1]) == [1.0]  # GSM8K's raw answer column


# ---- bad rows and shapes: one error naming the column and the fix ----

@pytest.mark.parametrize("rows, fields, where, phrase", [
    ([{"prompt": [{"role": "user"}], "answer": "1"}] * 3, {}, "row 1", "message 0 is not {'role': text"),
    ([{"prompt": [{"role": "user", "content": [{"type": "text"}]}], "answer": "1"}] * 3, {}, "row 1", "message 0"),
    ([{"prompt": [], "answer": "1"}] * 3, {}, "row 1", "non-empty text or a list of chat messages"),
    ([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": None}, {"prompt": "c", "answer": "1"}], {}, "row 2",
     "no value in column 'answer'"),
    ([{"prompt": "a", "reward_model": {"ground_truth": ["1", "2"]}}] * 3, {}, "row 1", "one answer"),
    ([{"prompt": "a", "answer": {"x": 1}}] * 3, {}, "row 1", "must be text or a number"),
    ([{"question": "a", "answer": "1"}] * 3, {}, "row 1", "task.columns.prompt = 'question'"),
    ([{"prompt": "a", "label": "1"}] * 3, {}, "row 1", "task.columns.answer = 'COLUMN'"),
    ([{"prompt": "a", "answer": "1"}] * 3, {"columns": {"answer": "reward_model.ground_truth"}}, "task.columns.answer",
     "no column 'reward_model.ground_truth'"),
    ([{"prompt": "a", "answer": "1"}] * 3, {"columns": {"prompt": "q"}}, "task.columns.prompt", "no column 'q'"),
    ([{"prompt": "a", "answer": "Paris"}] * 3, {}, "task.answer_format", "row 1, 'Paris', is not one"),
    ([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "x"}] * 2, {"answer_format": "hash"},
     "task.answer_format", "'hash' reads a number"),
])
def test_bad_rows_name_the_row_the_column_and_the_fix(tmp_path, rows, fields, where, phrase):
    with pytest.raises(UserError) as info:
        data_task(write_jsonl(tmp_path / "d.jsonl", rows), eval_size=1, **fields)
    assert where in info.value.field and phrase in str(info.value) and info.value.fix


def test_text_answers_train_with_a_text_format_or_a_user_reward(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "Capital of France?", "answer": "Paris"}] * 3)
    assert data_task(path, eval_size=1, answer_format="text").accuracy([" Paris "], [data_task(
        path, eval_size=1, answer_format="text").eval_examples()[0]]) == [1.0]
    assert data_task(path, eval_size=1, reward="exact_match").answer_format == "text"


def test_saved_dataset_state_is_hostile_input(tmp_path):
    bad = tmp_path / "saved"
    shutil.copytree(HF_SAVED / "train", bad)
    state = json.loads((bad / "state.json").read_text())
    for name, phrase in (("../train/data-00000-of-00001.arrow", "not a file name"), ("missing.arrow", "missing"),
                         ("", "not a file name")):
        state["_data_files"] = [{"filename": name}]
        (bad / "state.json").write_text(json.dumps(state))
        with pytest.raises(UserError, match=phrase):
            data_task(bad, eval_size=1)
    (bad / "state.json").write_text(json.dumps({**state, "_data_files": [{"filename": "junk.arrow"}]}))
    (bad / "junk.arrow").write_bytes(b"not arrow at all" * 10)
    with pytest.raises(UserError, match="not a readable Arrow stream"):
        data_task(bad, eval_size=1)
    (bad / "state.json").write_text("[" * 100_000)
    with pytest.raises(UserError, match="not valid JSON"):
        data_task(bad, eval_size=1)
    (bad / "state.json").unlink()
    with pytest.raises(UserError, match="without state.json"):
        data_task(bad, eval_size=1)


def test_chat_prompts_need_the_chat_template_before_any_compute(tmp_path, capsys):
    path = write_parquet(tmp_path / "train.parquet", verl_rows(sums(6)))
    with pytest.raises(UserError) as info:
        build_task(TaskConfig(name="data", path=str(path), eval_size=2), chat_template=False)
    assert info.value.field == "model.chat_template" and "model.chat_template = true" in info.value.fix
    build_task(TaskConfig(name="data", path=str(path), eval_size=2), chat_template=True).close()
    out = tmp_path / "run"
    assert main(["train", "--set", "task.name=data", "--set", f"task.path='{path}'", "--set", "task.eval_size=2",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model.chat_template") and err.count("\n") == 1 and not out.exists()


def test_parquet_and_saved_datasets_without_pyarrow_name_the_extra(tmp_path, monkeypatch):
    path = write_parquet(tmp_path / "d.parquet", [{"prompt": "a", "answer": "1"}] * 3)
    monkeypatch.setitem(__import__("sys").modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    for where in (path, HF_SAVED / "train"):
        with pytest.raises(UserError, match=r"batchscale\[data\]"):
            data_task(where, eval_size=1)
    assert data_task(write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a", "answer": "1"}] * 3), eval_size=1)


def test_columns_belong_to_data_tasks():
    with pytest.raises(UserError, match="columns are read from data files"):
        build_task(TaskConfig(columns={"prompt": "question"}))


# ---- training on each shape, without conversion ----

@pytest.fixture(scope="module")
def chat_model_dir(random_model_dir, tmp_path_factory):
    """The random test model with a short chat template (its character tokenizer has none)."""
    from transformers import AutoTokenizer

    path = tmp_path_factory.mktemp("chat-model") / "model"
    shutil.copytree(random_model_dir, path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    return path


def train_on(model_dir, out, *overrides):
    from batchscale.train.loop import train

    cfg = load_config(None, [f"model.name='{model_dir}'", "batch.prompts_per_step=4", "batch.samples_per_prompt=3",
                             "batch.micro_batch_size=4", "batch.reference_samples_per_step=12", "run.budget_samples=24",
                             "run.eval_every_samples=12", "task.eval_size=4", "sampling.max_new_tokens=4",
                             "run.threads=1", "task.name=data", *overrides])
    summary = train(cfg, out, log=lambda s: None)
    return summary, read_records(out)


def shape_files(tmp_path) -> dict[str, tuple[str, ...]]:
    problems = sums(16)
    verl = write_parquet(tmp_path / "verl.parquet", verl_rows(problems))
    trl = write_jsonl(tmp_path / "trl.jsonl", [{"prompt": [{"role": "user", "content": q}], "solution": a}
                                               for q, a in problems])
    completion = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": q, "completion": a} for q, a in problems])
    return {"verl": (f"task.path='{verl}'",), "trl": (f"task.path='{trl}'",),
            "prompt-completion": (f"task.path='{completion}'", "model.chat_template=false"),
            "hf-saved": (f"task.path='{HF_SAVED / 'train'}'", f"task.eval_path='{HF_SAVED / 'test'}'")}


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["verl", "trl", "prompt-completion", "hf-saved"])
def test_each_shape_trains_a_few_steps(chat_model_dir, tmp_path, shape):
    overrides = shape_files(tmp_path)[shape]
    summary, records = train_on(chat_model_dir, tmp_path / "run", "model.chat_template=true", *overrides)
    assert summary["steps"] == 2 and [r["step"] for r in records if r["kind"] == "step"] == [1, 2]
    evals = [r for r in records if r["kind"] == "eval"]
    assert len(evals) >= 2 and all(0.0 <= r["eval/accuracy"] <= 1.0 for r in evals)
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["prompt"].startswith("user: ") == (shape != "prompt-completion") for s in samples)


@pytest.mark.slow
def test_messages_train_exactly_as_their_chat_template_text(chat_model_dir, tmp_path):
    """Equivalence: verl's messages through the chat template give the same run, record for record, as the same
    prompts rendered by that template beforehand and given as text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chat_model_dir)
    rows = verl_rows(sums(16))
    rendered = [{"prompt": tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True),
                 "answer": r["reward_model"]["ground_truth"]} for r in rows]
    _, chat = train_on(chat_model_dir, tmp_path / "chat", "model.chat_template=true",
                       f"task.path='{write_parquet(tmp_path / 'v.parquet', rows)}'")
    _, text = train_on(chat_model_dir, tmp_path / "text", "model.chat_template=false",
                       f"task.path='{write_jsonl(tmp_path / 'r.jsonl', rendered)}'")
    timeless = [[{k: v for k, v in r.items() if not k.startswith("time/") and k != "wall_s"} for r in records]
                for records in (chat, text)]
    assert timeless[0] == timeless[1] and rendered[0]["prompt"] == "u:0+0?|a:"
