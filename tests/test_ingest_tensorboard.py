"""`batchscale import tensorboard`: event files written by real writers (torch's SummaryWriter as OpenRLHF uses it, the
tensorboard package's writer with tensor-encoded scalars as TF2-style writers do), read through the tensorboard package."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_ingest_common import check_run_dir

from batchscale.errors import UserError
from batchscale.ingest.importer import import_log
from batchscale.ingest.tensorboard import read_tensorboard

pytest.importorskip("tensorboard")

P, G = 8, 4


def write_openrlhf_events(log_dir: Path, steps: int = 5) -> Path:
    """OpenRLHF's TensorboardLogger: add_scalar(f"train/{k}", v, global_step), evals under eval/."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(log_dir))
    for step in range(1, steps + 1):
        for key, value in {"train/rollout/reward_mean": 0.1 * step, "train/actor_grad_norm": 2.0 / step,
                           "train/critic_grad_norm": 1.0, "train/actor_lr": 5e-7, "train/critic_lr": 9e-6,
                           "train/timing/generation": 4.0, "train/timing/ppo_train": 2.0, "train/policy_loss": 0.3,
                           "train/response_length": 120.0}.items():
            writer.add_scalar(key, value, step)
        if step % 2 == 0:
            writer.add_scalar("eval/eval_math_pass1", 0.2 * step, step)
            writer.add_scalar("eval/eval_math_pass4", 0.3 * step, step)
        writer.add_text("train/generated_samples", "Sample: ...", step)
        writer.add_histogram("train/logits", np.array([0.1, 0.2, 0.3]), step)
    writer.close()
    return log_dir


