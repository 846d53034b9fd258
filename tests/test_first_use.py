"""`batchscale setup` (first_use.py, issue 45 Deliver 3): builds the tiny model into an empty cache apart from any
work, finds it cached the second time, restarts cleanly after an interruption, and says why a kernel is not built."""

from __future__ import annotations

import json

import pytest

from batchscale import first_use
from batchscale.cli import main
from batchscale.policy import shipped


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHSCALE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(shipped.REBUILD_ENV, raising=False)
    return tmp_path / "cache"


def setup(capsys, *args) -> tuple[int, str, str]:
    code = main(["setup", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_setup_builds_the_tiny_model_into_an_empty_cache_once(cache, capsys):
    code, out, err = setup(capsys, "--no-kernels", "--json")
    assert code == 0
    built = json.loads(out)
    model_dir = cache / "models" / built["models"]["tiny"].rsplit("/", 1)[-1]
    assert (model_dir / "config.json").is_file() and (model_dir / shipped.RECORD).is_file()
    assert "setup: the tiny model..." in err and "using the warm-started copy shipped" in err
    assert built["kernels"] == {}
    code, out, err = setup(capsys, "--no-kernels")  # cached: nothing is copied again
    assert code == 0 and out.startswith("ready: tiny in ") and "shipped" not in err
    assert [p.name for p in (cache / "models").iterdir() if p.name.startswith(model_dir.name)] == [model_dir.name]


def test_an_interrupted_setup_leaves_nothing_half_built_and_the_next_one_builds(cache, capsys, monkeypatch):
    real_install = shipped.install

    def interrupted(source, staging):
        (staging / "config.json").write_text("{}")  # half a model, as a killed copy would leave it
        raise KeyboardInterrupt

    monkeypatch.setattr(shipped, "install", interrupted)
    code, _, err = setup(capsys, "--no-kernels")
    assert code == 130 and "setup: the tiny model: stopped after" in err
    assert not [p for p in (cache / "models").iterdir() if not p.name.endswith(".lock")]  # no model, no staging
    monkeypatch.setattr(shipped, "install", real_install)
    code, out, _ = setup(capsys, "--no-kernels")
    assert code == 0 and out.startswith("ready: tiny in ")


def test_an_unknown_model_is_one_error_line_before_any_build(cache, capsys):
    code, out, err = setup(capsys, "--model", "gpt2", "--no-kernels")
    assert code == 2 and out == "" and err.startswith("error: --model") and "tiny, smollm2-135m" in err
    assert not cache.exists()


def test_kernels_a_cpu_cannot_run_are_said_not_built(monkeypatch):
    import batchscale.cpu

    monkeypatch.setattr(batchscale.cpu, "has_kernel_path", lambda path: False)
    lines = []
    states = first_use.build_kernels(lines.append)
    assert set(states) == {"avx2", "avx512_bf16"}
    assert all(state == "not for this CPU (it lacks the flags)" for state in states.values())
    assert lines == [f"kernels {path}: not for this CPU (it lacks the flags)" for path in states]
