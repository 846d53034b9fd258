"""The one token-count check, for every shape of a verl log: P x G from `perf/total_num_tokens` (or from
`global_seqlen/mean` and the data-parallel ranks) against the flags and the config, and per-step counts where the
batch varies (dynamic sampling).

verl/trainer/ppo/metric_utils.py: `perf/total_num_tokens` is the sum of `global_token_num` over the step's sequences
(prompt + response tokens), `prompt_length/mean` / `response_length/mean` the means of the same counts;
ray_trainer.py `_balance_batch` logs `global_seqlen/mean` = total tokens / data-parallel ranks
(utils/seqlen_balancing.py `log_seqlen_unbalance`); the TensorBoard adapter (utils/tracking.py `_TensorboardAdapter`)
writes `add_scalar(key, value, step)` for each key, one event per scalar.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_ingest_common import check_run_dir

from batchscale.cli import main
from batchscale.errors import UserError
from batchscale.ingest.importer import import_log
from batchscale.rundir import read_run

P, G = 1024, 5
PROMPT, RESPONSE = 200.0, 400.0
RANKS = 16  # trainer.nnodes 2 x n_gpus_per_node 8


def verl_step(step: int, sequences: int = P * G, seqlen_only: bool = False) -> dict:
    """The token metrics and a few others verl logs for one step of `sequences` prompt+response sequences."""
    total = int(sequences * (PROMPT + RESPONSE))
    metrics = {"critic/score/mean": 0.1 * step, "actor/grad_norm": 0.5, "actor/lr": 1e-6,
               "prompt_length/mean": PROMPT, "response_length/mean": RESPONSE, "timing_s/gen": 30.0,
               "timing_s/update_actor": 20.0, "timing_s/step": 60.0, "global_seqlen/mean": total / RANKS}
    if not seqlen_only:
        metrics["perf/total_num_tokens"] = total
    return metrics


def write_verl_events(log_dir: Path, steps: int = 4, **kwargs) -> Path:
    """verl's _TensorboardAdapter: one add_scalar per key and step."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(log_dir))
    for step in range(1, steps + 1):
        for key, value in verl_step(step, **kwargs).items():
            writer.add_scalar(key, value, step)
    writer.close()
    return log_dir


def test_tensorboard_with_a_g_contradicting_the_tokens_exits_2_naming_both(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    events = write_verl_events(tmp_path / "tb")
    code = main(["import", "tensorboard", str(events), "--out", str(tmp_path / "run"), "--prompts-per-step", str(P),
                 "--samples-per-prompt", "4"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert "P x G = 4096 but the log holds 5120.0 sequences per step" in err and "--samples-per-prompt" in err
    assert not (tmp_path / "run").exists()
    import_log("tensorboard", events, tmp_path / "run", prompts_per_step=P)  # G from the tokens
    _, run = check_run_dir(tmp_path / "run", P, G)
    assert run["import"]["batch_from"]["samples_per_prompt"] == "log"


def test_global_seqlen_with_the_configs_ranks_checks_the_batch(tmp_path):
    pytest.importorskip("tensorboard")
    events = write_verl_events(tmp_path / "tb", seqlen_only=True)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"trainer": {"nnodes": 2, "n_gpus_per_node": 8}}))
    with pytest.raises(UserError, match=r"P x G = 4096 but the log holds 5120.0 sequences per step \(global_seqlen/"
                                        r"mean x 16 data-parallel ranks"):
        import_log("tensorboard", events, tmp_path / "run", prompts_per_step=P, samples_per_prompt=4,
                   config_path=config)
    import_log("tensorboard", events, tmp_path / "run", prompts_per_step=P, config_path=config)
    check_run_dir(tmp_path / "run", P, G)
    # without the ranks, global_seqlen/mean says nothing: the flags are taken
    import_log("tensorboard", events, tmp_path / "run2", prompts_per_step=P, samples_per_prompt=4)
    check_run_dir(tmp_path / "run2", P, 4)


def test_a_config_contradicting_the_tokens_is_an_error_naming_it(tmp_path):
    log = tmp_path / "verl.jsonl"
    log.write_text("".join(json.dumps({"step": s, "data": verl_step(s)}) + "\n" for s in (1, 2, 3)))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"data": {"train_batch_size": P}, "actor_rollout_ref": {"rollout": {"n": 8}}}))
    with pytest.raises(UserError, match=r"config.json: P x G = 8192 but the log holds 5120.0 .*--config"):
        import_log("verl", log, tmp_path / "run", config_path=config)
    assert not (tmp_path / "run").exists()


def test_wandb_history_is_checked_too(tmp_path):
    rows = [{"_step": s, "_runtime": 60.0 * s, **verl_step(s)} for s in (1, 2, 3)]
    path = tmp_path / "history.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=sorted(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(UserError, match=r"P x G = 6144 but the log holds 5120.0"):
        import_log("wandb-csv", path, tmp_path / "run", prompts_per_step=P, samples_per_prompt=6)


def test_dynamic_sampling_takes_the_samples_axis_from_the_per_step_counts(tmp_path):
    """DAPO-like: 8,232 to 14,416 sequences per step; the sample axis sums them, with a warning."""
    sequences = {1: 8232, 2: 14416, 3: 10240, 4: 12000}
    log = tmp_path / "dapo.jsonl"
    log.write_text("".join(json.dumps({"step": s, "data": {**verl_step(s, n), "train/num_gen_batches": 2}}) + "\n"
                           for s, n in sequences.items()))
    import_log("verl", log, tmp_path / "run", prompts_per_step=512, samples_per_prompt=16, seed=0)
    run = read_run(tmp_path / "run")
    assert [r["samples"] for r in run.steps] == [8232, 22648, 32888, 44888]
    assert [r["tokens/generated"] for r in run.steps] == [round(RESPONSE * n) for n in sequences.values()]
    problems = " ".join(run.descriptor.to_json()["import"]["problems"])
    assert "varies from 8232 to 14416 sequences per step" in problems and "cumulative sum" in problems
