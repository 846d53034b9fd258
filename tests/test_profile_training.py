"""`batchscale profile training` on a tiny random model: the JSON schema, the cost law, utilization, bad input -> 2."""

from __future__ import annotations

import json

import pytest

from batchscale import cli
from batchscale.policy.tokenizer import build_char_tokenizer
from batchscale.profile import cli as profile_cli
from batchscale.profile import training as profile_training


pytestmark = pytest.mark.usefixtures("one_torch_thread")
HEAD_PARAMS = len(build_char_tokenizer()) * 64  # the random model's tied head: vocabulary x hidden


def run_profile(capsys, model_dir, *args) -> dict:
    assert cli.main(["profile", "training", "--model", str(model_dir), "--threads", "1", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_on_a_tiny_run(capsys, random_model_dir):
    result = run_profile(capsys, random_model_dir, "--batches", "8,32", "--repeats", "1", "--micro-batch-size", "4",
                         "--compute-dtype", "float32")
    assert {"model", "params", "dtype", "compute_dtype", "peak_flops_per_s", "rows", "fit"} <= set(result)
    assert result["dtype"] == result["compute_dtype"] == "float32" and result["micro_batch_size"] == 4
    assert result["params"] > 0
    assert set(result["peaks"]) == {"float32", "bfloat16"}
    fp32 = result["peaks"]["float32"]
    assert result["peak_flops_per_s"] == fp32["best"] == max(fp32["samples"]) >= fp32["median"] > 0
    assert [row["samples_per_update"] for row in result["rows"]] == [8, 32]
    for row in result["rows"]:
        assert row["seconds"] > 0 and row["tokens"] <= row["padded_tokens"]
        assert row["tokens_per_s"] == pytest.approx(row["tokens"] / row["seconds"])
        assert row["samples_per_s"] == pytest.approx(row["samples_per_update"] / row["seconds"])
        assert 0 < row["response_tokens"] < row["tokens"]
        # the 6 * N * D rule, the tied head counted on response tokens only
        flops = 6 * ((result["params"] - HEAD_PARAMS) * row["tokens"] + HEAD_PARAMS * row["response_tokens"])
        assert row["flops"] == pytest.approx(flops)
        assert row["utilization"] == pytest.approx(flops / row["seconds"] / result["peak_flops_per_s"])
        assert 0 < row["utilization"] <= 1.5
    assert set(result["fit"]) == {"seconds_fixed", "seconds_per_token", "r2", "tokens_per_s", "flops_per_s_asymptotic",
                                  "utilization_asymptotic"}


def test_each_timed_update_is_the_actor_update_a_run_takes(monkeypatch, random_model_dir):
    """The profile times `Actor.update` (chunks, their norms, clip and step), as a run's `time/train` does, on the plan
    of the profiled batch: B prompts of one response, micro-batches of --micro-batch-size."""
    from batchscale.train.actor import Actor

    seen, real_update = [], Actor.update

    def update(actor, batch, advantages, off_policy=None):
        seen.append((len(batch), actor.plan.samples_per_step, actor.plan.micro_batch_size))
        return real_update(actor, batch, advantages, off_policy)

    monkeypatch.setattr(Actor, "update", update)
    monkeypatch.setattr(profile_training, "measure_matmul_rates", lambda *_, **__: [1e9])
    profile_training.profile_training(str(random_model_dir), batches=[4, 8], micro_batch_size=2, repeats=2,
                                      compute_dtype="float32", log=lambda _: None)
    assert seen == [(4, 4, 2)] * 3 + [(8, 8, 2)] * 3  # a warm-up and two timed updates per batch


def test_time_grows_with_tokens(capsys, random_model_dir):
    """Per-level timings are too noisy on shared cores to demand monotone rows; the fitted slope must be positive.
    16 and 256 rows: at 16 and 64 the two updates (~15 and ~25 ms) were a stall apart, and the slope came out negative
    in 2 of ~6 full runs on a 2-core AMX machine; 16x the tokens is ~60 ms apart."""
    result = run_profile(capsys, random_model_dir, "--batches", "16,256", "--repeats", "3")
    tokens = [row["tokens"] for row in result["rows"]]
    assert tokens[1] > 3 * tokens[0]
    assert result["fit"]["seconds_per_token"] > 0


def test_batch_is_prompt_plus_answer_and_eos(random_model_dir):
    from batchscale.config import ModelConfig, TaskConfig
    from batchscale.policy.load import load_policy
    from batchscale.tasks.build import build_task

    task_cfg = TaskConfig()
    policy = load_policy(ModelConfig(name=str(random_model_dir)), task_cfg, log=lambda _: None)
    batch = profile_training.build_batch(policy, build_task(task_cfg), 6, seed=0, device="cpu")
    assert len(batch) == 6
    for ids, mask, response in zip(batch.input_ids, batch.attention_mask, batch.response_mask):
        text = policy.tokenizer.decode(ids[: int(mask.sum())], skip_special_tokens=False)
        assert text.startswith("<bos>") and text.endswith("<eos>") and "=" in text
        assert int(response.sum()) == len(text.split("=")[1]) - len("<eos>") + 1  # answer characters + <eos>
    # micro-batches of 1 compute exactly each sequence; one micro-batch of the whole batch runs as two length-sorted
    # halves (the gradient-noise estimate's two chunks), each trimmed to its own longest row
    assert profile_training.padded_tokens(batch, 1) == int(batch.attention_mask.sum())
    lengths = sorted(batch.attention_mask.sum(dim=1).tolist(), reverse=True)
    assert profile_training.padded_tokens(batch, 6) == 3 * lengths[0] + 3 * lengths[3] <= batch.input_ids.numel()


def test_realistic_lengths_are_random_tokens_of_exactly_those_lengths(capsys, random_model_dir):
    """--prompt-tokens / --response-tokens: every row computes B x (prompt + response) tokens, the LM head B x
    response, and no special token but the final <eos> appears inside a sequence."""
    result = run_profile(capsys, random_model_dir, "--batches", "2,4", "--repeats", "1", "--prompt-tokens", "12",
                         "--response-tokens", "20", "--compute-dtype", "float32")
    assert result["synthetic_lengths"] == {"prompt_tokens": 12, "response_tokens": 20}
    for row in result["rows"]:
        b = row["samples_per_update"]
        assert row["tokens"] == row["padded_tokens"] == b * 32 and row["response_tokens"] == b * 20
    from batchscale.config import ModelConfig, TaskConfig
    from batchscale.policy.load import load_policy
    from batchscale.tasks.build import build_task

    policy = load_policy(ModelConfig(name=str(random_model_dir)), TaskConfig(), log=lambda _: None)
    tok = policy.tokenizer
    batch = profile_training.build_batch(policy, build_task(TaskConfig()), 3, 0, "cpu", response_tokens=9)
    default = profile_training.build_batch(policy, build_task(TaskConfig()), 3, 0, "cpu")
    for ids, mask, response, task_row, task_response in zip(batch.input_ids, batch.attention_mask, batch.response_mask,
                                                            default.input_ids, default.response_mask):
        row = ids[: int(mask.sum())].tolist()
        assert int(response.sum()) == 9 and row[-1] == tok.eos_token_id
        assert not set(row[-9:-1]) & set(tok.all_special_ids)
        prompt_length = len(row) - 9  # the prompt is the task's, as in the default batch
        assert row[:prompt_length] == task_row[:prompt_length].tolist()


@pytest.mark.parametrize("args, message", [(["--response-tokens", "0"], "--response-tokens: must be >= 1"),
                                           (["--prompt-tokens", "40", "--response-tokens", "40"], "exceed the model's 64")])
def test_bad_lengths_exit_2_before_compute(capsys, monkeypatch, random_model_dir, args, message):
    monkeypatch.setattr(profile_training, "time_update", lambda *_, **__: pytest.fail("refused before compute"))
    assert cli.main(["profile", "training", "--model", str(random_model_dir), "--batches", "2", *args]) == 2
    assert message in capsys.readouterr().err


def test_update_flops_count_each_matrix_where_it_runs():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    for tied in (True, False):
        model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32, tie_word_embeddings=tied))
        params = sum(p.numel() for p in model.parameters())
        body = params - 50 * 16 * (1 if tied else 2)  # the embedding is a lookup; the head runs on response tokens
        assert profile_training.update_flops(model, 100, 30) == 6 * (body * 100 + 50 * 16 * 30)


