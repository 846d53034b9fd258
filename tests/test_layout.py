"""Structural guards on src/batchscale (DESIGN.md, "Shape of the system"): no two modules, and no two folders, import
each other, directly or around a cycle (a function-local import is still an import; only imports of torch or another
third-party package are exempt), the reading side (analysis, plan, report, ingest, export, systems) never reaches the
training side (train, policy, rollout, profile), directly or through another module, no source file over 500 lines,
and the C kernels build with -Wall -Werror.

The import graph is read from the source with `ast`; nothing here imports or runs batchscale. That the reading side
never imports torch is tests/test_reading_side.py's job.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "batchscale"
MAX_LINES = 500


@dataclass(frozen=True)
class Edge:
    """`source` imports `target` at `file`:`line` (the first such import in the file), by importing module
    `imported` (`target` itself, or a module in folder `target`)."""

    source: str
    target: str
    file: Path
    line: int
    imported: str


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Module name -> source file for every .py under root/package; a package is its __init__.py."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(tree: ast.Module, module: str, is_package: bool) -> list[tuple[str, int]]:
    """Every import anywhere in `tree` (module level, functions, `if TYPE_CHECKING`) as (dotted name, line), relative
    ones made absolute; `from p import n` gives p.n, which is module p.n if there is one, else p's name n."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `from ..x import y` in a.b.c is a.x's y
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            found += [(base if alias.name == "*" else f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` refers to: its longest dotted prefix that is a module of the package; None for torch and
    every other package outside it."""
    parts = name.split(".")
    return next((".".join(parts[:end]) for end in range(len(parts), 0, -1) if ".".join(parts[:end]) in modules), None)


def import_graph(root: Path, package: str) -> dict[str, dict[str, Edge]]:
    """source module -> {target module: Edge} between the modules of root/package. Importing a.b.c also runs a's and
    a.b's __init__, but those implicit edges are left out: a package's __init__ re-exporting its modules would
    otherwise look like a cycle with each of them."""
    modules = module_files(root, package)
    graph: dict[str, dict[str, Edge]] = {name: {} for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for imported, line in imported_modules(tree, name, path.name == "__init__.py"):
            target = resolve(imported, modules)
            if target is not None and target != name:
                edge = graph[name].get(target)
                if edge is None or line < edge.line:
                    graph[name][target] = Edge(name, target, path, line, target)
    return graph


def shortest_cycle(graph: dict[str, dict[str, Edge]], start: str) -> list[Edge] | None:
    """The edges of a shortest cycle from `start` back to itself (breadth-first), or None if it is on none."""
    came_by: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        for target, edge in sorted(graph[queue.popleft()].items()):
            if target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, came_by[path[0].source])
                return path
            if target not in came_by:
                came_by[target] = edge
                queue.append(target)
    return None


def find_cycles(graph: dict[str, dict[str, Edge]]) -> list[list[Edge]]:
    """A shortest cycle through each node that is on one, each cycle once (whichever node it was found from)."""
    cycles, seen = [], set()
    for node in sorted(graph):
        cycle = shortest_cycle(graph, node)
        key = cycle and frozenset((e.source, e.target) for e in cycle)
        if cycle and key not in seen:
            seen.add(key)
            cycles.append(cycle)
    return cycles


def describe(cycle: list[Edge], root: Path) -> str:
    """`a -> b -> a` and, under it, where each edge is: `file:line imports module`."""
    path = " -> ".join([e.source for e in cycle] + [cycle[0].source])
    return "\n".join([path] + [f"    {e.file.relative_to(root)}:{e.line} imports {e.imported}" for e in cycle])


def test_no_import_cycle_between_modules():
    cycles = find_cycles(import_graph(SRC, PACKAGE))
    if cycles:
        pytest.fail(f"{len(cycles)} import cycle(s):\n" + "\n".join(describe(c, SRC) for c in cycles))


def folder_graph(graph: dict[str, dict[str, Edge]]) -> dict[str, dict[str, Edge]]:
    """The import graph between the folders of the package: a module of a.x... belongs to folder a.x; a module
    directly under the package is a node of its own. Each folder edge is its first module edge by file and line."""
    def folder(module: str) -> str:
        return ".".join(module.split(".")[:2])

    folders: dict[str, dict[str, Edge]] = {folder(m): {} for m in graph}
    for edge in sorted((e for edges in graph.values() for e in edges.values()), key=lambda e: (e.file, e.line)):
        source, target = folder(edge.source), folder(edge.target)
        if source != target and target not in folders[source]:
            folders[source][target] = Edge(source, target, edge.file, edge.line, edge.target)
    return folders


def test_no_import_cycle_between_folders():
    """An upper folder may import a lower one, never the reverse: the folders' graph has no cycle either."""
    cycles = find_cycles(folder_graph(import_graph(SRC, PACKAGE)))
    if cycles:
        pytest.fail(f"{len(cycles)} import cycle(s) between folders:\n" + "\n".join(describe(c, SRC) for c in cycles))


READING_SIDE = ("analysis", "plan", "report", "ingest", "export", "systems")
TRAINING_SIDE = ("train", "policy", "rollout", "profile")


def reaching_paths(graph: dict[str, dict[str, Edge]], sources: tuple[str, ...],
                   targets: tuple[str, ...]) -> list[list[Edge]]:
    """For each module in a `sources` folder that reaches a module in a `targets` folder through the import graph
    (function-local imports included), a shortest chain of imports to the first such module (breadth-first). A
    folder's modules are its package and every module under it; modules directly under the package are in none."""
    folders = {m.split(".")[1] for m in graph if m.count(".") >= 2}

    def folder(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in folders else None

    found = []
    for start in sorted(m for m in graph if folder(m) in sources):
        came_by: dict[str, Edge] = {}
        queue = deque([start])
        while queue:
            module = queue.popleft()
            if folder(module) in targets:
                path = [came_by[module]]
                while path[0].source != start:
                    path.insert(0, came_by[path[0].source])
                found.append(path)
                break
            for target, edge in sorted(graph[module].items()):
                if target not in came_by and target != start:
                    came_by[target] = edge
                    queue.append(target)
    return found


def test_the_reading_side_never_reaches_the_training_side():
    """analysis, plan, report, ingest, export and systems read run directories and profiles: a user analyses a verl
    run without the model stack, so none of their modules may reach train, policy, rollout or profile."""
    paths = reaching_paths(import_graph(SRC, PACKAGE), READING_SIDE, TRAINING_SIDE)
    if paths:
        pytest.fail(f"{len(paths)} reading-side module(s) reach the training side:\n"
                    + "\n".join(describe_path(p, SRC) for p in paths))


def describe_path(path: list[Edge], root: Path) -> str:
    """`a -> b -> c` and, under it, where each import is."""
    return "\n".join([" -> ".join([e.source for e in path] + [path[-1].target])]
                     + [f"    {e.file.relative_to(root)}:{e.line} imports {e.imported}" for e in path])


def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_cycle_finder_sees_a_function_local_import_close_a_cycle(tmp_path):
    write_package(tmp_path, {"pkg/__init__.py": "from pkg.a import f\n", "pkg/a.py": "import torch\nimport pkg.b\n",
                             "pkg/b.py": "def g():\n    from pkg import a\n    return a\n",
                             "pkg/sub/__init__.py": "", "pkg/sub/c.py": "from ..b import g\nfrom . import d\n",
                             "pkg/sub/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                             "    from pkg.sub.c import x\n"})
    described = [describe(c, tmp_path) for c in find_cycles(import_graph(tmp_path, "pkg"))]
    assert described == ["pkg.a -> pkg.b -> pkg.a\n    pkg/a.py:2 imports pkg.b\n    pkg/b.py:2 imports pkg.a",
                         "pkg.sub.c -> pkg.sub.d -> pkg.sub.c\n    pkg/sub/c.py:2 imports pkg.sub.d\n"
                         "    pkg/sub/d.py:3 imports pkg.sub.c"]


def test_the_cycle_finder_reports_none_for_a_package_without_one(tmp_path):
    write_package(tmp_path, {"pkg/__init__.py": "from pkg.a import f\nfrom pkg.b import g\n",
                             "pkg/a.py": "import numpy\nfrom pkg.b import g\n",
                             "pkg/b.py": "def g():\n    import torch\n    from pkg.sub.c import VERSION\n",
                             "pkg/sub/__init__.py": "", "pkg/sub/c.py": "VERSION = 1\n"})
    graph = import_graph(tmp_path, "pkg")
    assert {s: sorted(t) for s, t in graph.items()} == {"pkg": ["pkg.a", "pkg.b"], "pkg.a": ["pkg.b"],
                                                        "pkg.b": ["pkg.sub.c"], "pkg.sub": [], "pkg.sub.c": []}
    assert find_cycles(graph) == []  # pkg.a and pkg.b run pkg's __init__ too, but that is no edge back to it


def test_the_folder_graph_sees_a_cycle_the_modules_do_not_have(tmp_path):
    write_package(tmp_path, {"pkg/__init__.py": "", "pkg/x/__init__.py": "", "pkg/x/a.py": "import pkg.y.b\n",
                             "pkg/x/d.py": "", "pkg/y/__init__.py": "", "pkg/y/b.py": "",
                             "pkg/y/c.py": "def f():\n    from pkg.x.d import g\n"})
    graph = import_graph(tmp_path, "pkg")
    assert find_cycles(graph) == []
    assert [describe(c, tmp_path) for c in find_cycles(folder_graph(graph))] == [
        "pkg.x -> pkg.y -> pkg.x\n    pkg/x/a.py:1 imports pkg.y.b\n    pkg/y/c.py:2 imports pkg.x.d"]


def test_the_reach_rule_follows_imports_through_other_folders(tmp_path):
    """plan reaches train through a function-local import in config (a top-level module); systems imports only
    errors; a module of train importing plan is the allowed direction."""
    write_package(tmp_path, {"pkg/__init__.py": "", "pkg/config.py": "def f():\n    import pkg.train.loop\n",
                             "pkg/errors.py": "", "pkg/plan/__init__.py": "", "pkg/plan/make.py": "import pkg.config\n",
                             "pkg/systems/__init__.py": "", "pkg/systems/knee.py": "from pkg import errors\n",
                             "pkg/train/__init__.py": "", "pkg/train/loop.py": "import pkg.plan.make\n"})
    paths = reaching_paths(import_graph(tmp_path, "pkg"), ("plan", "systems"), ("train",))
    assert [describe_path(p, tmp_path) for p in paths] == [
        "pkg.plan.make -> pkg.config -> pkg.train.loop\n    pkg/plan/make.py:1 imports pkg.config\n"
        "    pkg/config.py:2 imports pkg.train.loop"]


def test_no_source_file_over_500_lines():
    files = sorted(p for p in (SRC / PACKAGE).rglob("*") if p.suffix in (".py", ".c"))
    counts = {p.relative_to(SRC): len(p.read_text().splitlines()) for p in files}
    over = {str(p): n for p, n in counts.items() if n > MAX_LINES}
    assert len(files) > 50 and not over, f"over {MAX_LINES} lines: {over}"


def native_build_tables() -> tuple[tuple[str, ...], dict[str, tuple]]:
    """COMMON_FLAGS and KERNELS of rollout/native.py, read from its source (importing it would load torch)."""
    tree = ast.parse((SRC / PACKAGE / "rollout" / "native.py").read_text())
    values = {node.targets[0].id: node.value for node in tree.body
              if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
    return ast.literal_eval(values["COMMON_FLAGS"]), ast.literal_eval(values["KERNELS"])


COMMON_FLAGS, KERNELS = native_build_tables()


@pytest.mark.parametrize("path", sorted(KERNELS))
def test_c_kernels_build_with_warnings_as_errors(path, tmp_path):
    """Each kernel library, built as native.py builds it plus -Wall -Werror. f32_linear.c is in both libraries, at 8
    lanes or (under -mavx512f, which defines __AVX512F__) 16. Compiling needs no AVX-512 CPU; only running does."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (set CC, or install gcc)")
    sources, _, isa = KERNELS[path]
    kernels = SRC / PACKAGE / "rollout" / "kernels"
    command = [compiler, *COMMON_FLAGS, *isa, "-Wall", "-Werror", *(str(kernels / s) for s in sources),
               "-o", str(tmp_path / f"{path}.so"), "-lm"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)}\n{done.stderr[-3000:]}")
