"""The built-in tiny model's warm start stops on its measured criterion (greedy eval accuracy in a band), whatever
CPU it runs on, and concurrent first uses build a cached model once."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from batchscale.errors import UserError
from batchscale.files import build_once
from batchscale.policy import tiny


def scripted_warm_start(monkeypatch, accuracies: list[float], **recipe) -> dict:
    """Run warm_start on the real tiny model with the accuracy check replaced by a script; return the outcome (or
    raise)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from batchscale.policy.tokenizer import build_char_tokenizer
    from batchscale.tasks.arithmetic import ArithmeticTask

    script = iter(accuracies)
    monkeypatch.setattr(tiny, "greedy_accuracy", lambda *args: next(script))
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, intermediate_size=64, pad_token_id=0, bos_token_id=1,
                                         eos_token_id=2))  # the script decides; the model only has to train
    recipe = {**tiny.WARM_START, "batch": 4, "check_every": 3, "learned_accuracy": 0.6, "accuracy_band": (0.25, 0.35),
              **recipe}
    return tiny.warm_start(model, tokenizer, ArithmeticTask(eval_size=8), recipe)


def test_learns_until_the_accuracy_is_reached_then_slips_into_the_band_checking_every_step(monkeypatch):
    outcome = scripted_warm_start(monkeypatch, [0.1, 0.4, 0.65, 0.5, 0.4, 0.3, 0.0])
    assert [step for step, _ in outcome["checks"]] == [3, 6, 9, 10, 11, 12]  # every 3rd step, then every step
    assert outcome["learned_at"] == 9 and outcome["steps"] == 12 and outcome["accuracy"] == 0.3


def test_a_slip_step_that_jumps_below_the_band_fails_instead_of_caching_a_wrong_start(monkeypatch):
    with pytest.raises(UserError, match=r"did not stop with greedy accuracy in \[0.25, 0.35\].*0.700@3, 0.100@4"):
        scripted_warm_start(monkeypatch, [0.7, 0.1])


def test_a_task_it_cannot_learn_in_time_fails_naming_the_accuracies_seen(monkeypatch):
    with pytest.raises(UserError, match=r"did not reach greedy accuracy 0.6 in 7 steps.*0.010@3, 0.020@6"):
        scripted_warm_start(monkeypatch, [0.01, 0.02, 0.03], max_steps=7)


def test_a_task_without_sums_is_refused_before_any_step(monkeypatch):
    import torch

    from batchscale.tasks.arithmetic import ArithmeticTask

    monkeypatch.setattr(tiny, "supervised_step", lambda *args: pytest.fail("refused before any step"))
    with pytest.raises(UserError, match=r"task.operations: .*needs '\+'.*got '-\*'"):
        tiny.warm_start(torch.nn.Linear(1, 1), None, ArithmeticTask(operations="-*", eval_size=8))


def test_the_slipping_teacher_drops_carries_of_sums_only():
    import numpy as np

    from batchscale.tasks.arithmetic import carry_dropped

    assert carry_dropped(57, "+", 68) == 15 and carry_dropped(12, "+", 34) == 46 and carry_dropped(99, "+", 1) == 90
    assert carry_dropped(57, "-", 8) is None
    rng = np.random.default_rng(0)
    problems = [(57, "+", 68)] * 2000 + [(9, "*", 9)]
    answers = tiny.teacher_answers(problems, rng, carry_drop=0.7)
    assert abs(answers.count("15") / 2000 - 0.7) < 0.03 and set(answers[:2000]) == {"15", "125"}
    assert answers[-1] == "81"
    assert tiny.teacher_answers(problems[:50], rng, carry_drop=0.0) == ["125"] * 50


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("BATCHSCALE_TEST_REBUILD") != "1",
                    reason="the warm start from the recipe (~2.5 min on 2 cores, ~6 on AVX2 only): "
                           "BATCHSCALE_TEST_REBUILD=1 runs it; tests/test_tiny_shipped.py checks the shipped copy")
def test_the_built_in_default_starts_inside_the_band(tmp_path, monkeypatch):
    """The real build from the recipe (BATCHSCALE_TINY_BUILD=1, in an empty cache: ~2.5 minutes on 2 cores), not the
    copy shipped with the package: its recorded accuracy lies in the band, and the saved weights reproduce it when
    loaded back, as `batchscale train` would load them."""
    from batchscale.config import TaskConfig
    from batchscale.tasks.arithmetic import ArithmeticTask

    monkeypatch.setenv("BATCHSCALE_CACHE", str(tmp_path))
    monkeypatch.setenv("BATCHSCALE_TINY_BUILD", "1")
    path = tiny.build_tiny(TaskConfig(), log=lambda s: None)
    assert not (path / "SHIPPED.json").exists()  # built here, not installed from the package
    record = tiny.read_warm_start(path)
    low, high = tiny.WARM_START["accuracy_band"]
    assert low <= record["accuracy"] <= high
    assert record["learned_at"] < record["steps"] <= record["learned_at"] + tiny.WARM_START["max_slip_steps"]
    assert max(acc for _, acc in record["checks"]) >= tiny.WARM_START["learned_accuracy"]
    model, tokenizer = tiny.load_pretrained_dir(path)
    assert tiny.greedy_accuracy(model, tokenizer, ArithmeticTask(), 6) == pytest.approx(record["accuracy"], abs=0.02)


def _build_counting(target: str, counter: str, barrier) -> None:
    def build(staging: Path) -> None:
        with open(counter, "a") as f:
            f.write("built\n")
        import time

        time.sleep(0.3)  # long enough that the other process arrives while this one builds
        (staging / "config.json").write_text("{}")

    barrier.wait()
    build_once(Path(target), build, log=lambda s: None, what="test build")


def test_concurrent_first_uses_build_once(tmp_path):
    target, counter = tmp_path / "models" / "m", tmp_path / "count.txt"
    ctx = multiprocessing.get_context("fork")  # the child only touches files
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=_build_counting, args=(str(target), str(counter), barrier)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert counter.read_text().count("built") == 1
    assert (target / "config.json").is_file()
    assert not [p.name for p in target.parent.iterdir() if p.name.startswith(".m.building")]  # no staging left


def test_a_failed_build_leaves_nothing_that_looks_built(tmp_path):
    target = tmp_path / "models" / "m"

    def build(staging: Path) -> None:
        (staging / "config.json").write_text("{}")
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError):
        build_once(target, build, log=lambda s: None, what="test build")
    assert not target.exists()
    assert [p.name for p in target.parent.iterdir()] == [".m.lock"]
