"""`run.device` and the device-agnostic paths, over every device this machine has (tests/devices.py: CPU always,
CUDA marked `gpu` and skipped without a GPU).

- Spelling and availability: a bad `run.device`, or CUDA asked for where there is none, is a one-line UserError before
  any compute; `--set run.device=cpu` gives the same records as the default on a CPU machine.
- Decode dtype: "auto" decodes a float32 policy in bf16 on a bf16 GPU and leaves the CPU as it was; the CPU-only bf16
  kernel is never chosen for a CUDA device.
- On each device: the engine's greedy output equals HF `generate` (both float32); the engine's bf16 log-probs agree
  with the float32 training forward within BF16_LOGPROB_*; a two-step GRPO (and PPO, ReMax) run trains with every tensor there.
"""

from __future__ import annotations

import copy
import json
import os

import pytest
import torch
from devices import DEVICES
from test_trainer import TIMING_KEYS, read_records
from test_trainer import small_config as trainer_config

from batchscale.cli import main
from batchscale.config import ModelConfig, TaskConfig, load_config
from batchscale.device import resolve_device
from batchscale.errors import UserError
from batchscale.policy.forward import token_logprobs
from batchscale.policy.load import load_policy
from batchscale.policy.sequences import collate
from batchscale.rollout import build_engine
from batchscale.rollout.base import SamplingParams
from batchscale.rollout.engine import ContinuousBatchingEngine
from batchscale.rollout.weights import resolve_generation_dtype, resolve_kernel
from batchscale.tasks import build_task
from batchscale.train.loop import train

# bf16 decode vs the float32 training forward, per response token, in nats: bf16 keeps 8 significant bits, so each
# logit carries a relative error near 2^-9. Measured on the CPU path (a bf16 copy of the float32 weights, the prompts
# below): mean 0.0007 / max 0.0025 on the random model, mean 0.006 / max 0.07 on the warm-started tiny model, whose
# logits are sharper (docs/LOG.md, issue 19); the bounds leave 2-3x room for GPU kernels' rounding
BF16_LOGPROB_MEAN_ATOL = 0.02
BF16_LOGPROB_MAX_ATOL = 0.15


def quiet(_message: str) -> None:
    pass


def small_config(model_dir, *extra):
    """test_trainer's small run, two steps long (P*G = 12, 24 samples)."""
    return trainer_config(model_dir, "run.budget_samples=24", "run.eval_every_samples=12", "task.eval_size=8", *extra)


def strip_timing(records):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


@pytest.fixture(scope="module")
def prompts():
    task = build_task(TaskConfig())
    return [e.prompt for e in task.eval_examples()[:12]] + ["7+5=", "123+456=", "1="]  # mixed prompt lengths


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "CPU", "cuda0", ""])
def test_a_misspelt_device_is_a_config_error(name):
    with pytest.raises(UserError, match=r"run\.device.*'auto', 'cpu', 'cuda' or 'cuda:N'"):
        load_config(None, [f"run.device='{name}'"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal is for machines without")
@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_refused_before_any_compute(name, random_model_dir, tmp_path, capsys, monkeypatch):
    def no_compute(*_, **__):
        raise AssertionError("a missing GPU must be refused before the model loads")

    monkeypatch.setattr("batchscale.train.state.load_policy", no_compute)
    with pytest.raises(UserError, match="sees none on this machine") as refused:
        resolve_device(name)
    assert "\n" not in str(refused.value)
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--set", f"model.name='{random_model_dir}'",
                 "--set", f"run.device={name}"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: run.device: 'cuda") and "set run.device = 'cpu'" in errors[0]
    assert not out.exists()  # a failed start leaves nothing behind


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal is for machines without")
def test_a_sweep_for_a_gpu_is_refused_before_its_first_run(random_model_dir, tmp_path, capsys):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'seeds = [0]\n[set]\n"model.name" = "{random_model_dir}"\n"run.device" = "cuda"\n'
                     '"batch.micro_batch_size" = 8\n[grid]\n"batch.prompts_per_step" = [2, 4]\n')
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out)]) == 2
    assert "error: run.device: 'cuda' asks for a CUDA GPU" in capsys.readouterr().err
    assert not out.exists()


def test_auto_is_the_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu") and resolve_device("cpu") == torch.device("cpu")


