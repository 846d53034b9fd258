"""Config: loading, overrides, derived plan, and every config error failing before compute with exit code 2."""

from __future__ import annotations

import json

import pytest

from batchscale.cli import main
from batchscale.config import derive_plan, load_config, parse_override, scale_lr
from batchscale.errors import UserError


def test_defaults_derive_one_consistent_plan():
    plan = derive_plan(load_config(None))
    assert plan.samples_per_step == plan.prompts_per_step * plan.samples_per_prompt == 128
    assert plan.accumulation_steps == 128 // 32
    assert plan.num_steps * plan.samples_per_step >= plan.budget_samples


@pytest.mark.parametrize("rule, exponent", [("sqrt", 0.5), ("linear", 1.0), ("none", 0.0), (0.25, 0.25)])
def test_lr_scaling_rules(rule, exponent):
    cfg = load_config(None, ["batch.prompts_per_step=64", "batch.samples_per_prompt=8", "batch.reference_samples_per_step=128",
                             "optim.lr=1e-4", f"optim.lr_rule={rule}"])
    plan = derive_plan(cfg)
    assert plan.lr == pytest.approx(1e-4 * (512 / 128) ** exponent)
    assert plan.lr_exponent == exponent


@pytest.mark.parametrize("rule, exponent", [("sqrt", 0.5), ("linear", 1.0), ("none", 0.0), (0.25, 0.25), (1, 1.0)])
def test_every_lr_rule_the_config_writes_reads_back_as_its_exponent(rule, exponent):
    """One table of rule names: run.json's lr_rule (the plan's display name) is read back by analysis and accepted by
    `import --lr-rule` as the same exponent."""
    from batchscale.analysis.analyze import is_default_lr_rule, normalize_lr_rule
    from batchscale.ingest.importer import check_lr_rule

    plan = derive_plan(load_config(None, [f"optim.lr_rule={rule}"]))
    assert normalize_lr_rule(plan.lr_rule) == plan.lr_exponent == exponent
    check_lr_rule(plan.lr_rule)
    assert is_default_lr_rule(plan.lr_rule) == (exponent == 0.5)
    assert normalize_lr_rule("unknown") == "unknown"
    with pytest.raises(UserError, match="--lr-rule"):
        check_lr_rule("cosine")


def test_sqrt_rule_doubles_batch_times_sqrt2():
    assert scale_lr(1e-4, 256, 128, 0.5) == pytest.approx(1e-4 * 2**0.5)
    assert scale_lr(3e-4, 128, 128, 0.5) == pytest.approx(3e-4)


def test_overrides_parse_toml_values_and_plain_strings():
    assert parse_override("batch.prompts_per_step=64") == (["batch", "prompts_per_step"], 64)
    assert parse_override("optim.lr=1e-4") == (["optim", "lr"], 1e-4)
    assert parse_override("optim.lr_rule=sqrt") == (["optim", "lr_rule"], "sqrt")
    assert parse_override("algorithm.normalize_std=false") == (["algorithm", "normalize_std"], False)


