"""No import circle between the package's modules (issue 36).

Every import statement a module executes counts — at the top or inside a function (a lazy import that dodges a
circle at load time is still one) — and imports under ``if TYPE_CHECKING:`` do not: Python never runs them, they
exist for the type checker.  Edges go to the module imported, or to the submodule when a name is one
(``from . import _x``).  Planted: two modules that import each other inside functions are found.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "nqf"


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _target(name: str, node: ast.ImportFrom, is_package: bool) -> str | None:
    if node.level == 0:
        return node.module
    base = name.split(".")[: None if is_package else -1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _executed_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements outside ``if TYPE_CHECKING:`` blocks."""
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(x) for stmt in node.body for x in ast.walk(stmt))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in typing_only]


def import_graph(root: Path) -> dict[str, set[str]]:
    """``module → modules it imports`` (within the package under ``root``)."""
    mods = _modules(root)
    top = root.name
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _executed_imports(tree):
            if isinstance(node, ast.ImportFrom):
                t = _target(name, node, path.name == "__init__.py")
                deps = [] if not t else [f"{t}.{a.name}" if f"{t}.{a.name}" in mods else t for a in node.names]
            else:
                deps = [a.name for a in node.names]
            graph[name].update(d for d in deps if d in mods and d != name and d.split(".")[0] == top)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_of_nqf_imports_itself_through_others():
    graph = import_graph(SRC)
    assert len(graph) > 100  # the package was read
    assert cycles(graph) == []


def test_planted_circle_through_function_level_imports_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_a.py").write_text("def f():\n    from ._b import g\n    return g\n")
    (pkg / "_b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._c import h\n\n"
                               "def g():\n    from . import _a\n    return _a\n")  # fmt: skip
    (pkg / "_c.py").write_text("from ._b import g\n")
    assert cycles(import_graph(pkg)) == [["pkg._a", "pkg._b"]]  # _b → _c is for the type checker only
