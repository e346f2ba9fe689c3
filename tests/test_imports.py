"""No import cycles inside `blockplan`, counting every import.

Every `import` statement in `src/blockplan` counts: at module level, inside functions (a lazy
import hides a two-way dependency, it does not remove it), under `if TYPE_CHECKING:`, and
`importlib.import_module("literal")`. Edges are between modules:

- `import a.b.c` and `from a.b.c import X` (X not a submodule) are an edge to `a.b.c`;
  `from a.b import c` where `a.b.c` is a submodule is an edge to `a.b.c`.
- A package `__init__.py` that imports its own submodules is the normal way to present a
  package's API: an edge from `pkg` (its `__init__`) to `pkg.sub`. `from pkg import X` (X not a
  submodule) is an edge to `pkg`, since it runs all of `pkg/__init__.py`; counted this way the
  re-exports make no cycle of their own (a submodule that imports its package's public names
  would close one, rightly: it works only by the order of the `__init__`'s imports).
- Importing `a.b.c` also runs `a/__init__` and `a/b/__init__`; those implicit parent-package
  imports are not edges (they would make every re-exporting `__init__` a cycle).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT_PACKAGE = "blockplan"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int


def module_files(src: Path = SRC, root: str = ROOT_PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module and package under `src/root`."""
    modules = {}
    for path in sorted((src / root).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute dotted name `node` imports from, resolving `from .x import y`."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if _is_package(path) else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _raw_imports(module: str, path: Path):
    """(absolute module, imported name or None, line) for every import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, path, node)
            for alias in node.names:
                yield base, alias.name, node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, None, node.lineno


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of dotted `name` that is one of our modules."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_edges(modules: dict[str, Path]) -> list[Edge]:
    """Every import edge between two of `modules` (see the module docstring)."""
    edges = []
    for module, path in modules.items():
        for base, name, line in _raw_imports(module, path):
            if base != ROOT_PACKAGE and not base.startswith(ROOT_PACKAGE + "."):
                continue
            target = _owner(base, modules)
            if name is not None and f"{base}.{name}" in modules:
                target = f"{base}.{name}"
            assert target is not None, f"{path}:{line}: no module for import of {base}"
            if target != module:
                edges.append(Edge(module, target, line))
    return edges


def find_cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One cycle (as its edges) per strongly connected component with more than one module."""
    graph = _graph(edges)
    return [_shortest_cycle(graph, component) for component in strongly_connected(edges)]


def _graph(edges: list[Edge]) -> dict[str, dict[str, Edge]]:
    graph: dict[str, dict[str, Edge]] = {}
    for edge in edges:
        graph.setdefault(edge.source, {}).setdefault(edge.target, edge)
        graph.setdefault(edge.target, {})
    return graph


def strongly_connected(edges: list[Edge]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    graph = _graph(edges)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def _shortest_cycle(graph: dict[str, dict[str, Edge]], component: set[str]) -> list[Edge]:
    """The shortest cycle through the component's first module, by breadth-first search."""
    start = min(component)
    previous: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child, edge in sorted(graph[node].items()):
                if child not in component or child in previous:
                    continue
                previous[child] = edge
                if child == start:
                    cycle = [edge]
                    while cycle[0].source != start:
                        cycle.insert(0, previous[cycle[0].source])
                    return cycle
                following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def describe(cycle: list[Edge], modules: dict[str, Path]) -> str:
    steps = [
        f"{edge.source} -> {edge.target} ({modules[edge.source].relative_to(SRC)}:{edge.line})"
        for edge in cycle
    ]
    return "\n    ".join(steps)


def test_no_import_cycles():
    modules = module_files()
    edges = import_edges(modules)
    components = strongly_connected(edges)
    if components:
        graph = _graph(edges)
        report = [
            f"{', '.join(sorted(component))}; for example:\n    "
            + describe(_shortest_cycle(graph, component), modules)
            for component in components
        ]
        pytest.fail(f"{len(components)} import cycle(s):\n  " + "\n  ".join(report))


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_finds_lazy_and_type_checking_cycles(tmp_path):
    _write(
        tmp_path,
        {
            "blockplan/__init__.py": "",
            "blockplan/a.py": "def f():\n    from blockplan import b\n",
            "blockplan/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
            ),
            "blockplan/c.py": "import blockplan.a\n",
        },
    )
    modules = module_files(tmp_path)
    cycles = find_cycles(import_edges(modules))
    assert [sorted(edge.source for edge in cycle) for cycle in cycles] == [
        ["blockplan.a", "blockplan.b"]
    ]


def test_package_edges(tmp_path):
    _write(
        tmp_path,
        {
            "blockplan/__init__.py": "",
            "blockplan/pkg/__init__.py": "from blockplan.pkg.one import One\nfrom .two import Two\n",
            "blockplan/pkg/one.py": "class One: ...\n",
            "blockplan/pkg/two.py": "from . import one\nclass Two: ...\n",
            "blockplan/user.py": "from blockplan.pkg import Two\nfrom blockplan.pkg import one\n",
        },
    )
    modules = module_files(tmp_path)
    edges = {(edge.source, edge.target) for edge in import_edges(modules)}
    assert edges == {
        ("blockplan.pkg", "blockplan.pkg.one"),
        ("blockplan.pkg", "blockplan.pkg.two"),
        ("blockplan.pkg.two", "blockplan.pkg.one"),
        ("blockplan.user", "blockplan.pkg"),
        ("blockplan.user", "blockplan.pkg.one"),
    }
    assert find_cycles(import_edges(modules)) == []
    # A submodule that takes its package's public names depends on the whole `__init__`.
    _write(tmp_path, {"blockplan/pkg/one.py": "def f():\n    from blockplan.pkg import Two\n"})
    assert [
        sorted(edge.source for edge in cycle) for cycle in find_cycles(import_edges(modules))
    ] == [["blockplan.pkg", "blockplan.pkg.one"]]