def toml_value(value) -> str:
    """A dumped config value as an override's TOML ("" for None, the default, which TOML cannot spell): JSON scalars
    and lists are TOML already; a table is written inline without its None fields, "" when it has no other."""
    if isinstance(value, dict):
        fields = [f"{k} = {toml_value(v)}" for k, v in value.items() if v is not None]
        return "{" + ", ".join(fields) + "}" if fields else ""
    return "" if value is None else json.dumps(value)


def test_device_cpu_gives_the_same_records_as_the_default(random_model_dir, tmp_path, monkeypatch):
    """`batchscale train --set run.device=cpu` against the default (docs/LOG.md, issue 19: also against the commit
    before run.device existed)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # "auto" is the CPU here, as on every CI machine
    train(small_config(random_model_dir), tmp_path / "auto", log=quiet)
    overrides = [item for section, fields in small_config(random_model_dir).model_dump(mode="json").items()
                 for key, value in fields.items() if toml_value(value)  # None: the default, not spelled in TOML
                 for item in ("--set", f"{section}.{key}={toml_value(value)}")]
    assert main(["train", "--out", str(tmp_path / "cpu"), *overrides, "--set", "run.device=cpu"]) == 0
    assert strip_timing(read_records(tmp_path / "cpu")) == strip_timing(read_records(tmp_path / "auto"))
    assert json.loads((tmp_path / "cpu" / "summary.json").read_text())["machine"]["device"] == "cpu"


def test_auto_decodes_float32_in_bf16_on_a_bf16_gpu_only(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr("batchscale.rollout.weights.native_bf16", lambda device_type: device_type == "cuda")
    assert resolve_generation_dtype("auto", torch.float32, cuda) == torch.bfloat16
    assert resolve_generation_dtype("float32", torch.float32, cuda) == torch.float32  # the override
    assert resolve_generation_dtype("model", torch.float32, cuda) == torch.float32
    assert resolve_generation_dtype("auto", torch.float32, cpu) == torch.float32  # the CPU path is unchanged
    monkeypatch.setattr("batchscale.rollout.weights.native_bf16", lambda device_type: False)  # e.g. a V100
    assert resolve_generation_dtype("auto", torch.float32, cuda) == torch.float32


@pytest.mark.parametrize("model_dtype", [torch.bfloat16, torch.float32])
def test_the_cpu_kernel_is_never_chosen_for_cuda(model_dtype):
    for compute in (torch.float32, torch.bfloat16):
        assert resolve_kernel("auto", model_dtype, compute, torch.device("cuda")) == (None, 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", ["tiny", "random"])
def test_engine_greedy_equals_hf_generate(device, model, random_model_dir, prompts):
    name = "tiny" if model == "tiny" else str(random_model_dir)
    policy = load_policy(ModelConfig(name=name), TaskConfig(), quiet, device)
    params = SamplingParams(max_new_tokens=10, greedy=True)
    expected = build_engine("hf", policy).generate(prompts, params)
    engine = build_engine("engine", policy, max_concurrency=5, compute_dtype="float32")  # HF runs float32 too
    assert engine.decoder.device.type == device and engine.decoder.dtype == torch.float32
    got = engine.generate(prompts, params)
    assert got.response_ids == expected.response_ids and got.texts == expected.texts


def bf16_engine(policy, device: str) -> ContinuousBatchingEngine:
    """The engine as a GPU run decodes: bf16 arithmetic over a bf16 copy of the float32 weights. On CUDA that is what
    "auto" picks; on the CPU (which "auto" keeps in float32) a bf16 copy of the model decoded in its own dtype."""
    if device == "cpu":
        return ContinuousBatchingEngine(copy.deepcopy(policy.model).to(torch.bfloat16), policy.tokenizer, 4, "model")
    return ContinuousBatchingEngine(policy.model, policy.tokenizer, 4, "auto")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", ["tiny", "random"])
def test_bf16_engine_logprobs_agree_with_float32_training(device, model, random_model_dir, prompts):
    name = "tiny" if model == "tiny" else str(random_model_dir)
    policy = load_policy(ModelConfig(name=name), TaskConfig(), quiet, device)
    engine = bf16_engine(policy, device)
    assert engine.decoder.dtype == torch.bfloat16 and engine.decoder.device.type == device
    torch.manual_seed(0)
    rollouts = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=12))
    batch = collate(rollouts.prompt_ids, rollouts.response_ids, policy.tokenizer.pad_token_id, device)
    with torch.no_grad():
        expected = token_logprobs(policy.model, batch)[batch.response_mask.bool()].cpu()  # (tokens,) float32
    got = torch.tensor([x for lp in rollouts.logprobs for x in lp])  # (tokens,)
    gap = (got - expected).abs()
    assert gap.mean() <= BF16_LOGPROB_MEAN_ATOL and gap.max() <= BF16_LOGPROB_MAX_ATOL, (gap.mean(), gap.max())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ["grpo", "ppo", "remax"])
def test_two_step_run(device, algorithm, tmp_path):
    """Two steps on the warm-started tiny model, whose rewards differ within a group, so the updates move the policy;
    PPO's critic and ReMax's greedy baseline run on the device too."""
    summary = train(small_config("tiny", f"run.device={device}", f"algorithm.name={algorithm}"), tmp_path, log=quiet)
    steps = [r for r in read_records(tmp_path) if r["kind"] == "step"]
    assert [r["step"] for r in steps] == [1, 2] and summary["samples"] == 24
    assert all(r["tokens/generated"] > 0 for r in steps) and any(r["grad_norm/actor"] > 0 for r in steps)
    if algorithm == "ppo":
        assert all(r["grad_norm/critic"] > 0 for r in steps)
    assert summary["machine"]["device"].startswith(device) and ("gpu" in summary["machine"]) == (device == "cuda")


def test_an_asynchronous_run_on_a_gpu_is_refused_before_the_model_loads(random_model_dir, tmp_path, capsys,
                                                                        monkeypatch):
    """The async generator shares weights through CPU shared memory: a run whose device resolves to a GPU (here a
    stand-in, so the rule is tested without one) says so in one line instead of failing mid-step."""
    def no_compute(*_, **__):
        raise AssertionError("refused before the model loads")

    monkeypatch.setattr("batchscale.train.state.resolve_device", lambda name: torch.device("cuda", 0))
    monkeypatch.setattr("batchscale.train.state.load_policy", no_compute)
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--set", f"model.name='{random_model_dir}'", "--set", "rollout.mode=async",
                 "--set", "run.device=auto"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "rollout.mode" in errors[0] and "CPU only" in errors[0] and "cuda:0" in errors[0]
    assert not out.exists()


def test_cpu_flags_are_the_flags_only(monkeypatch, tmp_path):
    """/proc/cpuinfo's "flags\t\t: fpu avx2 ..." line gives the flags, not its label or the colon."""
    import builtins

    from batchscale import cpu

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\nbugs\t\t: spectre_v1\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path,
                                                                          *a, **k))
    cpu.cpu_flags.cache_clear()
    try:
        assert cpu.cpu_flags() == frozenset({"fpu", "avx2", "fma"})
    finally:
        cpu.cpu_flags.cache_clear()


