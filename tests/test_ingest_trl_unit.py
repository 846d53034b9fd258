"""TRL's batch unit decided from the evidence (src/batchscale/ingest/trl_batch.py), on two real GRPO checkpoints.

The trainer states are real (tests/fixtures/real_logs/README.md): a TRL 0.14 run (IMJONEZZ/UnslothGRPO,
per_device_train_batch_size 1, num_generations 6, one process) and an Unsloth run on TRL 0.15 (abdo-ashraf/
Gemma-3-RL-Finetuning, `UnslothGRPOConfig`, per_device 4, num_generations 4, one process driving 2 GPUs). Their
`training_args.bin` are rebuilt here from the code that wrote them (a pickle, protocol 2 as torch.save writes it, of
the same classes under the same module names, holding the fields batchscale reads at the values those runs used):
GRPOConfig's fields at TRL v0.14.0 (trl/trainer/grpo_config.py, 49711ef) and v0.15.0 (00e5889), accelerate's
PartialState, Unsloth's compiled `UnslothGRPOTrainer.UnslothGRPOConfig` (unsloth_compiled_cache/UnslothGRPOTrainer.py:
the TRL fields plus vllm_sampling_params and unsloth_num_chunks). Nothing in them is ever run: pickle_tree.py reads
opcodes.
"""

from __future__ import annotations

import enum
import io
import pickle
import shutil
import sys
import types
import zipfile
from pathlib import Path

import pytest
from test_ingest_common import check_run_dir

from batchscale.errors import UserError
from batchscale.ingest.importer import import_log

REAL = Path(__file__).parent / "fixtures" / "real_logs"
TRL_014_STATE = REAL / "trl-0.14_grpo_checkpoint-250" / "trainer_state.json"
UNSLOTH_STATE = REAL / "unsloth_grpo_checkpoint-250" / "trainer_state.json"
TRL_014_FIELDS = {"model_init_kwargs": None, "remove_unused_columns": False, "max_prompt_length": 256,
                  "num_generations": 6, "temperature": 0.9, "max_completion_length": 200, "use_vllm": True,
                  "vllm_device": "auto", "vllm_gpu_memory_utilization": 0.5, "beta": 0.04}
TRL_015_FIELDS = {**TRL_014_FIELDS, "vllm_dtype": "auto", "vllm_max_model_len": None, "reward_weights": None,
                  "sync_ref_model": False, "ref_model_mixup_alpha": 0.9, "ref_model_sync_steps": 64,
                  "log_completions": False, "ds3_gather_for_generation": True}


def fake_class(monkeypatch, module: str, name: str, base=object):
    """A class importable as `module.name` for this test (pickle writes classes by name)."""
    cls = type(name, (base,), {"__module__": module, "__qualname__": name})
    parts = module.split(".")
    for depth in range(1, len(parts)):
        monkeypatch.setitem(sys.modules, ".".join(parts[:depth]), types.ModuleType(".".join(parts[:depth])))
    holder = types.ModuleType(module)
    setattr(holder, name, cls)
    monkeypatch.setitem(sys.modules, module, holder)
    return cls


def write_training_args(monkeypatch, checkpoint: Path, module: str, name: str, fields: dict, n_gpu: int = 1,
                        processes: int = 1, zipped: bool = True) -> Path:
    """training_args.bin as Trainer._save writes it: torch's zip (`training_args/data.pkl`) of the config object."""
    distributed = enum.Enum("DistributedType", {"NO": "NO", "MULTI_GPU": "MULTI_GPU"})
    distributed.__module__, distributed.__qualname__ = "accelerate.utils.dataclasses", "DistributedType"
    monkeypatch.setitem(sys.modules, "accelerate", types.ModuleType("accelerate"))
    monkeypatch.setitem(sys.modules, "accelerate.utils", types.ModuleType("accelerate.utils"))
    dataclasses_module = types.ModuleType("accelerate.utils.dataclasses")
    dataclasses_module.DistributedType = distributed
    monkeypatch.setitem(sys.modules, "accelerate.utils.dataclasses", dataclasses_module)
    state = fake_class(monkeypatch, "accelerate.state", "PartialState")()
    state.__dict__.update({"_cpu": False, "backend": None, "device": "cuda", "num_processes": processes,
                           "process_index": 0, "distributed_type": distributed.NO if processes == 1
                           else distributed.MULTI_GPU})
    config = fake_class(monkeypatch, module, name)()
    config.__dict__.update({"output_dir": "outputs", "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1,
                            "learning_rate": 5e-6, "seed": 42, "logging_steps": 1, "max_steps": 250,
                            **fields, "_n_gpu": n_gpu, "distributed_state": state})
    data = pickle.dumps(config, protocol=2)
    target = checkpoint / "training_args.bin"
    if zipped:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("training_args/data.pkl", data)
            archive.writestr("training_args/version", "3\n")
        data = buffer.getvalue()
    target.write_bytes(data)
    return target


def checkpoint_from(state: Path, tmp_path: Path) -> Path:
    checkpoint = tmp_path / "checkpoint-250"
    checkpoint.mkdir()
    shutil.copy(state, checkpoint / "trainer_state.json")
    return checkpoint


