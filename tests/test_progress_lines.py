"""Progress in any log (issue 25, item 4): where stderr is a pipe, a sweep prints a plain line per finished, failed
or stopped run with the ETA, a heartbeat during a silent stretch and nothing after it closes; long phases (warm
start, profiles) and a single `train` run do the same; in a terminal the rich display stays and no plain line is
printed. Timing assertions are loose: "at least one heartbeat in a 1 s silence with heartbeat_s=0.2"."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

from rich.console import Console

from batchscale import console as console_module
from batchscale.console import format_duration, long_phase
from batchscale.sweep.progress import SweepProgress, display_name
from batchscale.train import run_progress

SRC = Path(__file__).resolve().parents[1] / "src"


def run_piped(script: str) -> list[str]:
    """Run `script` in a fresh interpreter with stdout and stderr pipes; its stderr lines (where progress goes)."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env["PYTHONPATH"] = str(SRC)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


SWEEP_SCRIPT = """
import sys, time
from batchscale.sweep.progress import SweepProgress

with SweepProgress(3, 0, heartbeat_s=0.2) as progress:
    progress.run_started("grpo-P4-G8-sqrt__s0", 6144)
    progress.run_started("grpo-P64-G8-sqrt__s0", 6144)
    progress.record("grpo-P4-G8-sqrt__s0", {"kind": "step", "samples": 2048, "reward/mean": 0.3125})
    progress.record("grpo-P4-G8-sqrt__s0", {"kind": "eval", "samples": 2048, "eval/accuracy": 0.402})
    print("MARK silence", file=sys.stderr, flush=True)
    time.sleep(1.0)
    print("MARK events", file=sys.stderr, flush=True)
    progress.run_failed("grpo-P64-G8-sqrt__s0", "its worker process died", runs_left=2)
    progress.run_finished("grpo-P4-G8-sqrt__s0", "grpo-P4-G8-sqrt", 0, 6144, 0.59, 3882.4, 41.2, runs_left=1)
    progress.point_stopped("grpo-P64-G8-sqrt", "cannot win (T > 41 s at N = 5,120)")
    progress.note("P4 and P8 cannot be told apart yet: adding 1 seed each")
    progress.add_runs(2)
print("MARK exited", file=sys.stderr, flush=True)
time.sleep(0.8)
"""


def between(lines: list[str], start: str, end: str | None = None) -> list[str]:
    first = lines.index(start) + 1
    return lines[first:lines.index(end)] if end else lines[first:]


def test_a_sweep_in_a_pipe_prints_plain_lines_and_heartbeats_and_nothing_after_exit():
    lines = run_piped(SWEEP_SCRIPT)
    silence = between(lines, "MARK silence", "MARK events")
    beats = [line for line in silence if "running:" in line]
    assert beats, lines  # at least one heartbeat in a 1 s silence with heartbeat_s=0.2
    assert beats[0].startswith("sweep: 0/3 runs done, ")
    assert "running: grpo-P4-G8-sqrt seed 0 at 2,048/6,144 samples, reward 0.312, eval 0.402; " \
           "grpo-P64-G8-sqrt seed 0 starting" in beats[0]
    events = [line for line in between(lines, "MARK events", "MARK exited") if "running:" not in line]
    assert events == [
        "run 1/3 failed: grpo-P64-G8-sqrt seed 0: its worker process died; 2 runs left, ETA unknown",
        "run 2/3 done: grpo-P4-G8-sqrt seed 0, 6,144 samples, final eval 0.590, N* 3,882, 41 s; 1 run left, ETA 41 s",
        "stopped grpo-P64-G8-sqrt: cannot win (T > 41 s at N = 5,120)",
        "P4 and P8 cannot be told apart yet: adding 1 seed each",
    ], lines  # (heartbeats aside: a stalled machine may let one in between)
    assert between(lines, "MARK exited") == [], lines  # nothing after the context closed


def plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=80), out


def test_eta_is_runs_left_times_the_mean_wall_time_per_worker():
    target, out = plain_console()
    with SweepProgress(12, 4, console=target, heartbeat_s=60) as progress:
        progress.run_finished("a__s0", "a", 0, 6144, None, None, 40.0, runs_left=7)
        progress.run_finished("b__s1", "b", 1, 6144, 0.5, None, 60.0, runs_left=6)
        assert progress.eta_s(6) == 300.0
    with SweepProgress(12, 0, console=target, heartbeat_s=60, workers=2) as progress:
        progress.run_finished("c__s0", "c", 0, 100, None, None, 50.0, runs_left=3)
        assert progress.eta_s(3) == 100.0  # two rounds of two workers
        progress.run_finished("c__s1", "c", 1, 100, None, None, 50.0, runs_left=0)
    lines = out.getvalue().splitlines()
    assert lines[0] == "run 5/12 done: a seed 0, 6,144 samples, no eval, N* not reached, 40 s; 7 runs left, ETA 4m 40s"
    assert lines[1].endswith("6 runs left, ETA 5m 00s")  # the plan shrank by one: total 12 = 6 done + 6 left
    assert lines[3] == "run 2/2 done: c seed 1, 100 samples, no eval, N* not reached, 50 s; no runs left"


def test_a_terminal_gets_the_rich_display_and_no_plain_lines():
    out = io.StringIO()
    target = Console(file=out, force_terminal=True, width=120)
    with SweepProgress(3, 0, console=target, heartbeat_s=0.2) as progress:
        progress.run_started("grpo-P4-G8-sqrt__s0", 6144)
        progress.record("grpo-P4-G8-sqrt__s0", {"kind": "step", "samples": 2048, "reward/mean": 0.3})
        time.sleep(0.6)
        progress.run_finished("grpo-P4-G8-sqrt__s0", "grpo-P4-G8-sqrt", 0, 6144, 0.59, 3882, 41, runs_left=2)
        progress.point_stopped("grpo-P64-G8-sqrt", "cannot win")
    text = out.getvalue()
    assert "runs" in text  # the overall bar was drawn
    assert "running:" not in text and "run 1/3 done" not in text and "ETA unknown" not in text
    assert "stopped grpo-P64-G8-sqrt: cannot win" in text  # a decision prints above the display


