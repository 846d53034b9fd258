"""The warm-started tiny model the package ships (policy/shipped/, pinned in git with its sha256s): a fresh cache
gets a shipped copy without training, a copy that fails its sha256 check is not used, BATCHSCALE_TINY_BUILD=1 or
another task builds from the recipe, and `--ship` regenerates the copy. The mechanism is tested on a copy made here;
the tests of the real copy check the one git holds."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path, PurePosixPath

import pytest

from batchscale.config import TaskConfig
from batchscale.errors import UserError
from batchscale.policy import shipped, tiny

REGENERATE = "python -m batchscale.policy.tiny --ship"
NAME = f"tiny-{tiny.content_hash(tiny.DEFAULT_TASK_FIELDS)}"
ROOT = Path(__file__).resolve().parents[1]

ships_a_copy = pytest.mark.skipif(not any(shipped.SHIPPED_ROOT.glob("tiny-*")),
                                  reason=f"this tree ships no tiny model (git holds none; `{REGENERATE}` makes one)")
ships_the_current_copy = pytest.mark.skipif(shipped.shipped_dir(NAME) is None,
                                            reason=f"this tree ships no {NAME} (`{REGENERATE}` makes it)")


def fake_build(path: Path, accuracy: float = 0.3125) -> Path:
    """A directory with the files of a built tiny model, the current recipe's warm_start.json, arbitrary weights."""
    path.mkdir(parents=True)
    for name in shipped.FILES:
        (path / name).write_text(json.dumps({"file": name}))
    (path / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    record = {"recipe": tiny.WARM_START, "task": tiny.DEFAULT_TASK_FIELDS, "steps": 990, "learned_at": 980,
              "accuracy": accuracy, "final_loss": 1.7, "checks": [[980, 0.61], [990, accuracy]]}
    (path / "warm_start.json").write_text(json.dumps(record))
    return path


@pytest.fixture
def shipped_copy(tmp_path, monkeypatch) -> Path:
    """A copy shipped by `ship` into a package folder of its own, and build_tiny pointed at that folder."""
    root = tmp_path / "shipped"
    monkeypatch.setattr(shipped, "SHIPPED_ROOT", root)
    return shipped.ship(fake_build(tmp_path / "built"), NAME)


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


def test_the_default_task_fields_are_the_task_configs_defaults():
    assert tiny.task_fields_of(TaskConfig()) == tiny.DEFAULT_TASK_FIELDS
    data = TaskConfig.model_construct(name="data", digits=5)  # a task of rows: the tiny model of the default task
    assert tiny.task_fields_of(data) == tiny.DEFAULT_TASK_FIELDS


def test_git_pins_the_shipped_copy_and_pyproject_ships_it_as_package_data():
    """Git holds the default task's copy (so that every clone and CPU starts from the same weights, issue 38), and a
    wheel ships it: `pip install .` (not editable) copies only what package-data names."""
    import subprocess

    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "/src/batchscale/policy/shipped/" not in ignored
    if (ROOT / ".git").exists():
        tracked = subprocess.run(["git", "ls-files", "src/batchscale/policy/shipped"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.split()
        assert sorted(PurePosixPath(t).name for t in tracked) == sorted((*shipped.FILES, shipped.RECORD))
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for name in (*shipped.FILES, shipped.RECORD):
        path = PurePosixPath("shipped", NAME, name)
        assert any(path.match(pattern) for pattern in data["batchscale.policy"]), path


def test_an_empty_cache_gets_the_shipped_copy_without_training(empty_cache, shipped_copy, monkeypatch):
    monkeypatch.setattr(tiny, "warm_start", lambda *a, **k: pytest.fail("the shipped copy needs no warm start"))
    lines = []
    path = tiny.build_tiny(TaskConfig(), log=lines.append)
    assert path == empty_cache / NAME and len(lines) == 1
    assert lines[0].startswith("tiny model: using the warm-started copy shipped with batchscale (built on ")
    assert "greedy accuracy 0.312" in lines[0] and "`BATCHSCALE_TINY_BUILD=1` rebuilds it from the recipe" in lines[0]
    for name in (*shipped.FILES, shipped.RECORD):
        assert (path / name).read_bytes() == (shipped_copy / name).read_bytes()
    assert tiny.build_tiny(TaskConfig(), log=lines.append) == path and len(lines) == 1  # cached: nothing said


def test_a_copy_that_fails_its_sha256_check_is_not_used(empty_cache, shipped_copy, monkeypatch):
    with open(shipped_copy / "model.safetensors", "r+b") as f:  # one flipped byte near the end, among the weights
        f.seek(-5, 2)
        byte = f.read(1)
        f.seek(-5, 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert "model.safetensors does not match the sha256 in SHIPPED.json" in shipped.problem(shipped_copy)
    builds, lines = stub_recipe(monkeypatch), []
    path = tiny.build_tiny(TaskConfig(), log=lines.append)
    assert builds == [tiny.DEFAULT_TASK_FIELDS] and not (path / shipped.RECORD).exists()
    assert lines[0].startswith("warning: the tiny model shipped with batchscale fails its check (")
    assert "building it from the recipe" in lines[0] and lines[1].startswith("building the tiny model (warm start")


def test_a_copy_missing_a_file_or_its_record_is_not_used(shipped_copy):
    assert shipped.problem(shipped_copy) is None
    (shipped_copy / "tokenizer.json").unlink()
    assert shipped.problem(shipped_copy).endswith("tokenizer.json is missing")
    (shipped_copy / shipped.RECORD).write_text("{not json")
    assert "SHIPPED.json is unreadable" in shipped.problem(shipped_copy)


def test_without_a_shipped_copy_the_default_task_is_built_from_the_recipe(empty_cache, tmp_path, monkeypatch):
    """A git clone: no shipped folder at all."""
    monkeypatch.setattr(shipped, "SHIPPED_ROOT", tmp_path / "absent")
    builds, lines = stub_recipe(monkeypatch), []
    path = tiny.build_tiny(TaskConfig(), log=lines.append)
    assert builds == [tiny.DEFAULT_TASK_FIELDS] and path == empty_cache / NAME
    assert lines[0].startswith("building the tiny model (warm start") and not any("warning" in s for s in lines)


def test_rebuild_env_builds_from_the_recipe_and_replaces_a_cached_shipped_copy(empty_cache, shipped_copy, monkeypatch):
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


def test_another_task_is_built_from_the_recipe(empty_cache, shipped_copy, monkeypatch):
    builds = stub_recipe(monkeypatch)
    path = tiny.build_tiny(TaskConfig(digits=3), log=lambda s: None)
    assert builds == [{**tiny.DEFAULT_TASK_FIELDS, "digits": 3}] and path.name != NAME


def test_ship_regenerates_the_copy_from_a_build_and_removes_the_old_one(tmp_path, monkeypatch):
    root = tmp_path / "shipped"
    (root / "tiny-0123456789abcdef").mkdir(parents=True)  # an earlier recipe's copy
    monkeypatch.setenv("BATCHSCALE_CACHE", str(tmp_path / "never-used"))  # the build uses a temporary cache
    built = fake_build(tmp_path / "built", accuracy=0.34375)

    def recipe_build(task_fields, log=print):  # the files of a real build
        def build(staging: Path) -> None:
            for name in shipped.FILES:
                shutil.copyfile(built / name, staging / name)

        return build

    monkeypatch.setattr(tiny, "recipe_build", recipe_build)
    out = tiny.regenerate_shipped(root=root, log=lambda s: None)
    assert out == root / NAME and [p.name for p in root.iterdir()] == [NAME]
    assert shipped.problem(out) is None and not (tmp_path / "never-used").exists()
    record = shipped.read_record(out)
    assert record["content_hash"] == NAME.removeprefix("tiny-") and record["accuracy"] == 0.34375
    assert record["built_on"]["cpu_flags"] and record["built_on"]["torch"] and record["built_at"]
    assert shipped.describe(record).startswith("built on ")


def test_ship_from_a_directory_refuses_another_recipes_build(tmp_path):
    other = fake_build(tmp_path / "other")
    warm = tiny.read_warm_start(other)
    (other / "warm_start.json").write_text(json.dumps({**warm, "recipe": {**warm["recipe"], "lr": 0.5}}))
    with pytest.raises(UserError, match="was not built by the current recipe"):
        tiny.regenerate_shipped(other, root=tmp_path / "shipped")
    assert not (tmp_path / "shipped").exists()
    out = tiny.regenerate_shipped(fake_build(tmp_path / "current"), root=tmp_path / "shipped")
    assert out == tmp_path / "shipped" / NAME and shipped.problem(out) is None


@ships_a_copy
def test_the_real_shipped_copy_is_the_current_recipes():
    """Changing TINY_ARCHITECTURE, WARM_START, the vocabulary or the default task changes the content hash; a tree
    that ships a copy must then regenerate it, or installs from it would build from the recipe again."""
    names = sorted(p.name for p in shipped.SHIPPED_ROOT.glob("tiny-*"))
    assert names == [NAME], f"this tree ships {names}, the current recipe's model is {NAME}: run `{REGENERATE}`"
    path = shipped.SHIPPED_ROOT / NAME
    assert shipped.problem(path) is None, f"{shipped.problem(path)}: regenerate it with `{REGENERATE}`"
    record, warm = shipped.read_record(path), tiny.read_warm_start(path)
    assert record["content_hash"] == NAME.removeprefix("tiny-")
    assert warm["recipe"] == json.loads(json.dumps(tiny.WARM_START)), f"another recipe: regenerate with `{REGENERATE}`"
    assert warm["task"] == tiny.DEFAULT_TASK_FIELDS and record["accuracy"] == warm["accuracy"]
    config = json.loads((path / "config.json").read_text())
    assert config["dtype"] == "float32"  # the RL sweep starts from these exact weights
    assert {k: config[k] for k in tiny.TINY_ARCHITECTURE} == tiny.TINY_ARCHITECTURE


@ships_the_current_copy
def test_the_real_shipped_copy_has_its_recorded_accuracy_here(empty_cache):
    """The loaded model's greedy accuracy on this CPU is the recorded one to within 0.02 (1/50 of the eval set:
    another CPU's GEMMs round differently and may flip an answer or two), inside the band widened by as much."""
    from batchscale.tasks.arithmetic import ArithmeticTask

    path = tiny.build_tiny(TaskConfig(), log=lambda s: None)
    record = tiny.read_warm_start(path)
    model, tokenizer = tiny.load_pretrained_dir(path)
    accuracy = tiny.greedy_accuracy(model, tokenizer, ArithmeticTask(), tiny.WARM_START["max_new_tokens"])
    low, high = tiny.WARM_START["accuracy_band"]
    assert accuracy == pytest.approx(record["accuracy"], abs=0.02)
    assert low - 0.02 <= accuracy <= high + 0.02