def test_cpu_capability_avx2_hides_avx512_and_amx(monkeypatch, tmp_path):
    """BATCHSCALE_CPU_CAPABILITY=avx2 makes an AVX-512 + AMX CPU read as AVX2-only: no native bf16, no "avx512_bf16"
    kernel path, the override named among the kernel flags; an unknown capability is refused."""
    import builtins

    from batchscale import cpu

    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu avx2 fma avx512f avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path,
                                                                          *a, **k))

    def read(capability):
        monkeypatch.setenv(cpu.CAPABILITY_ENV, capability)
        cpu.cpu_flags.cache_clear()
        cpu.native_bf16_cpu.cache_clear()
        return cpu.cpu_flags(), cpu.native_bf16_cpu(), cpu.has_kernel_path("avx512_bf16"), cpu.kernel_flags()

    original = os.environ.get(cpu.CAPABILITY_ENV)  # this session's own setting, put back for the tests after this one
    try:
        flags, native, avx512, named = read("")
        assert "avx512_bf16" in flags and native and avx512 and cpu.CAPABILITY_ENV not in " ".join(named)
        flags, native, avx512, named = read("avx2")
        assert flags == frozenset({"fpu", "avx2", "fma"}) and not native and not avx512
        assert cpu.has_kernel_path("avx2") and named == ["avx2", "fma", f"{cpu.CAPABILITY_ENV}=avx2"]
        with pytest.raises(ValueError, match="avx2"):
            read("sse2")
    finally:
        monkeypatch.undo()  # the real /proc/cpuinfo and environment again
        assert os.environ.get(cpu.CAPABILITY_ENV) == original
        cpu.cpu_flags.cache_clear()
        cpu.native_bf16_cpu.cache_clear()