def test_bf16_arithmetic_is_measured_against_the_bf16_peak(capsys, random_model_dir):
    result = run_profile(capsys, random_model_dir, "--batches", "4", "--repeats", "1", "--compute-dtype", "bfloat16")
    assert result["dtype"] == "float32" and result["compute_dtype"] == "bfloat16"
    assert result["peak_flops_per_s"] == result["peaks"]["bfloat16"]["best"]


def test_matmul_rates_are_positive():
    rates = profile_training.measure_matmul_rates("float32", 64, 32, 48, repeats=3, min_time_s=0.001)
    assert len(rates) == 3 and min(rates) > 0


@pytest.mark.parametrize("args", [["--batches", "0,8"], ["--batches", "8,x"], ["--model", "/no/such/dir"],
                                  ["--micro-batch-size", "3"], ["--micro-batch-size", "0"], ["--repeats", "0"],
                                  ["--dtype", "float16"], ["--threads", "0"], ["--device", "tpu"],
                                  ["--compute-dtype", "float16"], ["--dtype", "bfloat16", "--compute-dtype", "float32"]])
def test_bad_input_exits_2_before_compute(capsys, monkeypatch, args):
    def no_compute(*_, **__):
        raise AssertionError("bad input must fail before any measurement")

    monkeypatch.setattr(profile_training, "measure_matmul_rates", no_compute)
    monkeypatch.setattr(profile_training, "time_update", no_compute)
    assert cli.main(["profile", "training", "--batches", "8,16", *args]) == 2
    assert "error" in capsys.readouterr().err.lower()


def test_noisy_negative_slope_keeps_json_strict(monkeypatch, random_model_dir):
    times = iter([0.3, 0.1])  # the larger batch measured faster: the fitted slope is negative
    monkeypatch.setattr(profile_training, "time_update", lambda *_, **__: [next(times)])
    result = profile_training.profile_training(str(random_model_dir), batches=[4, 16], repeats=1, log=lambda _: None)
    assert result.fit.seconds_per_token < 0 and result.fit.tokens_per_s is None
    document = result.to_json()
    json.loads(json.dumps(document), parse_constant=lambda name: pytest.fail(f"non-strict JSON constant {name}"))
    profile_cli.print_training_table(document)
