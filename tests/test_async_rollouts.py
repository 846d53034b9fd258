"""Asynchronous streaming rollouts (issue 17): config rules, k = 0 equals sync, the stream's accounting, staleness and
token versions, the truncated importance weight, and SIGKILL of either process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_faults import kill_session, session_processes, wait_for
from test_trainer import read_records, small_config

from batchscale.algorithms.offpolicy import truncated_is_weights
from batchscale.config import load_config
from batchscale.errors import UserError
from batchscale.policy.forward import token_logprobs
from batchscale.policy.sequences import collate
from batchscale.train.async_generator import FinishedGroup, admission_limit
from batchscale.train.async_rollouts import AsyncRollouts
from batchscale.train.loop import train
from batchscale.train.rollout_source import open_rollout_source
from batchscale.train.state import build_training_state

ASYNC = "rollout.mode='async'"


def without_times(record: dict) -> dict:
    """A record less what differs between modes by design: times, the async/* keys and the decode concurrency."""
    return {key: value for key, value in record.items()
            if not key.startswith(("time/", "async/")) and key not in ("wall_s", "rollout/active_mean")}


@pytest.mark.parametrize("overrides, field", [
    ([ASYNC, "rollout.backend='hf'"], "rollout.mode"),
    ([ASYNC, "rollout.max_staleness=-1"], "rollout.max_staleness"),
    ([ASYNC, "rollout.generation_batch=100"], "rollout.generation_batch"),  # P*G = 128
    (["algorithm.is_cap=0"], "algorithm.is_cap"),
])
def test_bad_async_combinations_are_rejected_before_compute(overrides, field):
    with pytest.raises(UserError) as error:
        load_config(None, overrides)
    assert str(error.value).startswith(f"{field}:") and "Fix:" in str(error.value)


def test_sync_is_the_default_and_keeps_its_label():
    cfg = load_config(None, [])
    assert cfg.rollout.mode == "sync" and cfg.rollout.max_staleness == 1 and cfg.rollout.partial
    assert cfg.algorithm.is_cap == 2.0
    from batchscale.config import derive_plan
    assert derive_plan(cfg).label == "grpo-P16-G8-sqrt"
    assert derive_plan(load_config(None, [ASYNC, "rollout.max_staleness=2"])).label == "grpo-P16-G8-sqrt-async-k2"


def test_max_staleness_zero_reproduces_the_synchronous_records(random_model_dir, tmp_path):
    train(small_config(random_model_dir), tmp_path / "sync", log=lambda s: None)
    train(small_config(random_model_dir, ASYNC, "rollout.max_staleness=0"), tmp_path / "async", log=lambda s: None)
    sync, streamed = read_records(tmp_path / "sync"), read_records(tmp_path / "async")
    assert len(sync) == len(streamed) == 8
    assert [without_times(r) for r in streamed] == [without_times(r) for r in sync]
    steps = [r for r in streamed if r["kind"] == "step"]
    assert all(r["async/staleness_max"] == 0 and r["async/partial_frac"] == 0 and r["async/dropped_groups"] == 0
               and r["async/is_weight_mean"] == pytest.approx(1.0) for r in steps)
    for key in ("time/wait_for_samples", "time/generator_idle", "time/generate", "time/sync_weights",
                "async/buffer_size", "async/staleness_mean", "rollout/active_mean"):
        assert key in steps[0]
    assert all(r["time/sync_weights"] > 0 and r["time/train"] + r["time/sync_weights"] <= r["time/step"] for r in steps)
    assert not any("time/sync_weights" in r for r in sync)  # the synchronous engine reads the model's own weights
    run = json.loads((tmp_path / "async" / "run.json").read_text())
    assert (run["rollout_mode"], run["generation_batch"], run["max_staleness"]) == ("async", 12, 0)
    assert run["label"] == "grpo-P4-G3-sqrt-async-k0"
    assert (tmp_path / "async" / "summary.json").is_file()


@pytest.mark.parametrize("algorithm", ["ppo", "remax"])
def test_every_algorithm_trains_asynchronously(random_model_dir, tmp_path, algorithm):
    """The critic and the greedy baseline run on the trainer's side, on the policy being updated."""
    cfg = small_config(random_model_dir, ASYNC, f"algorithm.name='{algorithm}'", "rollout.generation_batch=24")
    train(cfg, tmp_path / "run", log=lambda s: None)
    steps = [r for r in read_records(tmp_path / "run") if r["kind"] == "step"]
    assert [r["samples"] for r in steps] == [12 * i for i in range(1, 6)]
    assert all(r["async/staleness_max"] <= 1 for r in steps) and (tmp_path / "run" / "summary.json").is_file()


def test_importance_weights_are_one_when_behaviour_and_current_policy_agree():
    logp = torch.randn(3, 5)  # (N, T)
    off_policy_tokens = torch.zeros(3, 5, dtype=torch.bool)
    assert torch.equal(truncated_is_weights(logp, logp.clone(), off_policy_tokens, 2.0), torch.ones(3, 5))
    on_policy = torch.ones(3, 5, dtype=torch.bool)  # sampled by the weights being updated: 1 whatever the rounding
    assert torch.equal(truncated_is_weights(logp, logp + 1e-3, on_policy, 2.0), torch.ones(3, 5))
    weights = truncated_is_weights(logp, logp + torch.tensor([5.0, -0.5, -5.0])[:, None], off_policy_tokens, 2.0)
    assert torch.allclose(weights[0], torch.full((5,), torch.exp(torch.tensor(-5.0)).item()))
    assert torch.allclose(weights[1], torch.full((5,), torch.exp(torch.tensor(0.5)).item()))
    assert torch.equal(weights[2], torch.full((5,), 2.0))  # truncated at the cap


def test_the_stream_never_splits_groups_never_reuses_samples_bounds_staleness_and_versions_tokens(random_model_dir):
    k, P, G = 2, 4, 3
    cfg = small_config(random_model_dir, ASYNC, f"rollout.max_staleness={k}", "rollout.generation_batch=36",
                       "sampling.max_new_tokens=48", "rollout.max_concurrency=8")
    state = build_training_state(cfg, log=lambda s: None)
    model, tok = state.policy.model, state.policy.tokenizer
    snapshots = {0: {name: p.detach().clone() for name, p in model.named_parameters()}}
    consumed, responses = [], []
    generator = torch.Generator().manual_seed(1)
    try:
        with open_rollout_source(state) as source:
            assert isinstance(source, AsyncRollouts)
            for step in range(1, 9):
                collected = source.take(step)
                rollouts, version = collected.rollouts, collected.version
                assert version == step - 1 and len(collected.examples) == P and len(rollouts.response_ids) == P * G
                assert collected.record["async/staleness_max"] <= k
                for i, example in enumerate(collected.examples):  # each group's G responses, together, for its prompt
                    prompt_ids = tok(state.policy.format_prompts([example.prompt]))["input_ids"][0]
                    assert all(rollouts.prompt_ids[i * G + j] == prompt_ids for j in range(G))
                for row, versions in enumerate(collected.versions):
                    assert versions == sorted(versions) and version - k <= versions[0] and versions[-1] <= version
                    responses.append((rollouts.prompt_ids[row], rollouts.response_ids[row], rollouts.logprobs[row],
                                      versions))
                consumed += collected.group_ids
                with torch.no_grad():  # at once, mid-decode: a new version, different enough to tell versions apart
                    for p in model.parameters():
                        p.add_(0.05 * torch.randn(p.shape, generator=generator))
                snapshots[step] = {name: p.detach().clone() for name, p in model.named_parameters()}
                source.publish(model)
            assert all(type(g) is FinishedGroup for g in source.buffer)  # typed across the process boundary
            buffered = [g.group_id for g in source.buffer]
            dropped = source.dropped_ids
    finally:
        state.task.close()
    assert len(consumed) == len(set(consumed)) == 8 * P  # N advanced by P*G per update, no sample twice
    assert not set(consumed) & set(dropped) and not set(consumed) & set(buffered)
    unaccounted = set(range(max(consumed) + 1)) - set(consumed) - set(dropped) - set(buffered)
    assert len(unaccounted) <= (k + 1) * P  # at most the live groups (still decoding) are neither taken nor dropped
    partial = [r for r in responses if len(set(r[3])) > 1]
    assert partial, "no response crossed a weight update: the test did not exercise partial rollouts"
    for prompt_ids, response_ids, logprobs, versions in partial[:6] + responses[:3]:
        for version in set(versions):  # each token's log-prob is that of the weights version it carries
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.copy_(snapshots[version][name])
                batch = collate([prompt_ids], [response_ids], tok.pad_token_id)
                logp = token_logprobs(model, batch)[0, len(prompt_ids) - 1:]  # (R,)
            for j, token_version in enumerate(versions):
                if token_version == version:
                    assert logp[j].item() == pytest.approx(logprobs[j], abs=1e-4)


def async_cli(model_dir, out: Path) -> list[str]:
    sets = ["model.name='%s'" % model_dir, "batch.prompts_per_step=4", "batch.samples_per_prompt=3",
            "batch.micro_batch_size=4", "run.budget_samples=100000", "run.eval_every_samples=100000",
            "task.eval_size=8", "sampling.max_new_tokens=4", "run.threads=1", ASYNC]
    return [sys.executable, "-m", "batchscale.cli", "train", "--out", str(out), *[a for s in sets for a in ("--set", s)]]


def metric_lines(out: Path) -> list[str]:
    path = out / "metrics.jsonl"
    return path.read_text().splitlines() if path.is_file() else []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to list a session's processes")
@pytest.mark.parametrize("victim", ["trainer", "generator"])
def test_sigkill_of_either_process_ends_the_run_unfinished_with_whole_lines_and_no_orphan(random_model_dir, tmp_path,
                                                                                            victim):
    out = tmp_path / "run"
    trainer = subprocess.Popen(async_cli(random_model_dir, out), cwd=tmp_path, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(metric_lines(out)) >= 4, what="the asynchronous run to log steps")
        processes = session_processes(trainer.pid)
        generators = [pid for pid in processes if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(generators) == 1, processes  # the generator (beside it: multiprocessing's resource tracker)
        os.kill(trainer.pid if victim == "trainer" else generators[0], signal.SIGKILL)
        trainer.wait(timeout=60)
        wait_for(lambda: not session_processes(trainer.pid), timeout_s=30, what="every process of the run to end")
    finally:
        kill_session(trainer.pid)
    if victim == "generator":
        assert trainer.returncode == 2
        stderr = trainer.stderr.read()
        assert "the generator process died" in stderr and "Traceback" not in stderr
    else:
        assert trainer.returncode == -signal.SIGKILL
    assert all(json.loads(line)["kind"] in ("step", "eval") for line in metric_lines(out))  # whole lines only
    assert not (out / "summary.json").exists()


def test_the_admission_bound_is_the_one_both_processes_use():
    """The generator starts at most admission_limit(v) groups (dropped ones not counted) while v is the newest
    version, and the trainer samples prompts ahead for exactly as many: one bound, written once."""
    import queue
    from types import SimpleNamespace

    from batchscale.config import derive_plan
    from batchscale.train.async_generator import GeneratorSettings, _Streamer

    P, G, k = 4, 2, 1
    assert [admission_limit(v, k, P) for v in range(3)] == [8, 12, 16]  # (v + k + 1) * P

    class Schedule:  # the streaming schedule's bookkeeping, without a model
        in_flight = 0

        def extend(self, rows):
            self.in_flight += len(rows)
            return list(range(self.in_flight - len(rows), self.in_flight))

    settings = GeneratorSettings(P, G, 1000, 8, k, True, 1, "auto", 1.0, 1.0, 4)
    prompts = queue.Queue()
    for group in range(40):
        prompts.put((group, [[1]] * G))
    streamer = _Streamer(settings, Schedule(), finished=None)
    streamer.admit(prompts, version=0, dropped_groups=0)
    assert streamer.started == admission_limit(0, k, P)
    streamer.admit(prompts, version=0, dropped_groups=0)
    assert streamer.started == admission_limit(0, k, P)  # nothing more under the same version
    streamer.admit(prompts, version=1, dropped_groups=P)
    assert streamer.started == admission_limit(1, k, P) + P  # dropped groups free their places

    cfg = load_config(None, [ASYNC, f"rollout.max_staleness={k}", f"batch.prompts_per_step={P}",
                             f"batch.samples_per_prompt={G}", "batch.micro_batch_size=8"])
    examples = SimpleNamespace(prompt="1+1=")
    task = SimpleNamespace(sample_train=lambda rng, count: [examples] * count)
    policy = SimpleNamespace(format_prompts=lambda texts: texts,
                             tokenizer=lambda texts: {"input_ids": [[1, 2]] * len(texts)})
    source = AsyncRollouts(cfg, derive_plan(cfg), policy, task, rng=None, timer=None)
    source.prompts = queue.Queue()
    source.counters = SimpleNamespace(dropped_groups=SimpleNamespace(value=P))
    source.supply_prompts(version=1)  # P prompts at a time, as the synchronous loop samples them
    assert source.groups_sampled == admission_limit(1, k, P) + P == streamer.started