def test_names_read_as_label_and_seed():
    assert display_name("grpo-P8-G8-sqrt__s1") == "grpo-P8-G8-sqrt seed 1"
    assert display_name("custom") == "custom"
    assert [format_duration(s) for s in (0.4, 41, 290, 3725)] == ["0 s", "41 s", "4m 50s", "1h 02m"]


PHASE_SCRIPT = """
import sys, time
from batchscale.console import long_phase

with long_phase("profiling generation", heartbeat_s=0.2) as phase:
    time.sleep(1.0)
    phase.relay(lambda line: print(line, file=sys.stderr, flush=True))("concurrency 1: 100 tok/s")
with long_phase("a cached model", heartbeat_s=0.2, announce=False) as phase:
    time.sleep(0.4)  # nothing logged: nothing printed at all
with long_phase("the tiny model's warm start", heartbeat_s=0.2, announce=False) as phase:
    phase.relay(lambda line: print(line, file=sys.stderr, flush=True))("building the tiny model")
    time.sleep(1.0)
print("MARK exited", file=sys.stderr, flush=True)
time.sleep(0.5)
"""


def test_a_long_phase_in_a_pipe_says_start_still_working_and_done():
    lines = run_piped(PHASE_SCRIPT)
    assert lines[0] == "profiling generation..."
    first = lines[:lines.index("concurrency 1: 100 tok/s")]
    assert any(line.startswith("still working: profiling generation (") for line in first), lines
    after = [line for line in lines[lines.index("concurrency 1: 100 tok/s") + 1:] if not line.startswith("still")]
    assert after[0].startswith("profiling generation: done in ")
    assert not any("cached model" in line for line in lines)
    build = between(lines, "building the tiny model", "MARK exited")
    assert any(line.startswith("still working: the tiny model's warm start (") for line in build), lines
    assert build[-1].startswith("the tiny model's warm start: done in ")
    assert between(lines, "MARK exited") == []


def test_a_failed_phase_says_stopped():
    target, out = plain_console()
    try:
        with long_phase("profiling training", console=target, heartbeat_s=60):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert out.getvalue().splitlines() == ["profiling training...", "profiling training: stopped after 0 s"]


def test_prebuild_wraps_a_build_in_a_phase_that_stays_silent_when_cached(monkeypatch):
    target, out = plain_console()
    monkeypatch.setattr(console_module, "console", target)
    built = []

    def build_tiny(task, log):
        if task.model_dump_json() not in built:  # the first use builds (and logs), the second finds it cached
            built.append(task.model_dump_json())
            log("building the tiny model (once, cached in /tmp/x)")
            time.sleep(0.8)

    monkeypatch.setitem(sys.modules, "batchscale.policy.tiny", types.SimpleNamespace(build_tiny=build_tiny))
    monkeypatch.setitem(sys.modules, "batchscale.policy.load", types.SimpleNamespace(smollm2_dir=None))
    from batchscale.sweep.runner import prebuild_models

    task = types.SimpleNamespace(model_dump_json=lambda: "{}")
    point = types.SimpleNamespace(config=types.SimpleNamespace(model=types.SimpleNamespace(name="tiny"), task=task))
    prebuild_models([point], log=lambda line: target.print(line), heartbeat_s=0.2)
    lines = out.getvalue().splitlines()
    assert lines[0] == "building the tiny model (once, cached in /tmp/x)"
    assert any(line.startswith("still working: the tiny model's warm start (") for line in lines[1:-1]), lines
    assert lines[-1].startswith("the tiny model's warm start: done in ")
    out.truncate(0), out.seek(0)
    prebuild_models([point], log=lambda line: target.print(line), heartbeat_s=0.2)
    assert out.getvalue() == ""


def test_a_single_train_run_in_a_pipe_prints_evals_and_heartbeats(monkeypatch, tmp_path):
    from batchscale.config import validate_config

    target, out = plain_console()
    monkeypatch.setattr(run_progress, "console", target)

    def fake_train(cfg, out_dir, overwrite, on_record, log, resume=False):
        log("grpo-P64-G2-sqrt seed 3: starting")
        on_record({"kind": "step", "samples": 128, "reward/mean": 0.25})
        time.sleep(0.8)
        on_record({"kind": "eval", "samples": 128, "eval/accuracy": 0.5})
        return {"samples": 256}

    monkeypatch.setitem(sys.modules, "batchscale.train.loop", types.SimpleNamespace(train=fake_train))
    cfg = validate_config({"batch": {"prompts_per_step": 64, "samples_per_prompt": 2},
                           "run": {"budget_samples": 256, "seed": 3}})
    summary, _ = run_progress.train_with_progress(cfg, tmp_path / "run", heartbeat_s=0.2)
    assert summary == {"samples": 256}
    lines = out.getvalue().splitlines()
    assert lines[0] == "grpo-P64-G2-sqrt seed 3: starting"
    beats = [line for line in lines if line.startswith("grpo-P64-G2-sqrt seed 3: at ")]
    assert beats and beats[0].startswith("grpo-P64-G2-sqrt seed 3: at 128/256 samples, reward 0.250, "), lines
    assert [line for line in lines if line not in beats][-1].startswith("grpo-P64-G2-sqrt seed 3: eval 0.500 at 128/256 samples, reward 0.250, ")
