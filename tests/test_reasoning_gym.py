"""reasoning-gym tasks: prompts fixed by the config, disjoint splits, the dataset's own score_answer as the reward, and
a clear refusal where the optional extra `reasoning-gym` is not installed."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from batchscale.config import load_config
from batchscale.errors import UserError
from batchscale.tasks import build_task

SMALL_SUMS = ["task.name=reasoning_gym", "task.dataset=chain_sum", "task.eval_size=16",
              "task.params={min_terms=2, max_terms=2, min_digits=1, max_digits=2}"]


def gym_task(*overrides: str):
    return build_task(load_config(None, [*SMALL_SUMS, *overrides]).task)


def test_missing_extra_is_refused_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` raises ImportError
    with pytest.raises(UserError, match=r"batchscale\[reasoning-gym\]") as info:
        gym_task()
    assert info.value.field == "task.name"


needs_gym = pytest.mark.skipif(
    __import__("importlib").util.find_spec("reasoning_gym") is None,
    reason="needs the optional extra reasoning-gym: pip install 'batchscale[reasoning-gym]'")


@needs_gym
def test_same_config_same_prompts_and_the_seed_moves_only_train_draws():
    a, b = gym_task(), gym_task()
    assert a.eval_examples() == b.eval_examples() and len(set(a.eval_examples())) == 16
    draws = [t.sample_train(np.random.default_rng(3), 40) for t in (a, b)]
    assert draws[0] == draws[1]
    assert a.sample_train(np.random.default_rng(4), 40) != draws[0]
    other = gym_task("task.split_seed=1")
    assert other.eval_examples() != a.eval_examples()


@needs_gym
def test_train_prompts_never_meet_the_eval_set():
    # 1-digit sums of two terms: ~200 distinct questions, so many indices repeat a question; none may leak
    task = gym_task("task.params={min_terms=2, max_terms=2, min_digits=1, max_digits=1}", "task.eval_size=20")
    eval_prompts = {ex.prompt for ex in task.eval_examples()}
    train = task.sample_train(np.random.default_rng(0), 3000)
    assert len({ex.prompt for ex in train}) > 50
    assert not eval_prompts & {ex.prompt for ex in train}


@needs_gym
def test_reward_is_the_datasets_score_answer():
    import reasoning_gym
    from reasoning_gym.utils import extract_answer

    task = gym_task()
    examples = task.sample_train(np.random.default_rng(0), 6)
    oracle = reasoning_gym.create_dataset("chain_sum", min_terms=2, max_terms=2, min_digits=1, max_digits=2)
    responses = [examples[0].answer, f"<answer>{examples[1].answer}</answer>", "no number", "",
                 f"+0{examples[4].answer}.00", f"think <answer>{int(examples[5].answer) + 1}</answer>"]
    expected = []
    for response, ex in zip(responses, examples):
        tagged = extract_answer(response)
        expected.append(oracle.score_answer(tagged if tagged is not None else response.strip(), ex.entry))
    assert task.score(responses, examples) == expected
    assert expected[:2] == [1.0, 1.0] and expected[2] == expected[5] == 0.0
    assert task.accuracy(responses, examples) == [float(s >= 1.0) for s in expected]


@needs_gym
def test_partial_credit_scores_count_in_the_reward_not_in_accuracy():
    task = gym_task("task.dataset=countdown", "task.params={min_numbers=3, max_numbers=3}", "task.eval_size=2")
    ex = task.eval_examples()[0]
    assert task.score(["1+1"], [ex]) == [pytest.approx(0.05)]  # the scorer's own partial credit: wrong numbers
    assert task.accuracy(["1+1"], [ex]) == [0.0] and task.accuracy([ex.answer], [ex]) == [1.0]


@needs_gym
def test_an_answer_that_is_not_arithmetic_never_reaches_an_evaluating_scorer(tmp_path):
    task = gym_task("task.dataset=countdown", "task.params={min_numbers=3, max_numbers=3}", "task.eval_size=2")
    ex = task.eval_examples()[0]
    marker = tmp_path / "ran"
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    scores = task.score([payload, f"<answer>{payload}</answer>", ""], [ex] * 3)
    assert not marker.exists()  # sympy's parse_expr would have run it
    assert scores[0] == scores[1] == scores[2]  # scored as no answer
    assert task.score([ex.answer], [ex]) == [1.0]  # a plain expression still reaches the scorer


@needs_gym
@pytest.mark.parametrize("override, field, says", [
    ("task.dataset=chain_sun", "task.dataset", "did you mean 'chain_sum'"),
    ("task.params={min_term=2}", "task.params.min_term", "did you mean 'min_terms'"),
    ("task.params={min_terms=0}", "task.params", "min_terms must be positive"),
    ("task.params={seed=3}", "task.params.seed", "task.split_seed"),
    ("task.reward=exact_match", "task.reward", "score_answer"),
    ("task.template=Q:", "task.template", "{question}"),
])
def test_bad_inputs_name_the_field(override, field, says):
    with pytest.raises(UserError) as info:
        gym_task(override)
    assert info.value.field == field and says in str(info.value)


@needs_gym
def test_template_and_run_json_task_name():
    from batchscale.config import derive_plan, run_descriptor

    task = gym_task("task.template=Q: {question}\nA:")
    assert all(ex.prompt.startswith("Q: ") and ex.prompt.endswith("\nA:") for ex in task.eval_examples())
    cfg = load_config(None, SMALL_SUMS)
    assert run_descriptor(cfg, derive_plan(cfg)).task == "reasoning_gym:chain_sum"  # runs of two datasets are two tasks to analyze


@needs_gym
def test_an_answer_format_extracts_before_the_datasets_own_scorer():
    default, sentence = gym_task(), gym_task("task.answer_format=last_number")
    ex = default.eval_examples()[:1]
    said = f"Adding the terms gives {int(ex[0].answer):,}."
    assert default.accuracy([said], ex) == [0.0]  # the whole response is no number for score_answer
    assert sentence.accuracy([said], ex) == [1.0] and sentence.accuracy(["no idea"], ex) == [0.0]
    tagged = gym_task("task.answer_format=answer_tag")
    assert tagged.accuracy([f"<answer>{ex[0].answer}</answer>", ex[0].answer], ex * 2) == [1.0, 0.0]  # tags required
    with pytest.raises(UserError, match="'last_number' reads a number, but reasoning-gym's 'number_sorting'") as info:
        build_task(load_config(None, ["task.name=reasoning_gym", "task.dataset=number_sorting", "task.eval_size=2",
                                      "task.answer_format=last_number"]).task)
    assert info.value.field == "task.answer_format"
