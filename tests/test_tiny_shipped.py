"""The warm-started tiny model shipped with the package (policy/shipped/): it is the current recipe's, a fresh cache
gets it without training, a copy that fails its sha256 check is not used, and BATCHSCALE_TINY_BUILD=1 or another task
builds from the recipe."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from batchscale.config import TaskConfig
from batchscale.errors import UserError
from batchscale.policy import shipped, tiny

REGENERATE = "python -m batchscale.policy.tiny --ship"
NAME = f"tiny-{tiny.content_hash(tiny.DEFAULT_TASK_FIELDS)}"


def test_the_default_task_fields_are_the_task_configs_defaults():
    assert tiny.task_fields_of(TaskConfig()) == tiny.DEFAULT_TASK_FIELDS
    data = TaskConfig.model_construct(name="data", digits=5)  # a task of rows: the tiny model of the default task
    assert tiny.task_fields_of(data) == tiny.DEFAULT_TASK_FIELDS


def test_the_shipped_copy_is_the_current_recipes():
    """Changing TINY_ARCHITECTURE, WARM_START, the vocabulary or the default task changes the content hash; the
    shipped copy must then be regenerated, or every fresh install would build from the recipe again."""
    names = sorted(p.name for p in shipped.SHIPPED_ROOT.glob("tiny-*"))
    assert names == [NAME], (f"the package ships {names}, the current recipe's model is {NAME}: regenerate it with "
                             f"`{REGENERATE}` and commit src/batchscale/policy/shipped/")
    path = shipped.SHIPPED_ROOT / NAME
    assert shipped.problem(path) is None, f"{shipped.problem(path)}: regenerate it with `{REGENERATE}`"
    record, warm = shipped.read_record(path), tiny.read_warm_start(path)
    assert record["content_hash"] == NAME.removeprefix("tiny-")
    assert warm["recipe"] == json.loads(json.dumps(tiny.WARM_START)), f"another recipe: regenerate with `{REGENERATE}`"
    assert warm["task"] == tiny.DEFAULT_TASK_FIELDS and record["accuracy"] == warm["accuracy"]
    assert record["built_on"]["cpu_flags"] and record["built_on"]["torch"] and record["built_at"]
    config = json.loads((path / "config.json").read_text())
    assert config["dtype"] == "float32"  # the RL sweep starts from these exact weights
    assert {k: config[k] for k in tiny.TINY_ARCHITECTURE} == tiny.TINY_ARCHITECTURE


def test_pyproject_ships_it_as_package_data():
    """`pip install .` (not editable) copies only what package-data names."""
    root = Path(__file__).resolve().parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package_dir = root / "src" / "batchscale" / "policy"
    matched = {p for pattern in data["batchscale.policy"] for p in package_dir.glob(pattern)}
    wanted = {shipped.SHIPPED_ROOT / NAME / name for name in (*shipped.FILES, shipped.RECORD)}
    assert wanted <= matched


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHSCALE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(shipped.REBUILD_ENV, raising=False)
    return tmp_path / "cache" / "models"


def stub_recipe(monkeypatch) -> list[dict]:
    """Replace the build from the recipe by one that writes a config.json; returns the task fields of each build."""
    builds = []

    def recipe_build(task_fields, log=print):
        def build(staging: Path) -> None:
            builds.append(task_fields)
            (staging / "config.json").write_text("{}")
            (staging / "warm_start.json").write_text(json.dumps({"stub": True}))

        return build

    monkeypatch.setattr(tiny, "recipe_build", recipe_build)
    return builds


def test_an_empty_cache_gets_the_shipped_copy_without_training(empty_cache, monkeypatch):
    """Asserted: no training step, the cached files are the shipped ones, and the loaded model's greedy accuracy on
    this CPU is the recorded one to within 0.02 (1/50 of the eval set: another CPU's GEMMs round differently and may
    flip an answer or two), inside the recipe's band widened by as much."""
    from batchscale.tasks.arithmetic import ArithmeticTask

    monkeypatch.setattr(tiny, "warm_start", lambda *a, **k: pytest.fail("the shipped copy needs no warm start"))
    lines = []
    path = tiny.build_tiny(TaskConfig(), log=lines.append)
    assert path == empty_cache / NAME and len(lines) == 1
    assert lines[0].startswith("tiny model: using the warm-started copy shipped with batchscale (built on ")
    assert "greedy accuracy 0.344" in lines[0] and "`BATCHSCALE_TINY_BUILD=1` rebuilds it from the recipe" in lines[0]
    for name in shipped.FILES:
        assert (path / name).read_bytes() == (shipped.SHIPPED_ROOT / NAME / name).read_bytes()
    assert tiny.build_tiny(TaskConfig(), log=lines.append) == path and len(lines) == 1  # cached: nothing said

    record = tiny.read_warm_start(path)
    model, tokenizer = tiny.load_pretrained_dir(path)
    accuracy = tiny.greedy_accuracy(model, tokenizer, ArithmeticTask(), tiny.WARM_START["max_new_tokens"])
    low, high = tiny.WARM_START["accuracy_band"]
    assert accuracy == pytest.approx(record["accuracy"], abs=0.02)
    assert low - 0.02 <= accuracy <= high + 0.02


