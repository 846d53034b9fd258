"""The catalogue of hostile inputs: every command, every way a user can hand it something wrong.

Each case is one command line, the exit code it must give, and a fragment its one-line error must hold. Every case
also checks what all error paths share: the message is one `error:` line on stderr, and no traceback is printed.
Cases run in-process through `batchscale.cli.main` (an uncaught exception fails the case with its traceback), on
files built once per module (`world`): binary and non-UTF-8 files, a corrupt Parquet file, malformed sweep files,
broken run directories, a user reward module that misbehaves in every way, and a small synthetic sweep to analyse.
Training cases use the random-init test model and a one-step budget, so the whole catalogue stays fast.

Fault tests (kill -9, two sweeps at once, a full disk) live in test_faults.py.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
from pathlib import Path

import pytest

from batchscale.cli import main

BINARY = bytes(range(256)) * 4  # every byte value: not UTF-8 from offset 128
LATIN1 = "prompt,answer\ncafé,1\n".encode("latin-1")  # 0xe9 at offset 17

REWARDS_MODULE = '''
import math, time

def ok(response, answer):
    return 1.0

def raises(response, answer):
    raise ValueError("boom\\nsecond line")

def returns_str(response, answer):
    return "yes"

def returns_none(response, answer):
    return None

def returns_nan(response, answer):
    return math.nan

def sleeps(response, answer):
    time.sleep(60)
    return 1.0

not_a_function = 5
'''


def run_config(model_dir: Path, **extra) -> str:
    """A one-step run on the random test model: P = G = 2, budget 4 samples, a 4-problem eval."""
    sections = {
        "model": {"name": str(model_dir)},
        "task": {"eval_size": 4},
        "batch": {"prompts_per_step": 2, "samples_per_prompt": 2, "micro_batch_size": 2,
                  "reference_samples_per_step": 4},
        "sampling": {"max_new_tokens": 3},
        "run": {"budget_samples": 4, "eval_every_samples": 4, "threads": 1},
    }
    for dotted, value in extra.items():
        section, key = dotted.split("__")
        sections.setdefault(section, {})[key] = value
    return "".join(f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in body.items())
                   for name, body in sections.items())


def write_sweep_file(path: Path, body: str, base: str = "base.toml") -> None:
    path.write_text(f'base = "{base}"\n{body}' if base else body)


@pytest.fixture(scope="module")
def world(tmp_path_factory, random_model_dir):
    """Every hostile file the catalogue needs, built once."""
    from batchscale.analysis.analyze import analyze
    from batchscale.analysis.synthetic import write_synthetic_run, write_synthetic_sweep
    from batchscale.rundir.run import DESCRIPTOR_FILE, METRICS_FILE, SUMMARY_FILE

    w = tmp_path_factory.mktemp("world")
    (w / "binary.bin").write_bytes(BINARY)
    (w / "latin1.csv").write_bytes(LATIN1)
    (w / "empty.txt").write_text("")
    (w / "a_file").write_text("not a directory\n")
    (w / "rewards_hostile.py").write_text(REWARDS_MODULE)

    # run configs
    (w / "base.toml").write_text(run_config(random_model_dir))
    (w / "binary.toml").write_bytes(BINARY)
    (w / "latin1.toml").write_bytes(b"[run]\nlabel = \"caf\xe9\"\n")
    (w / "syntax.toml").write_text("[run\nseed = 1\n")
    (w / "model_int.toml").write_text("[model]\nname = 5\n")
    (w / "unknown_section.toml").write_text("[optimiser]\nlr = 1e-4\n")

    # data files
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(12)]
    (w / "good.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (w / "latin1.jsonl").write_bytes(b'{"prompt": "1+1=", "answer": "2"}\n{"prompt": "caf\xe9", "answer": "1"}\n')
    (w / "binary.jsonl").write_bytes(BINARY)
    (w / "notjson.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": \n')
    (w / "nan.jsonl").write_text('{"prompt": "1+1=", "answer": NaN}\n')
    (w / "noanswer.jsonl").write_text('{"prompt": "1+1="}\n')
    (w / "list_row.jsonl").write_text('[1, 2]\n')
    (w / "corrupt.parquet").write_bytes(b"PAR1" + BINARY[:300] + b"PAR1")
    (w / "notparquet.parquet").write_text("just text\n")
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"question": ["1+1="], "answer": ["2"]}), w / "nocolumn.parquet")

    # sweep files
    for name, body in {
        "sweep_set_int.toml": "set = 5\n",
        "sweep_grid_list.toml": "grid = [1, 2]\n",
        "sweep_points_int.toml": "points = 5\n",
        "sweep_points_list_of_int.toml": "points = [1, 2]\n",
        "sweep_seeds_negative.toml": "seeds = [-1]\n",
        "sweep_seeds_string.toml": 'seeds = "0"\n',
        "sweep_seeds_bool.toml": "seeds = [true]\n",
        "sweep_seeds_empty.toml": "seeds = []\n",
        "sweep_unknown.toml": "sets = 1\n",
        "sweep_grid_empty.toml": '[grid]\n"batch.prompts_per_step" = []\n',
        "sweep_grid_bad_point.toml": '[grid]\n"batch.prompts_per_step" = [2, 3]\n"batch.micro_batch_size" = [4]\n',
        "sweep_set_inf.toml": '[set]\n"optim.lr" = inf\n',
        "sweep_set_unquoted.toml": "[set]\nrun.seed = 1\n",
        "sweep_duplicate.toml": '[grid]\n"optim.lr" = [1e-4, 2e-4]\n',
        "sweep_ok.toml": "",
    }.items():
        write_sweep_file(w / name, body)
    write_sweep_file(w / "sweep_base_int.toml", "base = 5\n", base="")
    write_sweep_file(w / "sweep_base_missing.toml", "", base="missing.toml")
    write_sweep_file(w / "sweep_base_binary.toml", "", base="binary.toml")
    (w / "sweep_binary.toml").write_bytes(BINARY)
    (w / "not_a_sweep").mkdir()
    (w / "not_a_sweep" / "notes.txt").write_text("mine\n")

    # run directories: one good synthetic run, then one broken copy per defect
    good = write_synthetic_run(w / "runs_src" / "good", "good", 0, prompts_per_step=4, total_samples=256,
                               eval_every_samples=64)

    def broken(name: str, file: str, content: bytes | str | None = None, edit=None) -> None:
        target = w / "broken" / name
        shutil.copytree(good, target)
        if edit is not None:
            data = json.loads((target / file).read_text())
            edit(data)
            content = json.dumps(data)
        if isinstance(content, str):
            content = content.encode()
        (target / file).write_bytes(content)

    broken("runjson_binary", DESCRIPTOR_FILE, BINARY)
    broken("runjson_latin1", DESCRIPTOR_FILE, b'{"label": "caf\xe9", "seed": 0, "samples_per_step": 8}')
    broken("runjson_seed_negative", DESCRIPTOR_FILE, edit=lambda d: d.update(seed=-1))
    broken("runjson_seed_float", DESCRIPTOR_FILE, edit=lambda d: d.update(seed=1.5))
    broken("runjson_seed_string", DESCRIPTOR_FILE, edit=lambda d: d.update(seed="0"))
    broken("runjson_lr_infinity", DESCRIPTOR_FILE,
           (good / DESCRIPTOR_FILE).read_text().replace('"lr": 1e-06', '"lr": Infinity'))
    broken("runjson_list", DESCRIPTOR_FILE, "[1, 2]")
    broken("runjson_batch_mismatch", DESCRIPTOR_FILE, edit=lambda d: d.update(samples_per_step=7))
    lines = (good / METRICS_FILE).read_text().splitlines()
    broken("metrics_corrupt_middle", METRICS_FILE, "\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    broken("metrics_binary_middle", METRICS_FILE, lines[0].encode() + b"\n" + BINARY[120:200] + b"\n"
           + "\n".join(lines[1:]).encode() + b"\n")
    broken("metrics_nan_token", METRICS_FILE,
           "\n".join([lines[0].replace('"eval/accuracy": ', '"eval/accuracy": NaN, "x": '), *lines[1:]]) + "\n")
    broken("metrics_no_samples", METRICS_FILE,
           "\n".join([json.dumps({"kind": "eval", "step": 0, "wall_s": 0.0, "eval/accuracy": 0.1}), *lines[1:]]) + "\n")
    broken("summary_corrupt", SUMMARY_FILE, "{")

    # sweeps to analyse and plan: one clean (analysed), one of two tasks (analysed with --allow-mixed)
    sweep = write_synthetic_sweep(w / "sweep", prompts_per_step=(4, 8), seeds=(0, 1), control_prompts_per_step=None,
                                  total_samples=1024, eval_every_samples=128)
    mixed = write_synthetic_sweep(w / "mixed", prompts_per_step=(4, 8), seeds=(0, 1), control_prompts_per_step=None,
                                  total_samples=1024, eval_every_samples=128)
    descriptor = mixed / "runs" / "p8_g8_sqrt__s1" / DESCRIPTOR_FILE
    descriptor.write_text(json.dumps({**json.loads(descriptor.read_text()), "task": "gsm8k", "model": "qwen"}))
    with pytest.warns(Warning):
        analyze(sweep)
        analyze(mixed, allow_mixed=True)
    (w / "unanalysed").mkdir()
    shutil.copytree(sweep / "runs", w / "unanalysed" / "runs")
    (w / "analysis_corrupt").mkdir()
    shutil.copytree(sweep / "runs", w / "analysis_corrupt" / "runs")
    (w / "analysis_corrupt" / "analysis.json").write_bytes(BINARY)
    # a sweep that analyses but cannot be planned (no step is timed): a report fails after analysing it
    shutil.copytree(sweep / "runs", w / "untimed" / "runs")
    for metrics in (w / "untimed" / "runs").glob("*/metrics.jsonl"):
        lines = [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
                 for line in metrics.read_text().splitlines()]
        metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))

    # tables for plan --table
    (w / "table_nan.csv").write_text("label,samples_to_target,throughput\na,100,nan\n")
    (w / "table_inf.csv").write_text("label,samples_to_target,throughput\na,100,inf\n")
    (w / "table_header.csv").write_text("name,n,q\na,1,2\n")
    (w / "table_cells.csv").write_text("label,samples_to_target,throughput\na,100\n")
    (w / "table_dup.csv").write_text("label,samples_to_target,throughput\na,100,2\na,200,3\n")
    (w / "table_ok.csv").write_text("label,samples_to_target,throughput\na,100,2\nb,150,4\n")

    # model configs for roofline
    (w / "model_binary").mkdir()
    (w / "model_binary" / "config.json").write_bytes(BINARY)
    (w / "model_list").mkdir()
    (w / "model_list" / "config.json").write_text("[1, 2]")
    (w / "model_partial").mkdir()
    (w / "model_partial" / "config.json").write_text('{"hidden_size": 64}')
    (w / "model_negative").mkdir()
    (w / "model_negative" / "config.json").write_text(json.dumps({
        "hidden_size": -64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
        "vocab_size": 100, "max_position_embeddings": 64}))

    # logs for import
    (w / "verl_binary.jsonl").write_bytes(BINARY)
    (w / "verl_empty.jsonl").write_text("")
    (w / "trl_state").mkdir()
    (w / "trl_state" / "trainer_state.json").write_bytes(BINARY)
    (w / "wandb_binary.csv").write_bytes(BINARY)

    sys.path.insert(0, str(w))  # the reward module; spawned reward workers inherit sys.path
    yield w
    sys.path.remove(str(w))


# (id, command line, exit code, fragment of the error line). "{w}": the world directory; "{m}": the test model.
TRAIN = ["train", "{w}/base.toml", "--out", "{w}/out/{id}"]
SET = "--set"
CASES = [
    # --- train: config files and overrides ---------------------------------------------------------------------
    ("train-config-missing", ["train", "{w}/nope.toml"], 2, "no config file"),
    ("train-config-binary", ["train", "{w}/binary.toml"], 2, "offset 128"),
    ("train-config-latin1", ["train", "{w}/latin1.toml"], 2, "byte 0xe9 at offset 18"),
    ("train-config-syntax", ["train", "{w}/syntax.toml"], 2, "is not valid TOML"),
    ("train-config-model-int", ["train", "{w}/model_int.toml"], 2, "model.name"),
    ("train-config-unknown-section", ["train", "{w}/unknown_section.toml"], 2, "optimiser: unknown key"),
    ("train-lr-inf", [*TRAIN, SET, "optim.lr=inf"], 2, "optim.lr: got inf: must be a finite number"),
    ("train-lr-nan", [*TRAIN, SET, "optim.lr=nan"], 2, "optim.lr: got nan"),
    ("train-lr-negative", [*TRAIN, SET, "optim.lr=-1e-4"], 2, "optim.lr"),
    ("train-lr-rule-inf", [*TRAIN, SET, "optim.lr_rule=inf"], 2, "optim.lr_rule"),
    ("train-betas-nan", [*TRAIN, SET, "optim.betas=[0.9, nan]"], 2, "optim.betas"),
    ("train-temperature-inf", [*TRAIN, SET, "sampling.temperature=inf"], 2, "sampling.temperature"),
    ("train-grad-norm-inf", [*TRAIN, SET, "optim.max_grad_norm=inf"], 2, "optim.max_grad_norm"),
    ("train-seed-negative", [*TRAIN, SET, "run.seed=-1"], 2, "run.seed: got -1"),
    ("train-seed-float", [*TRAIN, SET, "run.seed=1.5"], 2, "run.seed"),
    ("train-split-seed-negative", [*TRAIN, SET, "task.split_seed=-3"], 2, "task.split_seed"),
    ("train-huge-pg-micro-batch", [*TRAIN, SET, "batch.prompts_per_step=1000003", SET,
                                   "batch.samples_per_prompt=1000033", SET, "batch.micro_batch_size=7"],
     2, "divisor of 1000036000099, e.g. 1"),
    ("train-micro-batch", [*TRAIN, SET, "batch.micro_batch_size=3"], 2, "divisor of 4, e.g. 2"),
    ("train-budget-below-step", [*TRAIN, SET, "run.budget_samples=3"], 2, "run.budget_samples"),
    ("train-unknown-key", [*TRAIN, SET, "batch.prompt_per_step=4"], 2, "did you mean 'prompts_per_step'"),
    ("train-set-no-equals", [*TRAIN, SET, "batch.prompts_per_step"], 2, "dotted.key=value"),
    ("train-label-slash", [*TRAIN, SET, "run.label=a/b"], 2, "run.label"),
    ("train-device-misspelt", [*TRAIN, SET, "run.device=gpu"], 2, "run.device: got 'gpu': must be 'auto', 'cpu'"),
    ("train-algorithm-unknown", [*TRAIN, SET, "algorithm.name=sac"], 2, "algorithm.name"),
    ("train-model-missing", [*TRAIN, SET, "model.name='{w}/no-model'"], 2, "model.name"),
    ("train-reward-timeout-zero", [*TRAIN, SET, "task.reward_timeout_s=0"], 2, "task.reward_timeout_s"),
    # --- train: --out ------------------------------------------------------------------------------------------
    ("train-out-is-file", ["train", "{w}/base.toml", "--out", "{w}/a_file"], 2, "exists and is not a directory"),
    ("train-out-foreign-dir", ["train", "{w}/base.toml", "--out", "{w}/not_a_sweep", "--overwrite"], 2,
     "non-empty directory without a run"),
    ("train-out-existing-run", ["train", "{w}/base.toml", "--out", "{w}/runs_src/good"], 2,
     "already holds a run"),
    # --- train: data files -------------------------------------------------------------------------------------
    ("data-no-path", [*TRAIN, SET, "task.name=data"], 2, "task.path"),
    ("data-missing", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/nope.jsonl'"], 2, "no file at"),
    ("data-latin1", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/latin1.jsonl'"], 2,
     "byte 0xe9 at offset 49"),
    ("data-binary", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/binary.jsonl'"], 2, "offset 128"),
    ("data-not-json", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/notjson.jsonl'"], 2,
     "notjson.jsonl:2"),
    ("data-nan-token", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/nan.jsonl'"], 2, "NaN"),
    ("data-no-answer", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/noanswer.jsonl'"], 2,
     "'prompt' and an 'answer'"),
    ("data-list-row", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/list_row.jsonl'"], 2, "row 1"),
    ("data-empty", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/empty.txt'"], 2, "holds no rows"),
    ("data-parquet-corrupt", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/corrupt.parquet'"], 2,
     "not a readable Parquet file"),
    ("data-parquet-text", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/notparquet.parquet'"], 2,
     "not a readable Parquet file"),
    ("data-parquet-no-prompt", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/nocolumn.parquet'"], 2,
     "'prompt' and an 'answer'"),
    ("data-eval-too-big", [*TRAIN, SET, "task.name=data", SET, "task.path='{w}/good.jsonl'", SET,
                           "task.eval_size=12"], 2, "leaves none to train on"),
    # --- train: rewards ----------------------------------------------------------------------------------------
    ("reward-unknown", [*TRAIN, SET, "task.reward=nonsense"], 2, "unknown reward 'nonsense'"),
    ("reward-no-module", [*TRAIN, SET, "task.reward='no_such_module:f'"], 2, "cannot import 'no_such_module:f'"),
    ("reward-no-function", [*TRAIN, SET, "task.reward='rewards_hostile:missing'"], 2, "cannot import"),
    ("reward-not-callable", [*TRAIN, SET, "task.reward='rewards_hostile:not_a_function'"], 2, "not a function"),
    ("reward-raises", [*TRAIN, SET, "task.reward='rewards_hostile:raises'"], 2,
     "rewards_hostile:raises: raised ValueError: boom second line for input 0"),
    ("reward-returns-str", [*TRAIN, SET, "task.reward='rewards_hostile:returns_str'"], 2,
     "returned 'yes' (str) for input 0"),
    ("reward-returns-none", [*TRAIN, SET, "task.reward='rewards_hostile:returns_none'"], 2,
     "returned None (NoneType) for input 0"),
    ("reward-returns-nan", [*TRAIN, SET, "task.reward='rewards_hostile:returns_nan'"], 2,
     "step 0: eval reward: task.reward rewards_hostile:returns_nan returned nan for input 0"),
    ("reward-sleeps", [*TRAIN, SET, "task.reward='rewards_hostile:sleeps'", SET, "task.reward_timeout_s=1"], 2,
     "did not return within task.reward_timeout_s = 1 s"),
    # --- sweep ---------------------------------------------------------------------------------------------------
    ("sweep-missing", ["sweep", "{w}/nope.toml"], 2, "no config file"),
    ("sweep-binary", ["sweep", "{w}/sweep_binary.toml"], 2, "offset 128"),
    ("sweep-set-int", ["sweep", "{w}/sweep_set_int.toml", "--out", "{w}/out/{id}"], 2,
     "sweep_set_int.toml: set: must be a table of dotted keys, got int 5"),
    ("sweep-grid-list", ["sweep", "{w}/sweep_grid_list.toml", "--out", "{w}/out/{id}"], 2,
     "grid: must be a table of dotted keys to arrays, got list"),
    ("sweep-base-int", ["sweep", "{w}/sweep_base_int.toml", "--out", "{w}/out/{id}"], 2,
     "base: must be a string"),
    ("sweep-points-int", ["sweep", "{w}/sweep_points_int.toml", "--out", "{w}/out/{id}"], 2,
     "points: must be an array of tables, got int"),
    ("sweep-points-list-of-int", ["sweep", "{w}/sweep_points_list_of_int.toml", "--out", "{w}/out/{id}"], 2,
     "points[0]: must be a table"),
    ("sweep-seeds-negative", ["sweep", "{w}/sweep_seeds_negative.toml", "--out", "{w}/out/{id}"], 2,
     "seeds: must be a non-empty array of integers >= 0"),
    ("sweep-seeds-string", ["sweep", "{w}/sweep_seeds_string.toml", "--out", "{w}/out/{id}"], 2,
     "seeds: must be an array of integers"),
    ("sweep-seeds-bool", ["sweep", "{w}/sweep_seeds_bool.toml", "--out", "{w}/out/{id}"], 2, "seeds"),
    ("sweep-seeds-empty", ["sweep", "{w}/sweep_seeds_empty.toml", "--out", "{w}/out/{id}"], 2, "seeds"),
    ("sweep-unknown-key", ["sweep", "{w}/sweep_unknown.toml", "--out", "{w}/out/{id}"], 2, "unknown key"),
    ("sweep-grid-empty", ["sweep", "{w}/sweep_grid_empty.toml", "--out", "{w}/out/{id}"], 2, "empty list"),
    ("sweep-bad-point", ["sweep", "{w}/sweep_grid_bad_point.toml", "--out", "{w}/out/{id}"], 2,
     "batch.prompts_per_step=3"),
    ("sweep-set-inf", ["sweep", "{w}/sweep_set_inf.toml", "--out", "{w}/out/{id}"], 2, "must be a finite number"),
    ("sweep-set-unquoted", ["sweep", "{w}/sweep_set_unquoted.toml", "--out", "{w}/out/{id}"], 2,
     "quote dotted keys"),
    ("sweep-duplicate-points", ["sweep", "{w}/sweep_duplicate.toml", "--out", "{w}/out/{id}"], 2, "same run"),
    ("sweep-base-missing", ["sweep", "{w}/sweep_base_missing.toml", "--out", "{w}/out/{id}"], 2, "no config file"),
    ("sweep-base-binary", ["sweep", "{w}/sweep_base_binary.toml", "--out", "{w}/out/{id}"], 2, "offset 128"),
    ("sweep-workers-zero", ["sweep", "{w}/sweep_ok.toml", "--workers", "0", "--out", "{w}/out/{id}"], 2,
     "--workers"),
    ("sweep-workers-text", ["sweep", "{w}/sweep_ok.toml", "--workers", "two"], 2, "Invalid value for '--workers'"),
    ("sweep-executor-unknown", ["sweep", "{w}/sweep_ok.toml", "--executor", "slurm", "--out", "{w}/out/{id}"], 2,
     "unknown executor 'slurm'"),
    ("sweep-out-is-file", ["sweep", "{w}/sweep_ok.toml", "--out", "{w}/a_file"], 2, "exists and is not a directory"),
    ("sweep-locked-by-live-pid", ["sweep", "{w}/sweep_ok.toml", "--out", "{w}/locked_by_init"], 2,
     "pid 1 on host"),
    # --- analyze -------------------------------------------------------------------------------------------------
    ("analyze-missing", ["analyze", "{w}/nope"], 2, "is not a directory"),
    ("analyze-empty-dir", ["analyze", "{w}/not_a_sweep"], 2, "no run directories"),
    ("analyze-runjson-binary", ["analyze", "{w}/broken/runjson_binary"], 2, "run.json: is not UTF-8 text (byte 0x80 at offset 128"),
    ("analyze-runjson-latin1", ["analyze", "{w}/broken/runjson_latin1"], 2, "byte 0xe9 at offset 14"),
    ("analyze-seed-negative", ["analyze", "{w}/broken/runjson_seed_negative"], 2, "seed"),
    ("analyze-seed-float", ["analyze", "{w}/broken/runjson_seed_float"], 2, "seed"),
    ("analyze-seed-string", ["analyze", "{w}/broken/runjson_seed_string"], 2, "seed"),
    ("analyze-lr-infinity", ["analyze", "{w}/broken/runjson_lr_infinity"], 2, "Infinity is not a JSON value"),
    ("analyze-runjson-list", ["analyze", "{w}/broken/runjson_list"], 2, "must hold a JSON object"),
    ("analyze-runjson-batch", ["analyze", "{w}/broken/runjson_batch_mismatch"], 2, "samples_per_step"),
    ("analyze-metrics-corrupt", ["analyze", "{w}/broken/metrics_corrupt_middle"], 2, "metrics.jsonl line 2"),
    ("analyze-metrics-binary", ["analyze", "{w}/broken/metrics_binary_middle"], 2, "line 2"),
    ("analyze-metrics-nan", ["analyze", "{w}/broken/metrics_nan_token"], 2, "NaN is not a JSON value"),
    ("analyze-metrics-no-samples", ["analyze", "{w}/broken/metrics_no_samples"], 2, "lacks samples"),
    ("analyze-summary-corrupt", ["analyze", "{w}/broken/summary_corrupt"], 2, "summary.json"),
    ("analyze-target-nan", ["analyze", "{w}/sweep", "--target", "nan", "--out", "{w}/out/{id}"], 2, "--target"),
    ("analyze-target-inf", ["analyze", "{w}/sweep", "--target", "inf", "--out", "{w}/out/{id}"], 2, "--target"),
    ("analyze-reference-unknown", ["analyze", "{w}/sweep", "--reference", "zz", "--out", "{w}/out/{id}"], 2,
     "unknown label 'zz'"),
    ("analyze-mixed", ["analyze", "{w}/mixed", "--out", "{w}/out/{id}"], 2,
     "hold different tasks and models"),
    # --- plan ----------------------------------------------------------------------------------------------------
    ("plan-nothing", ["plan"], 2, "needs exactly one of a sweep directory or --table"),
    ("plan-both", ["plan", "{w}/sweep", "--table", "{w}/table_ok.csv"], 2, "needs exactly one"),
    ("plan-no-analysis", ["plan", "{w}/unanalysed"], 2, "holds no analysis.json"),
    ("plan-analysis-binary", ["plan", "{w}/analysis_corrupt"], 2, "analysis.json: is not UTF-8 text (byte 0x80 at offset 128"),
    ("plan-mixed", ["plan", "{w}/mixed"], 2, "hold different tasks and models"),
    ("plan-table-missing", ["plan", "--table", "{w}/nope.csv"], 2, "is not a readable file"),
    ("plan-table-binary", ["plan", "--table", "{w}/binary.bin"], 2, "offset 128"),
    ("plan-table-latin1", ["plan", "--table", "{w}/latin1.csv"], 2, "byte 0xe9 at offset 17"),
    ("plan-table-header", ["plan", "--table", "{w}/table_header.csv"], 2, "lacks column(s)"),
    ("plan-table-cells", ["plan", "--table", "{w}/table_cells.csv"], 2, "has 2 cells"),
    ("plan-table-duplicate", ["plan", "--table", "{w}/table_dup.csv"], 2, "already appears"),
    ("plan-table-nan", ["plan", "--table", "{w}/table_nan.csv"], 2, "positive finite number"),
    ("plan-table-inf", ["plan", "--table", "{w}/table_inf.csv"], 2, "positive finite number"),
    ("plan-critical-inf", ["plan", "--table", "{w}/table_ok.csv", "--critical-generation-batch", "inf"], 2,
     "--critical-generation-batch"),
    ("plan-critical-negative", ["plan", "--table", "{w}/table_ok.csv", "--critical-training-batch", "-5"], 2,
     "--critical-training-batch"),
    ("plan-model-only", ["plan", "--table", "{w}/table_ok.csv", "--model", "Qwen2.5-7B"], 2, "needs both"),
    ("plan-mem-util-nan", ["plan", "--table", "{w}/table_ok.csv", "--model", "Qwen2.5-7B", "--hardware", "H100-SXM",
                           "--mem-util", "nan"], 2, "mem_util"),
    ("plan-profile-binary", ["plan", "{w}/sweep", "--generation-profile", "{w}/binary.bin"], 2, "offset 128"),
    # --- report --------------------------------------------------------------------------------------------------
    ("report-missing", ["report", "{w}/nope"], 2, "does not exist"),
    ("report-profile-missing", ["report", "{w}/sweep", "--generation-profile", "{w}/nope.json"], 2, "is not a file"),
    ("report-profile-binary", ["report", "{w}/unanalysed", "--training-profile", "{w}/binary.bin"], 2,
     "offset 128"),
    ("report-no-runs", ["report", "{w}/not_a_sweep"], 2, "no run directories"),
    ("report-mixed", ["report", "{w}/mixed"], 2, "hold different tasks and models"),
    ("report-fails-after-analysis", ["report", "{w}/untimed"], 2, "has no run with timed step records"),
    # --- roofline ------------------------------------------------------------------------------------------------
    ("roofline-preset-unknown", ["roofline", "GPT-9", "H100-SXM"], 2, "unknown preset 'GPT-9'"),
    ("roofline-hardware-unknown", ["roofline", "Qwen2.5-7B", "TPU-v9"], 2, "unknown preset 'TPU-v9'"),
    ("roofline-config-binary", ["roofline", "{w}/model_binary", "H100-SXM"], 2, "offset 128"),
    ("roofline-config-list", ["roofline", "{w}/model_list", "H100-SXM"], 2, "not a JSON object"),
    ("roofline-config-partial", ["roofline", "{w}/model_partial", "H100-SXM"], 2, "required field is missing"),
    ("roofline-config-negative", ["roofline", "{w}/model_negative", "H100-SXM"], 2, "hidden_size"),
    ("roofline-batches-text", ["roofline", "Qwen2.5-7B", "H100-SXM", "--batches", "a,b"], 2, "comma list"),
    ("roofline-batches-zero", ["roofline", "Qwen2.5-7B", "H100-SXM", "--batches", "0,8"], 2, ">= 1"),
    ("roofline-context-zero", ["roofline", "Qwen2.5-7B", "H100-SXM", "--context", "0"], 2, "context"),
    ("roofline-mem-util-nan", ["roofline", "Qwen2.5-7B", "H100-SXM", "--mem-util", "nan"], 2, "mem_util"),
    ("roofline-dtype-bytes", ["roofline", "Qwen2.5-7B", "H100-SXM", "--dtype-bytes", "3"], 2, "dtype_bytes"),
    ("roofline-missing-hardware", ["roofline", "Qwen2.5-7B"], 2, "Missing argument"),
    # --- profile -------------------------------------------------------------------------------------------------
    ("profile-training-batches-zero", ["profile", "training", "--batches", "0,8"], 2, ">= 1"),
    ("profile-training-batches-text", ["profile", "training", "--batches", "x"], 2, "comma list"),
    ("profile-training-micro-batch", ["profile", "training", "--batches", "8,16", "--micro-batch-size", "3"], 2,
     "does not divide batch 8"),
    ("profile-generation-concurrency-zero", ["profile", "generation", "--max-concurrency", "0"], 2,
     "max_concurrency"),
    ("profile-generation-threads-zero", ["profile", "generation", "--threads", "0"], 2, "threads"),
    ("profile-generation-model-missing", ["profile", "generation", "--model", "{w}/no-model",
                                          "--concurrency", "1"], 2, "no-model"),
    # --- import --------------------------------------------------------------------------------------------------
    ("import-format-unknown", ["import", "mlflow", "{w}/verl_binary.jsonl", "--out", "{w}/out/{id}"], 2,
     "mlflow"),
    ("import-path-missing", ["import", "verl", "{w}/nope.jsonl", "--out", "{w}/out/{id}"], 2, "nope.jsonl"),
    ("import-verl-binary", ["import", "verl", "{w}/verl_binary.jsonl", "--out", "{w}/out/{id}",
                            "--prompts-per-step", "4", "--samples-per-prompt", "2"], 2, "verl_binary.jsonl"),
    ("import-verl-empty", ["import", "verl", "{w}/verl_empty.jsonl", "--out", "{w}/out/{id}",
                           "--prompts-per-step", "4", "--samples-per-prompt", "2"], 2, "verl_empty.jsonl"),
    ("import-trl-binary", ["import", "trl", "{w}/trl_state", "--out", "{w}/out/{id}",
                           "--prompts-per-step", "4", "--samples-per-prompt", "2"], 2, "trainer_state.json"),
    ("import-wandb-binary", ["import", "wandb-csv", "{w}/wandb_binary.csv", "--out", "{w}/out/{id}",
                             "--prompts-per-step", "4", "--samples-per-prompt", "2"], 2, "wandb_binary.csv"),
    ("import-prompts-zero", ["import", "verl", "{w}/verl_empty.jsonl", "--out", "{w}/out/{id}",
                             "--prompts-per-step", "0"], 2, "--prompts-per-step"),
    ("import-out-foreign", ["import", "verl", "{w}/verl_empty.jsonl", "--out", "{w}/not_a_sweep", "--overwrite",
                            "--prompts-per-step", "4", "--samples-per-prompt", "2"], 2,
     "non-empty directory without a run"),
    # --- export --------------------------------------------------------------------------------------------------
    ("export-format-unknown", ["export", "kubernetes", "{w}/sweep_ok.toml", "--out", "{w}/out/{id}"], 2,
     "unknown format 'kubernetes'"),
    ("export-sweep-missing", ["export", "verl", "{w}/nope.toml", "--out", "{w}/out/{id}"], 2, "no config file"),
    ("export-sweep-malformed", ["export", "verl", "{w}/sweep_set_int.toml", "--out", "{w}/out/{id}"], 2,
     "set: must be a table"),
    ("export-out-foreign", ["export", "verl", "{w}/sweep_ok.toml", "--out", "{w}/not_a_sweep", "--overwrite"], 2,
     "without a previous export"),
    # --- demo ----------------------------------------------------------------------------------------------------
    ("demo-out-is-file", ["demo", "--out", "{w}/a_file"], 2, "exists and is not a directory"),
    # --- the command line itself ---------------------------------------------------------------------------------
    ("cli-unknown-command", ["trian"], 2, "No such command 'trian'"),
    ("cli-unknown-option", ["analyze", "{w}/sweep", "--tagret", "0.5"], 2, "No such option"),
]


def expand_args(args: list[str], w: Path, case_id: str, model_dir: Path) -> list[str]:
    return [a.replace("{w}", str(w)).replace("{id}", case_id).replace("{m}", str(model_dir)) for a in args]


@pytest.fixture(scope="module")
def locked_by_init(world):
    """A sweep directory whose lock names pid 1 on this host: alive, and not ours, so it is never taken over."""
    path = world / "locked_by_init"
    path.mkdir()
    (path / "sweep.lock").write_text(json.dumps({"pid": 1, "host": socket.gethostname(), "started": 0}))
    return path


@pytest.mark.parametrize("case_id,args,code,fragment", CASES, ids=[c[0] for c in CASES])
def test_hostile_input(case_id, args, code, fragment, world, locked_by_init, random_model_dir, capsys):
    assert_refused_cleanly(expand_args(args, world, case_id, random_model_dir), code, fragment, world / "out" / case_id,
                           lambda: snapshot(world), capsys)


def assert_refused_cleanly(argv: list[str], code: int, fragment: str, out: Path, take_snapshot, capsys) -> None:
    """The catalogue's contract: exit `code` with one `error:` line holding `fragment`, no traceback, nothing
    half-written under `out`, and every input as it was (`take_snapshot` before and after)."""
    before = take_snapshot()
    assert main(argv) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert fragment in errors[0], errors[0]
    assert not out.exists() or not any(out.iterdir()), "a failed command left a half-written output"
    assert take_snapshot() == before, "a failed command changed an input"


def snapshot(world: Path) -> dict:
    """The inputs a command must never touch (outputs under out/ excluded)."""
    return {str(p.relative_to(world)): p.stat().st_size for p in world.rglob("*")
            if p.is_file() and not str(p.relative_to(world)).startswith(("out", "__pycache__"))
            and p.suffix != ".pyc"}


def test_the_catalogue_is_large_and_covers_every_command():
    commands = {args[0] for _, args, _, _ in CASES}
    assert len(CASES) >= 60
    assert {"train", "sweep", "analyze", "plan", "report", "roofline", "profile", "import", "export",
            "demo"} <= commands


def test_allow_mixed_compares_runs_of_different_tasks_with_a_warning(world, capsys):
    assert main(["analyze", str(world / "mixed"), "--out", str(world / "out" / "mixed-allowed"), "--allow-mixed"]) == 0
    err = capsys.readouterr().err
    assert "warning: comparing runs of different tasks and models (--allow-mixed)" in err
    assert "task gsm8k / model qwen: p8_g8_sqrt__s1" in err and "task synthetic / model synthetic: p4_g8_sqrt__s0" in err
    assert main(["plan", str(world / "mixed"), "--allow-mixed", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["best"]