def write_tensor_events(log_dir: Path, tags: dict[str, list[tuple[int, float]]]) -> Path:
    """Scalars as one-element float tensors (torch new_style, TF2 tf.summary.scalar), via tensorboard's writer."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(log_dir))  # writes the file-version event, stamped now: the run's start
    wall_time_s = time.time() + 1.0
    events = sorted((step, tag, value) for tag, points in tags.items() for step, value in points)
    for step, tag, value in events:
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[value],
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto())
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, tensor=tensor)])
        writer.add_event(event_pb2.Event(wall_time=wall_time_s + 10.0 * step, step=step, summary=summary))
    writer.close()
    return log_dir


def test_openrlhf_events_import_into_a_valid_run(tmp_path):
    started_s = time.time()
    log_dir = write_openrlhf_events(tmp_path / "tb" / "run_name")
    import_log("tensorboard", tmp_path / "tb", tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    steps = [r for r in records if r["kind"] == "step"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert run["source"] == "openrlhf" and run["algorithm"] == "ppo" and run["lr"] == pytest.approx(5e-7)
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5] and steps[-1]["samples"] == 5 * P * G
    assert steps[0]["time/generate"] == 4.0 and steps[0]["time/train"] == 2.0
    assert steps[1]["grad_norm/actor"] == pytest.approx(1.0) and steps[0]["grad_norm/critic"] == 1.0
    assert steps[0]["reward/mean"] == pytest.approx(0.1) and steps[0]["lr/critic"] == pytest.approx(9e-6)
    assert [r["step"] for r in evals] == [2, 4]
    assert evals[0]["eval/accuracy"] == pytest.approx(0.4) and evals[0]["eval/eval_math_pass4"] == pytest.approx(0.6)
    # no per-step time in OpenRLHF's logs: wall_s from event times since the writer started
    assert run["import"]["wall_s_from"] == "timestamps"
    walls = [r["wall_s"] for r in steps]
    assert walls == sorted(walls) and 0 <= walls[0] <= walls[-1] <= time.time() - started_s + 1
    assert "train/policy_loss" in run["import"]["unknown_keys"]
    assert "time/step: not provided by openrlhf" in run["import"]["not_provided"]
    assert log_dir.exists()


def test_tensor_scalars_in_verl_style_match_event_accumulator(tmp_path):
    tags = {
        "timing_s/step": [(s, 5.0) for s in range(1, 5)],
        "timing_s/gen": [(s, 3.0) for s in range(1, 5)],
        "actor/grad_norm": [(s, 1.0 / s) for s in range(1, 5)],
        "critic/score/mean": [(s, 0.25 * s) for s in range(1, 5)],
        "val-core/gsm8k/acc/mean@1": [(0, 0.05), (2, 0.3), (4, 0.6)],
    }
    log_dir = write_tensor_events(tmp_path / "tb", tags)
    parsed = read_tensorboard(log_dir)
    ours = {(row.step, tag): value for row in parsed.rows for tag, value in row.metrics.items()}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    theirs = {}
    for tag in accumulator.Tags()["tensors"]:
        for event in accumulator.Tensors(tag):
            theirs[(event.step, tag)] = float(event.tensor_proto.float_val[0])
    assert ours == pytest.approx(theirs) and len(ours) == 19
    import_log("tensorboard", log_dir, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert run["source"] == "verl" and run["import"]["wall_s_from"] == "cumulative time/step"
    assert [r["wall_s"] for r in records if r["kind"] == "step"] == [5.0, 10.0, 15.0, 20.0]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2, 4]
    assert [r["eval/accuracy"] for r in evals] == pytest.approx([0.05, 0.3, 0.6])  # float32 in the file


def test_trl_through_tensorboard_uses_the_trl_mapping(tmp_path):
    tags = {"train/reward": [(10, 0.5), (20, 0.7)], "train/learning_rate": [(10, 1e-6), (20, 1e-6)],
            "train/grad_norm": [(10, 0.3), (20, 0.2)], "train/completions/mean_length": [(10, 80.0), (20, 90.0)],
            "eval/rewards/accuracy_reward/mean": [(20, 0.45)]}
    import_log("tensorboard", write_tensor_events(tmp_path / "tb", tags), tmp_path / "run", prompts_per_step=P,
               samples_per_prompt=G)
    records, run = check_run_dir(tmp_path / "run", P, G)
    assert run["source"] == "trl" and any("logging_steps" in note for note in run["import"]["notes"])
    # event times (1 s + 10 s per step after the writer started) since the writer's first event
    assert [r["wall_s"] for r in records] == pytest.approx([101.0, 201.0, 201.0], abs=0.5)
    assert records[-1]["eval/accuracy"] == pytest.approx(0.45)


def test_truncated_event_file_is_tolerated_and_garbage_rejected(tmp_path):
    log_dir = write_tensor_events(tmp_path / "tb", {"timing_s/step": [(s, 2.0) for s in range(1, 5)],
                                                     "actor/grad_norm": [(s, 1.0) for s in range(1, 5)]})
    event_file = next(log_dir.iterdir())
    event_file.write_bytes(event_file.read_bytes()[:-7])
    result = import_log("tensorboard", log_dir, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
    assert any("truncated" in p for p in result["run"]["import"]["problems"])
    assert result["summary"]["steps"] == 4  # the cut record held step 4's second tag only
    not_events = tmp_path / "other" / "events.out.tfevents.123.host"
    not_events.parent.mkdir()
    not_events.write_text('{"step": 1, "data": {"actor/grad_norm": 1.0}}\n' * 3)
    with pytest.raises(UserError, match="not a TensorBoard event file"):
        import_log("tensorboard", not_events, tmp_path / "run2", prompts_per_step=P, samples_per_prompt=G)
    assert not (tmp_path / "run2").exists()


def test_importing_does_not_import_torch(tmp_path):
    log_dir = write_tensor_events(tmp_path / "tb", {"actor/grad_norm": [(1, 1.0)]})
    import subprocess

    code = ("import sys; from pathlib import Path; import batchscale.ingest.cli; "
            "from batchscale.ingest.importer import import_log; "
            f"import_log('tensorboard', Path({str(log_dir)!r}), Path({str(tmp_path / 'run')!r}), prompts_per_step=1, "
            "samples_per_prompt=1); assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_damaged_record_inside_a_file_is_an_error_naming_it(tmp_path):
    log_dir = write_tensor_events(tmp_path / "tb", {"timing_s/step": [(s, 2.0) for s in range(1, 5)]})
    event_file = next(log_dir.iterdir())
    data = bytearray(event_file.read_bytes())
    data[-30] ^= 0xFF  # a payload byte of a record before the last: its CRC no longer matches
    event_file.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"events.out.tfevents.*: event \d+: the record fails its CRC check"):
        import_log("tensorboard", log_dir, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)


def test_without_the_tensorboard_package_the_error_names_the_extra(tmp_path, monkeypatch):
    log_dir = write_tensor_events(tmp_path / "tb", {"actor/grad_norm": [(1, 1.0)]})
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto", None)  # import fails as if not installed
    with pytest.raises(UserError, match=r"^tensorboard: reading event files needs the tensorboard package.*"
                                        r"pip install 'batchscale\[import\]'"):
        import_log("tensorboard", log_dir, tmp_path / "run", prompts_per_step=P, samples_per_prompt=G)
