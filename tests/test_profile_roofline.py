"""The profilers against a hardware preset: the fraction of HBM bandwidth decode realizes at concurrency 1 and the
fraction of the dense bf16 peak training reaches; the preset a CUDA device's name maps to. The arithmetic is the same
on every device, so CPU runs with a named preset check it; the `gpu` cases check the detected preset on CUDA."""

from __future__ import annotations

import json

import pytest
import torch
from devices import DEVICES

from batchscale import cli
from batchscale.errors import UserError
from batchscale.systems.hardware import GPU_PRESETS, detect_gpu, get_hardware, preset_for_gpu_name

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_json(capsys, *args) -> dict:
    assert cli.main(["profile", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def generation_args(model_dir, device, *extra):
    return ["generation", "--model", str(model_dir), "--concurrency", "1,2", "--repeats", "1", "--waves", "1",
            "--min-responses", "4", "--samples-per-prompt", "2", "--max-new-tokens", "6", "--device", device, *extra]


def training_args(model_dir, device, *extra):
    return ["training", "--model", str(model_dir), "--batches", "4,8", "--repeats", "1", "--device", device, *extra]


@pytest.mark.parametrize("gpu_name, preset", [("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H200", "H200"),
                                              ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("Tesla T4", None)])
def test_a_gpu_name_maps_to_its_preset(gpu_name, preset):
    assert preset_for_gpu_name(gpu_name) == preset


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_preset_without_a_gpu_is_a_user_error():
    with pytest.raises(UserError, match="has no CUDA device"):
        get_hardware("cuda")


def test_a_cpu_profile_without_hardware_has_no_roofline(capsys, random_model_dir):
    assert run_json(capsys, *generation_args(random_model_dir, "cpu"))["roofline"] is None
    result = run_json(capsys, *training_args(random_model_dir, "cpu"))
    assert result["roofline"] is None and result["rows"][0]["utilization_of_preset"] is None


def test_generation_bandwidth_fraction_at_concurrency_1(capsys, random_model_dir):
    result = run_json(capsys, *generation_args(random_model_dir, "cpu", "--hardware", "H100-SXM"))
    roofline, h100 = result["roofline"], GPU_PRESETS["H100-SXM"]
    assert roofline["hardware"] == "H100-SXM" and roofline["bandwidth_bytes_per_s"] == h100.bandwidth_bytes_per_s
    assert roofline["weight_bytes"] == result["params"] * 4  # float32, the embedding tied to the LM head
    one = result["rows"][0]
    assert one["weight_bytes_per_s"] == pytest.approx(one["decode_steps"] * roofline["weight_bytes"] / one["time_s"])
    assert roofline["bandwidth_fraction_at_1"] == one["bandwidth_fraction"] == pytest.approx(
        one["weight_bytes_per_s"] / h100.bandwidth_bytes_per_s)
    assert 0 < roofline["bandwidth_fraction_at_1"] < 1


def test_training_utilization_of_the_bf16_peak(capsys, random_model_dir):
    result = run_json(capsys, *training_args(random_model_dir, "cpu", "--hardware", "H200"))
    peak = GPU_PRESETS["H200"].peak_flops_per_s
    for row in result["rows"]:
        assert row["utilization_of_preset"] == pytest.approx(row["flops_per_s"] / peak)
    assert result["roofline"] == {"hardware": "H200", "peak_flops_per_s": peak, "utilization_best": pytest.approx(
        max(row["utilization_of_preset"] for row in result["rows"]))}


@pytest.mark.parametrize("command", ["generation", "training"])
def test_an_unknown_preset_fails_before_the_model_loads(capsys, command, monkeypatch):
    def no_compute(*_, **__):
        raise AssertionError("a bad preset must fail before any compute")

    monkeypatch.setattr("batchscale.profile.options.load_profiled_policy", no_compute)
    assert cli.main(["profile", command, "--hardware", "TPU-v9"]) == 2
    assert "unknown preset 'TPU-v9'" in capsys.readouterr().err


@pytest.mark.parametrize("device", [d for d in DEVICES if d.id == "cuda"])
def test_on_cuda_the_detected_preset_and_peak_memory_are_reported(capsys, random_model_dir, device):
    generation = run_json(capsys, *generation_args(random_model_dir, device))
    training = run_json(capsys, *training_args(random_model_dir, device))
    preset = detect_gpu().name
    assert generation["roofline"]["hardware"] == training["roofline"]["hardware"] == preset
    assert generation["compute_dtype"] == "bfloat16"  # "auto" decodes a float32 model in bf16 on the GPU
    assert all(row["cuda_max_allocated_mb"] > 0 for row in generation["rows"] + training["rows"])