def copy_of_the_shipped(tmp_path, monkeypatch) -> Path:
    """The package's shipped folder copied to tmp_path, and build_tiny pointed at the copy."""
    root = tmp_path / "shipped"
    shutil.copytree(shipped.SHIPPED_ROOT / NAME, root / NAME)
    monkeypatch.setattr(shipped, "SHIPPED_ROOT", root)
    return root / NAME


def test_a_copy_that_fails_its_sha256_check_is_not_used(empty_cache, tmp_path, monkeypatch):
    copy = copy_of_the_shipped(tmp_path, monkeypatch)
    with open(copy / "model.safetensors", "r+b") as f:  # one flipped byte near the end, among the weights
        f.seek(-5, 2)
        byte = f.read(1)
        f.seek(-5, 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert "model.safetensors does not match the sha256 in SHIPPED.json" in shipped.problem(copy)
    builds, lines = stub_recipe(monkeypatch), []
    path = tiny.build_tiny(TaskConfig(), log=lines.append)
    assert builds == [tiny.DEFAULT_TASK_FIELDS] and not (path / shipped.RECORD).exists()
    assert lines[0].startswith("warning: the tiny model shipped with batchscale fails its check (")
    assert "building it from the recipe" in lines[0] and lines[1].startswith("building the tiny model (warm start")


def test_a_copy_missing_a_file_or_its_record_is_not_used(tmp_path, monkeypatch):
    copy = copy_of_the_shipped(tmp_path, monkeypatch)
    (copy / "tokenizer.json").unlink()
    assert shipped.problem(copy).endswith("tokenizer.json is missing")
    (copy / shipped.RECORD).write_text("{not json")
    assert "SHIPPED.json is unreadable" in shipped.problem(copy)


def test_rebuild_env_builds_from_the_recipe_and_replaces_a_cached_shipped_copy(empty_cache, monkeypatch):
    monkeypatch.setattr(tiny, "warm_start", lambda *a, **k: pytest.fail("the shipped copy needs no warm start"))
    tiny.build_tiny(TaskConfig(), log=lambda s: None)  # the cache now holds the shipped copy
    assert (empty_cache / NAME / shipped.RECORD).is_file()
    builds = stub_recipe(monkeypatch)
    monkeypatch.setenv(shipped.REBUILD_ENV, "1")
    path = tiny.build_tiny(TaskConfig(), log=lambda s: None)
    assert builds == [tiny.DEFAULT_TASK_FIELDS] and tiny.read_warm_start(path) == {"stub": True}
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "warm_start.json"]  # replaced whole
    tiny.build_tiny(TaskConfig(), log=lambda s: None)
    assert len(builds) == 1  # a model built by the recipe is kept
    assert [p.name for p in empty_cache.iterdir() if p.name.startswith(f".{NAME}.")] == [f".{NAME}.lock"]


def test_rebuild_env_on_an_empty_cache_builds_from_the_recipe(empty_cache, monkeypatch):
    builds = stub_recipe(monkeypatch)
    monkeypatch.setenv(shipped.REBUILD_ENV, "1")
    tiny.build_tiny(TaskConfig(), log=lambda s: None)
    assert builds == [tiny.DEFAULT_TASK_FIELDS]


def test_another_task_is_built_from_the_recipe(empty_cache, monkeypatch):
    builds = stub_recipe(monkeypatch)
    path = tiny.build_tiny(TaskConfig(digits=3), log=lambda s: None)
    assert builds == [{**tiny.DEFAULT_TASK_FIELDS, "digits": 3}] and path.name != NAME


def test_ship_regenerates_the_copy_from_a_build_and_removes_the_old_one(tmp_path, monkeypatch):
    root = tmp_path / "shipped"
    (root / "tiny-0123456789abcdef").mkdir(parents=True)  # an earlier recipe's copy
    monkeypatch.setenv("BATCHSCALE_CACHE", str(tmp_path / "never-used"))  # the build uses a temporary cache

    def recipe_build(task_fields, log=print):  # the files of a real build, taken from the shipped copy
        def build(staging: Path) -> None:
            for name in shipped.FILES:
                shutil.copyfile(shipped.SHIPPED_ROOT / NAME / name, staging / name)

        return build

    monkeypatch.setattr(tiny, "recipe_build", recipe_build)
    out = tiny.regenerate_shipped(root=root, log=lambda s: None)
    assert out == root / NAME and [p.name for p in root.iterdir()] == [NAME]
    assert shipped.problem(out) is None and not (tmp_path / "never-used").exists()
    record = shipped.read_record(out)
    assert record["content_hash"] == NAME.removeprefix("tiny-") and record["accuracy"] == 0.34375
    assert shipped.describe(record).startswith("built on ")


def test_ship_from_a_directory_refuses_another_recipes_build(tmp_path):
    other = tmp_path / "other"
    shutil.copytree(shipped.SHIPPED_ROOT / NAME, other)
    warm = tiny.read_warm_start(other)
    (other / "warm_start.json").write_text(json.dumps({**warm, "recipe": {**warm["recipe"], "lr": 0.5}}))
    with pytest.raises(UserError, match="was not built by the current recipe"):
        tiny.regenerate_shipped(other, root=tmp_path / "shipped")
    assert not (tmp_path / "shipped").exists()
    out = tiny.regenerate_shipped(shipped.SHIPPED_ROOT / NAME, root=tmp_path / "shipped")  # the current recipe's
    assert out == tmp_path / "shipped" / NAME and shipped.problem(out) is None