def test_trl_0_14_run_counts_prompts_p_1_g_6(tmp_path, monkeypatch):
    """The issue's case: before, '1/6 is not a whole number of prompts' and the import asked for P."""
    checkpoint = checkpoint_from(TRL_014_STATE, tmp_path)
    write_training_args(monkeypatch, checkpoint, "trl.trainer.grpo_config", "GRPOConfig", TRL_014_FIELDS)
    import_log("trl", checkpoint, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", 1, 6)
    assert run["import"]["batch_from"] == {"prompts_per_step": "config", "samples_per_prompt": "config"}
    assert any("the batch counts prompts because the arguments hold GRPOConfig's fields of TRL 0.14" in note
               for note in run["import"]["notes"])
    assert run["lr"] == 5e-6 and run["seed"] == 42
    assert [r["step"] for r in records][:3] == [1, 2, 3] and records[2]["reward/mean"] == pytest.approx(0.7700001)


def test_divisibility_alone_decides_when_the_fields_do_not(tmp_path, monkeypatch):
    """A dev build between 0.14 and 0.15 (fields of both eras): 1 item per step cannot be groups of 6, so prompts."""
    checkpoint = checkpoint_from(TRL_014_STATE, tmp_path)
    between = {**TRL_014_FIELDS, "ds3_gather_for_generation": True, "vllm_dtype": "auto"}
    write_training_args(monkeypatch, checkpoint, "trl.trainer.grpo_config", "GRPOConfig", between, zipped=False)
    import_log("trl", checkpoint, tmp_path / "run")
    _, run = check_run_dir(tmp_path / "run", 1, 6)
    assert any("not a whole number of groups of 6, which TRL 0.15 and later refuse" in n for n in run["import"]["notes"])


def test_undecided_evidence_names_both_readings(tmp_path, monkeypatch):
    checkpoint = checkpoint_from(TRL_014_STATE, tmp_path)
    between = {**TRL_014_FIELDS, "ds3_gather_for_generation": True, "num_generations": 4,
               "per_device_train_batch_size": 8}
    write_training_args(monkeypatch, checkpoint, "trl.trainer.grpo_config", "GRPOConfig", between)
    with pytest.raises(UserError, match=r"prompts_per_step: TRL's batch unit is undecided: per_device_train_batch_"
                                        r"size 8 .* = 8 items per step are prompts before TRL 0.15 \(P = 8\) or "
                                        r"completions since \(P = 2\).*Fix: pass --prompts-per-step"):
        import_log("trl", checkpoint, tmp_path / "run")
    (checkpoint / "README.md").write_text("---\nlibrary_name: transformers\n---\n### Framework versions\n\n"
                                          "- TRL: 0.15.2\n- Transformers: 4.49.0\n")  # TRL's model card decides
    import_log("trl", checkpoint, tmp_path / "run")
    _, run = check_run_dir(tmp_path / "run", 2, 4)
    assert any("because the model card records TRL 0.15.2" in note for note in run["import"]["notes"])


def test_unsloth_config_read_by_its_fields_with_one_process_on_two_gpus(tmp_path, monkeypatch):
    """UnslothGRPOConfig (a GRPOConfig subclass compiled into UnslothGRPOTrainer), TRL 0.15 fields: completions;
    _n_gpu 2 under one process (DataParallel) doubles the batch, as the state's train_batch_size 8 = 4 x 2 shows."""
    checkpoint = checkpoint_from(UNSLOTH_STATE, tmp_path)
    sampling = fake_class(monkeypatch, "vllm.sampling_params", "SamplingParams")
    sampling.__reduce__ = lambda self: (type(self), (1, 0.1, 1.0, -1))  # msgspec Struct: the class and its fields
    fields = {**TRL_015_FIELDS, "num_generations": 4, "per_device_train_batch_size": 4, "learning_rate": 1e-5,
              "seed": 3407, "vllm_sampling_params": sampling(), "unsloth_num_chunks": -1}
    write_training_args(monkeypatch, checkpoint, "UnslothGRPOTrainer", "UnslothGRPOConfig", fields, n_gpu=2)
    import_log("trl", checkpoint, tmp_path / "run")
    records, run = check_run_dir(tmp_path / "run", 2, 4)
    assert "UnslothGRPOTrainer.UnslothGRPOConfig, read by pickle opcodes" in run["import"]["config_path"]
    assert any("x 2 GPUs of one process (_n_gpu)" in note and "counts completions because the arguments hold "
               "log_completions" in note for note in run["import"]["notes"])
    assert [r["step"] for r in records][:2] == [10, 20] and records[0]["samples"] == 10 * 8


def test_a_class_outside_trl_and_unsloth_is_still_refused(tmp_path, monkeypatch):
    checkpoint = checkpoint_from(TRL_014_STATE, tmp_path)
    write_training_args(monkeypatch, checkpoint, "mytrainer.config", "GRPOConfig", TRL_014_FIELDS)
    with pytest.raises(UserError, match=r"it calls mytrainer.config.GRPOConfig, which is not a known configuration "
                                        r"class"):
        import_log("trl", checkpoint, tmp_path / "run")
