"""Answer extraction (tasks.answers) and the rewards built on it (tasks.rewards): every format on hand-written
answers, on real SmolLM2-135M-Instruct outputs (tests/answers/smollm2_outputs.json, each labelled by hand with the
answer a reader sees in it), and on hostile text that must neither hang nor blow up."""

from __future__ import annotations

import json
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import get_args

import pytest

from batchscale.config import TaskConfig
from batchscale.errors import UserError
from batchscale.tasks.answers import (ANSWER_FORMATS, answers_match, canonical_number, extract_answer, normalize_answer,
                                      reference_answer)
from batchscale.tasks.rewards import REWARDS, AnswerReward, digit_match, integer_match, resolve_reward

OUTPUTS = Path(__file__).parent / "answers" / "smollm2_outputs.json"


@contextmanager
def no_hang(seconds: int = 20):
    """Fail (not hang) if the block runs past `seconds`: a guard against quadratic scans, not a timing claim."""
    def stop(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_the_config_names_exactly_the_extractors():
    literal = TaskConfig.model_fields["answer_format"].annotation
    assert set(get_args(get_args(literal)[0])) == set(ANSWER_FORMATS)


@pytest.mark.parametrize("text, expected", [
    ("12 + 35 = 47", "47"),
    ("The final answer is 6.", "6"),  # a trailing period ends the sentence
    ("It costs $1,234 in total.", "1,234"),
    ("1,234,567 and then 2.50.", "2.50"),
    ("The temperature fell to -3", "-3"),
    ("12-3", "3"),  # a minus after a digit is subtraction, not a sign
    ("x-3", "3"),
    ("list: 1,2,3", "3"),  # commas not in groups of three separate numbers
    ("1,2345", "2345"),
    ("+7 points", "+7"),
    ("abc123", None),  # digits glued to a word are not a number
    ("no number here", None),
    ("", None),
])
def test_last_number(text, expected):
    assert extract_answer(text, "last_number") == expected


@pytest.mark.parametrize("text, fmt, expected", [
    ("Natalia sold 48/2 = 24 clips in May. #### 72", "hash", "72"),
    ("#### $1,080", "hash", "1,080"),
    ("#### -5.5 and later #### 7", "hash", "-5.5"),  # the first, as verl's strict extraction
    ("####, so #### 9", "hash", "9"),  # a #### followed by no number is skipped
    ("no marker 5", "hash", None),
    ("so \\boxed{\\frac{1}{2}}.", "boxed", "\\frac{1}{2}"),
    ("first \\boxed{3} then \\boxed{ 4 }", "boxed", "4"),  # the last
    ("\\boxed{\\text{\\{a\\}}}", "boxed", "\\text{\\{a\\}}"),  # nested braces balanced
    ("\\boxed 5$", "boxed", "5"),
    ("\\boxed{5", "boxed", None),  # unbalanced: no answer
    ("\\boxed{}", "boxed", ""),
    ("<answer>3</answer> no, <answer> 4 </answer>", "answer_tag", "4"),
    ("<answer>4", "answer_tag", None),
    ("4</answer>", "answer_tag", None),
    ("  8  ", "text", "8"),
    ("082 apples", "strict", "082"),
    ("-3+4", "strict", "-3"),
])
def test_marked_formats(text, fmt, expected):
    assert extract_answer(text, fmt) == expected


@pytest.mark.parametrize("a, b", [
    ("1,234", "1234"), ("2.50", "2.5"), ("-0", "0"), ("+7", "7"), ("007", "7"), ("$12", "12"), ("\\$12", "12"),
    ("72.", "72"), ("50\\%", "50"), ("\\frac{1}{2}", "0.5"), ("\\dfrac{6}{8}", "3/4"), ("-\\frac{3}{4}", "-0.75"),
    ("\\frac12", "1/2"), ("\\frac{2}{6}", "1/3"), ("x = 5", "5"), ("\\text{12}", "12"), ("\\left( 1, 2 \\right)", "(1,2)"),
    (".5", "0.5"),
])
def test_equal_answers_normalize_alike(a, b):
    assert normalize_answer(a) == normalize_answer(b)


@pytest.mark.parametrize("a, b", [("2.5", "25"), ("1/3", "0.333"), ("12", "-12"), ("1,234", "1.234"), ("x", "X")])
def test_different_answers_stay_different(a, b):
    assert normalize_answer(a) != normalize_answer(b)


def test_canonical_numbers():
    assert canonical_number("1,234.500") == "1234.5" and canonical_number("-000.0") == "0"
    assert canonical_number("12a") is None and canonical_number("") is None and canonical_number("-") is None


def test_a_reference_written_as_a_solution_is_read_as_its_final_answer():
    assert reference_answer("She has 3 + 4 = 7 apples.\n#### 7") == "7"
    assert reference_answer("So the area is $\\boxed{\\frac{1}{2}}$.") == "\\frac{1}{2}"
    assert reference_answer("42") == "42"
    assert answers_match("0.5", "So the area is $\\boxed{\\frac{1}{2}}$.", "last_number")


def test_strict_compares_as_written_and_the_others_by_value():
    assert answers_match("2.5", "2.5", "strict") and not answers_match("082", "82", "strict")
    assert answers_match(extract_answer("It is 2.50.", "last_number"), "2.5", "last_number")
    assert answers_match(extract_answer("about $1,234", "last_number"), "1234", "last_number")
    assert not answers_match(None, "1", "last_number")
    assert answers_match(extract_answer(" 8 ", "text"), "8", "text") and not answers_match("8.", "8", "text")


def test_the_old_reward_names_keep_their_behaviour():
    assert integer_match("The answer is 82.", "82") == 1.0 and integer_match("820", "82") == 0.0
    assert REWARDS["last_integer_match"]("12 + 35 = 47", "47") == 1.0
    assert REWARDS["last_integer_match"]("2.5", "5") == 0.0  # a decimal is read whole now (was: its last digits)
    assert REWARDS["exact_match"](" 82 ", "82") == 1.0 and REWARDS["exact_match"]("82.", "82") == 0.0
    assert digit_match("92", "82") == 0.5 and digit_match("182", "82") == pytest.approx(2 / 3)
    assert REWARDS["prefix_match"]("82 apples", "82") == 1.0


def test_rewards_read_the_answer_format():
    boxed = resolve_reward("answer_match", answer_format="boxed")
    assert boxed("so \\boxed{1,000}", "1000") == 1.0 and boxed("1000", "1000") == 0.0
    digits = resolve_reward("digit_match", answer_format="last_number")
    assert digits("Step 1: 5. Answer: 92", "82") == 0.5
    assert digits("Answer: 2.5", "2.5") == 1.0 and digits("Answer: 2.4", "2.5") == 0.0  # not an integer: exact
    assert resolve_reward("digit_match") is digit_match  # the built-in model's format: the same function as before
    with pytest.raises(UserError, match="integer_match reads answers in the format 'strict'"):
        resolve_reward("integer_match", answer_format="boxed")
    assert isinstance(resolve_reward("last_integer_match", answer_format="last_number"), AnswerReward)


def test_the_built_in_task_is_unchanged():
    from batchscale.tasks.arithmetic import ArithmeticTask

    task = ArithmeticTask(digits=2, eval_size=4)
    assert task.answer_format == "strict" and task.accuracy_fn == REWARDS["answer_match"]
    assert task.reward_fn is digit_match
    ex = task.eval_examples()[:1]
    assert task.accuracy([f"{ex[0].answer} 3+4="], ex) == [1.0] and task.accuracy([f"0{ex[0].answer}"], ex) == [0.0]
    sentence = ArithmeticTask(digits=2, eval_size=4, reward="last_integer_match")
    assert sentence.answer_format == "last_number"  # the reward's format is eval accuracy's too
    assert sentence.accuracy([f"3 + 4 is not it; it is {ex[0].answer}."], ex) == [1.0]


# ---- hostile text ----

HUGE = "9" * 5000 + "1"  # 10**5000-ish digits: past Python's int() limit of 4300


@pytest.mark.parametrize("fmt", ANSWER_FORMATS)
def test_huge_numbers_neither_hang_nor_raise(fmt):
    texts = [HUGE, f"#### {HUGE}", f"\\boxed{{{HUGE}}}", f"<answer>{HUGE}</answer>", f"{HUGE}/{HUGE}",
             f"\\boxed{{\\frac{{{HUGE}}}{{{HUGE}}}}}", ",".join(["123"] * 20000), "1" * 10**6]
    with no_hang():
        for text in texts:
            found = extract_answer(text, fmt)
            assert found is None or isinstance(found, str)
            answers_match(found, HUGE, fmt)
            answers_match(found, text, fmt)
            REWARDS["digit_match"](text, HUGE)
            resolve_reward("digit_match", answer_format=fmt)(text, HUGE)
    assert answers_match(extract_answer(f"so {HUGE}.", "last_number"), HUGE, "last_number")
    assert normalize_answer(f"{HUGE}/{HUGE}") == f"{HUGE}/{HUGE}"  # too long to evaluate: compared as text


N = 50_000  # a quadratic scan of this many openings would take minutes
PATHOLOGICAL = ["<answer>" * N, "</answer>" * N, "\\boxed{" * N, "{" * N + "}" * (N - 1), "#### " * N, "####" * N,
                "1 " * N, "-" * N + "1", "1," * N, "1." * N, "\\text{" * N + "}" * N, "$" * N, "\x00\x1b[2J\u202e" * N,
                "\\frac{" * N]


@pytest.mark.parametrize("text", PATHOLOGICAL, ids=range(len(PATHOLOGICAL)))
def test_pathological_repetition_stays_linear(text):
    with no_hang():
        for fmt in ANSWER_FORMATS:
            answers_match(extract_answer(text, fmt), "1", fmt)
        normalize_answer(text)
        reference_answer(text)


def test_many_numbers_give_the_last_and_control_characters_are_text():
    many = " ".join(str(i) for i in range(100_000))
    with no_hang():
        assert extract_answer(many, "last_number") == "99999"
    assert extract_answer("\x1b[31m42\x1b[0m\x00", "last_number") == "0"  # ESC[0m: the escape's own 0 is last
    assert extract_answer("answer:\x0742\x07", "last_number") == "42"
    assert not answers_match("4\u200b2", "42", "answer_tag")  # a zero-width space is not removed


# ---- real SmolLM2-135M-Instruct outputs ----

def real_outputs() -> list[dict]:
    return json.loads(OUTPUTS.read_text())["outputs"]


def test_the_fixture_is_real_model_output_of_every_format():
    data = json.loads(OUTPUTS.read_text())
    assert data["model"] == "SmolLM2-135M-Instruct" and "probe_task.py" in data["generated_by"]
    outputs = real_outputs()
    assert len(outputs) >= 12 and {o["kind"] for o in outputs} == {"greedy", "sampled"}
    asked = " ".join(o["prompt"] for o in outputs)
    assert "####" in asked and "\\boxed" in asked and "<answer>" in asked


@pytest.mark.parametrize("index", range(len(json.loads(OUTPUTS.read_text())["outputs"])))
def test_real_outputs_give_the_answer_a_reader_sees(index):
    output = real_outputs()[index]
    for fmt, expected in output["expected"].items():
        assert extract_answer(output["text"], fmt) == expected, (fmt, output["text"])
    for fmt, correct in output.get("correct", {}).items():
        assert answers_match(extract_answer(output["text"], fmt), output["answer"], fmt) is correct, fmt
