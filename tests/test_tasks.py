"""Tasks and rewards: deterministic, disjoint splits; user data in JSONL and Parquet; rewards by name or module:function."""

from __future__ import annotations

import json

import numpy as np
import pytest

from batchscale.config import TaskConfig
from batchscale.errors import UserError
from batchscale.tasks import build_task
from batchscale.tasks.arithmetic import ArithmeticTask
from batchscale.tasks.rewards import digit_match, exact_match, integer_match, resolve_reward


def test_arithmetic_eval_split_is_fixed_by_the_task_config_and_disjoint_from_train():
    a, b = ArithmeticTask(digits=2, eval_size=64), ArithmeticTask(digits=2, eval_size=64)
    assert a.eval_examples() == b.eval_examples()
    assert len(set(a.eval_examples())) == 64
    assert ArithmeticTask(digits=2, eval_size=64, split_seed=1).eval_examples() != a.eval_examples()
    train = set(a.sample_train(np.random.default_rng(0), 2000))
    assert not train & set(a.eval_examples())


def test_arithmetic_answers_are_correct_and_draws_follow_the_seed():
    task = ArithmeticTask(digits=3, operations="+-*", eval_size=8)
    for ex in task.sample_train(np.random.default_rng(5), 50):
        assert str(eval(ex.prompt.rstrip("="))) == ex.answer  # the prompt is the expression itself
    assert task.sample_train(np.random.default_rng(5), 10) == task.sample_train(np.random.default_rng(5), 10)


def test_rewards_by_hand():
    assert integer_match("82", "82") == 1.0 and integer_match("The answer is 82.", "82") == 1.0
    assert integer_match("820", "82") == 0.0 and integer_match("", "82") == 0.0
    assert exact_match(" 82 ", "82") == 1.0 and exact_match("82.", "82") == 0.0
    assert digit_match("82", "82") == 1.0
    assert digit_match("92", "82") == 0.5  # units agree
    assert digit_match("182", "82") == pytest.approx(2 / 3)  # right-aligned, over the longer
    assert digit_match("no number", "82") == 0.0


def test_eval_accuracy_is_exact_even_with_a_partial_credit_reward():
    task = ArithmeticTask(digits=2, eval_size=4, reward="digit_match")
    ex = task.eval_examples()[:1]
    wrong = str(int(ex[0].answer) + 10)  # tens digit off, units right
    assert task.score([wrong], ex)[0] > 0 and task.accuracy([wrong], ex) == [0.0]


def test_reward_from_module_function(tmp_path, monkeypatch):
    (tmp_path / "myrewards.py").write_text("def always_half(response, answer):\n    return 0.5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert resolve_reward("myrewards:always_half")("x", "y") == 0.5
    with pytest.raises(UserError, match="cannot import"):
        resolve_reward("myrewards:missing")
    with pytest.raises(UserError, match="unknown reward"):
        resolve_reward("nonsense")


def test_builtin_rewards_run_in_process_and_user_rewards_in_a_worker(tmp_path, monkeypatch):
    import os

    from batchscale.tasks.rewards import REWARDS, UserReward, score_batch

    assert resolve_reward("digit_match") is REWARDS["digit_match"]  # a plain function: no process, no pipe
    (tmp_path / "pidreward.py").write_text("import os\n"
                                           "def pid(response, answer):\n    return os.getpid()\n"
                                           "def flag(response, answer):\n    return response == answer\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reward = resolve_reward("pidreward:pid", timeout_s=5)
    try:
        assert isinstance(reward, UserReward)
        worker = score_batch(reward, ["a", "b"], ["1", "2"])
        assert worker[0] == worker[1] != os.getpid()  # one worker, kept for every batch
        assert score_batch(reward, ["c"], ["3"]) == worker[:1]
    finally:
        reward.close()
    flag = resolve_reward("pidreward:flag")
    assert flag.score(["x", "y"], ["x", "z"]) == [1.0, 0.0]  # a bool is a number
    flag.close()


def write_rows(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_data_task_jsonl_holds_out_the_last_rows(tmp_path):
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(20)]
    write_rows(tmp_path / "d.jsonl", rows)
    task = build_task(TaskConfig(name="data", path=str(tmp_path / "d.jsonl"), eval_size=5, reward="integer_match"))
    assert [e.prompt for e in task.eval_examples()] == [f"{i}+1=" for i in range(15, 20)]
    assert {e.prompt for e in task.sample_train(np.random.default_rng(0), 100)} <= {f"{i}+1=" for i in range(15)}


def test_data_task_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": ["1+1=", "2+2=", "3+3="], "answer": ["2", "4", "6"]}), tmp_path / "d.parquet")
    task = build_task(TaskConfig(name="data", path=str(tmp_path / "d.parquet"), eval_size=1))
    assert task.eval_examples()[0].answer == "6"


@pytest.mark.parametrize("content, phrase", [
    ('{"prompt": "1+1="}\n', "needs a 'prompt' and an 'answer'"),
    ('{"prompt": "", "answer": "2"}\n', "non-empty text"),
    ('not json\n', "not valid JSON"),
    ('', "holds no rows"),
])
def test_data_task_bad_rows_name_the_row(tmp_path, content, phrase):
    (tmp_path / "d.jsonl").write_text(content)
    with pytest.raises(UserError, match=phrase):
        build_task(TaskConfig(name="data", path=str(tmp_path / "d.jsonl"), eval_size=1))


def test_data_task_too_few_rows_for_the_eval_set(tmp_path):
    write_rows(tmp_path / "d.jsonl", [{"prompt": "1+1=", "answer": "2"}] * 3)
    with pytest.raises(UserError) as info:
        build_task(TaskConfig(name="data", path=str(tmp_path / "d.jsonl"), eval_size=3))
    assert info.value.field == "task.eval_size"