def test_toml_file_and_override_precedence(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[batch]\nprompts_per_step = 8\nsamples_per_prompt = 4\nmicro_batch_size = 8\n[optim]\nbetas = [0.9, 0.95]\n')
    cfg = load_config(path, ["batch.prompts_per_step=16"])
    assert (cfg.batch.prompts_per_step, cfg.batch.samples_per_prompt, cfg.optim.betas) == (16, 4, (0.9, 0.95))


BAD = [
    (["batch.prompts_per_step=0"], "batch.prompts_per_step", "greater than or equal to 1"),
    (["batch.samples_per_prompt=1"], "batch.samples_per_prompt", "at least 2"),
    (["batch.micro_batch_size=48"], "batch.micro_batch_size", "not divisible"),
    (["optim.lr=0"], "optim.lr", "greater than 0"),
    (["optim.lr=-1e-3"], "optim.lr", "greater than 0"),
    (["batch.prompts_per_step=1.5"], "batch.prompts_per_step", "integer"),
    (["batch.prompts_per_step='64'"], "batch.prompts_per_step", "integer"),
    (["batch.prompt_per_step=64"], "batch.prompt_per_step", "did you mean 'prompts_per_step'"),
    (["optim.lr_rule=cubic"], "optim.lr_rule", "sqrt"),
    (["algorithm.name=dpo"], "algorithm.name", "grpo"),
    (["run.budget_samples=64"], "run.budget_samples", "smaller than one step"),
    (["sampling.top_p=1.5"], "sampling.top_p", "less than or equal to 1"),
]


@pytest.mark.parametrize("overrides, field, phrase", BAD)
def test_bad_config_is_one_clear_error(overrides, field, phrase):
    with pytest.raises(UserError) as info:
        load_config(None, overrides)
    assert info.value.field == field
    assert phrase in str(info.value)
    assert "Fix:" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("overrides, field, phrase", BAD[:4])
def test_cli_exits_2_without_traceback_and_writes_nothing(tmp_path, capsys, overrides, field, phrase):
    out = tmp_path / "run"
    args = ["train", "--out", str(out)]
    for item in overrides:
        args += ["--set", item]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}") and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_missing_and_malformed_config_files(tmp_path, capsys):
    assert main(["train", str(tmp_path / "nope.toml")]) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[batch\nprompts_per_step = 3")
    assert main(["train", str(bad)]) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_existing_run_dir_is_refused_before_compute(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"kind": "step"}) + "\n")
    (tmp_path / "run.json").write_text("{}")  # a run of an earlier batchscale: run.json, metrics.jsonl, nothing else
    assert main(["train", "--out", str(tmp_path), "--set", "run.budget_samples=128"]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_an_inline_table_merges_into_nested_sections_and_replaces_a_table_value():
    from batchscale.config import apply_overrides

    data = {"run": {"out_dir": "runs/x", "seed": 3}, "task": {"eval_size": 8, "params": {"a": 1}}}
    merged = apply_overrides(data, ["run={budget_samples=1024}", "task={eval_size=4, params={b=2}}"])
    assert merged == {"run": {"out_dir": "runs/x", "seed": 3, "budget_samples": 1024},
                      "task": {"eval_size": 4, "params": {"b": 2}}}


def test_every_caller_gets_the_algorithms_group_rule(tmp_path):
    """check_combinations reads GRPO's G >= 2 from the config itself: the sweep's worker (sweep.runner.run_point) and a
    racing sweep's extra seeds (sweep.adaptive.point_for_seed) validated the raw dict without it before (issue 40)."""
    from batchscale.config import Config, validate_config
    from batchscale.sweep.adaptive import point_for_seed
    from batchscale.sweep.runner import run_point
    from batchscale.sweep.spec import Point

    data = {"batch": {"prompts_per_step": 4, "samples_per_prompt": 1, "micro_batch_size": 4}}
    unchecked = Config.model_validate(data)  # the schema alone: no rule across fields
    rule = "grpo needs at least 2 responses per prompt"
    with pytest.raises(UserError, match=rule) as info:
        validate_config(data)
    assert info.value.field == "batch.samples_per_prompt"
    with pytest.raises(UserError, match=rule):
        run_point(unchecked.model_dump(mode="json"), str(tmp_path / "staging"), "p", threads=1)
    assert not (tmp_path / "staging").exists()
    with pytest.raises(UserError, match=rule):
        point_for_seed(Point("p", "p", 0, unchecked, derive_plan(unchecked)), seed=1)
    assert validate_config({**data, "algorithm": {"name": "ppo"}}).batch.samples_per_prompt == 1  # its critic suffices
    with pytest.raises(UserError, match="unknown algorithm 'dpo'"):
        validate_config({"algorithm": {"name": "dpo"}})
