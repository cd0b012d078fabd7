"""The package stands alone and starts fast (issue 10, deliverables 6 and 7).

Import-cost checks run in fresh interpreters (``subprocess``): this test process has torch loaded
already.  Each check reads ``sys.modules`` after the action, so it fails as soon as someone adds an
eager import of a heavy dependency.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import nqf

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "nqf"
HEAVY = ("torch", "scipy", "matplotlib", "pandas", "sklearn")


def _modules_after(code: str) -> set[str]:
    """Run ``code`` in a fresh interpreter; return the top-level names of the modules it loaded."""
    probe = (
        f"{code}\nimport json, sys\n"
        "print('\\n' + json.dumps(sorted({m.split('.')[0] for m in sys.modules} | set(sys.modules))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _cli(*args: str) -> str:
    """``nqf ARGS`` through the CLI object, in-process of a fresh interpreter; returns the code to run."""
    return (
        "import sys\nfrom nqf.app._cli import app\nsys.argv = ['nqf', " + ", ".join(repr(a) for a in args) + "]\n"
        "try:\n    app()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
    )


# --------------------------------------------------------------------------- fast start
def test_import_nqf_is_light():
    loaded = _modules_after("import nqf")
    assert "matplotlib" not in loaded and "scipy.stats" not in loaded  # the acceptance line
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    assert "nqf.dynamics" not in loaded and "nqf.structure" not in loaded


def test_import_check_can_fail():
    """The probe sees a heavy import when there is one (touching a lazy name loads torch)."""
    assert "torch" in _modules_after("import nqf\nnqf.simulate")


def test_version_does_not_import_heavy_dependencies():
    loaded = _modules_after(_cli("--version"))
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_list_does_not_import_heavy_dependencies():
    loaded = _modules_after(_cli("list"))
    assert not loaded & {"torch", "scipy", "matplotlib"}, sorted(loaded & {"torch", "scipy", "matplotlib"})


def test_experiment_names_and_descriptions_without_importing_the_experiments():
    """The catalogue lists the built-in experiments (and ``REGISTRY`` their names) without importing any;
    looking one up imports its module, and with it torch (the probe can fail)."""
    listing = (
        "import nqf.app._experiments as catalog\nassert len(catalog.describe()) == len(catalog.CATALOG)\n"
        "assert 'demo' in catalog.REGISTRY and sorted(catalog.REGISTRY)\n"
    )
    loaded = _modules_after(listing)
    catalog = importlib.import_module("nqf.app._experiments")
    experiments = {entry.qualified_module for entry in catalog.CATALOG.values()}
    assert not loaded & (set(HEAVY) | experiments | {"nqf.app._experiments._base", "nqf.app._experiments._runner"})
    loaded = _modules_after(listing + "catalog.get_experiment('lv-staircase')\n")
    assert {"torch", "nqf.app._experiments._lv_staircase"} <= loaded and "nqf.app._experiments._demo" not in loaded


def test_python_dash_m_runs_the_cli():
    out = subprocess.run(
        [sys.executable, "-m", "nqf", "--version"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"nqf {nqf.__version__}"
    bad = subprocess.run(
        [sys.executable, "-m", "nqf", "no-such-command"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert bad.returncode == 2


# --------------------------------------------------------------------------- lazy namespace
def _packages_with_names() -> list[str]:
    """Every package of nqf whose ``__init__`` exports names: all of them are lazy doors."""
    out = []
    for init in sorted(SRC.rglob("__init__.py")):
        rel = init.parent.relative_to(SRC.parent)
        if (init.parent / "__init__.pyi").exists() or "__all__" in init.read_text():
            out.append(".".join(rel.parts))
    return out


#: The doors whose names load on first use; each declares its names once, in its ``__init__.pyi``: every door
#: (one mechanism), the library's and the application's parts alike.
LAZY_DOORS = tuple(_packages_with_names())


def test_every_door_is_lazy_and_declares_its_names_in_a_stub():
    """No door writes its names twice (an import and an ``__all__`` entry): each has an ``__init__.pyi``."""
    assert {"nqf", "nqf.structure", "nqf.dynamics", "nqf.curves", "nqf.app", "nqf.app._sweep"} <= set(LAZY_DOORS)
    assert all((SRC.parent / d.replace(".", "/") / "__init__.pyi").exists() for d in LAZY_DOORS)


def stub_names(source: str) -> dict[str, str]:
    """``{name: module it comes from}`` of a door's stub (``"."``: a subpackage); a name declared twice raises."""
    import ast

    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                name = alias.asname or alias.name
                if name in found:
                    raise AssertionError(f"{name!r} is declared twice")
                found[name] = node.module or "."
    return found


def _stub(door: str) -> dict[str, str]:
    return stub_names((SRC.parent / door.replace(".", "/") / "__init__.pyi").read_text())


@pytest.mark.parametrize("door", LAZY_DOORS)
def test_each_public_name_is_written_once_in_the_door_stub(door):
    """``__all__`` is what the stub declares (lazy_loader reads it); the door's ``__init__.py`` lists no names."""
    mod = importlib.import_module(door)
    extra = {"__version__"} if door == "nqf" else set()
    assert sorted(mod.__all__) == sorted(set(_stub(door)) | extra) and len(mod.__all__) == len(set(mod.__all__))
    assert set(mod.__all__) <= set(dir(mod))
    init = (SRC.parent / door.replace(".", "/") / "__init__.py").read_text()
    assert "attach_stub(__name__, __file__)" in init
    assert not re.search(r"^\s+\"[A-Za-z_]+\",?$", init, re.M), "a list of names in __init__.py"


def test_a_name_declared_twice_in_a_stub_is_found():
    with pytest.raises(AssertionError, match="'analyze' is declared twice"):
        stub_names("from ._pipeline import analyze as analyze\nfrom ._other import analyze as analyze\n")


@pytest.mark.parametrize("door", LAZY_DOORS)
def test_every_exported_name_resolves(door):
    mod = importlib.import_module(door)
    for name, source in _stub(door).items():
        value = getattr(mod, name)
        assert value is getattr(mod, name)  # cached after the first look-up
        if source == ".":
            assert value is importlib.import_module(f"{door}.{name}")
        else:
            assert value is getattr(importlib.import_module(f"{door}.{source}"), name)


def test_known_names():
    assert isinstance(nqf.__version__, str) and nqf.__version__
    assert nqf.simulate is nqf.dynamics.simulate
    assert nqf.Trajectory is nqf.dynamics.Trajectory
    assert nqf.two_layer_modes is nqf.reductions.svd_modes.two_layer_modes
    assert nqf.predict is nqf.reductions.predict and nqf.Staircase is nqf.reductions.Staircase
    for short in ("lv", "saddles", "svd_modes"):  # one import path per public name: no short aliases
        assert not hasattr(nqf, short), short
    assert nqf.errors.NQFError.__module__ == "nqf.errors"
    with pytest.raises(AttributeError, match="not_a_name"):
        nqf.not_a_name  # noqa: B018


def test_analyze_is_the_function_whichever_import_comes_first():
    """``nqf.analyze`` is the function and ``nqf.app._study`` its package (no module that is also callable)."""
    code = """
import types
import nqf.app._study
import nqf
assert callable(nqf.analyze) and not isinstance(nqf.analyze, types.ModuleType), nqf.analyze
assert nqf.analyze is nqf.app._study.analyze
assert isinstance(nqf.app._study, types.ModuleType) and not callable(nqf.app._study)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- a package that stands alone
def test_py_typed_is_shipped():
    assert (SRC / "py.typed").is_file()
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'\[tool\.setuptools\.package-data\]\s*\nnqf\s*=\s*\[[^\]]*"py\.typed"', text)


def test_license_matches_pyproject():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^license\s*=\s*"MIT"\s*$', text, re.M)  # SPDX expression (PEP 639)
    assert re.search(r'^license-files\s*=\s*\["LICENSE"\]', text, re.M)
    lic = (ROOT / "LICENSE").read_text()
    assert lic.startswith("MIT License") and "Copyright (c) 2026 the nqf developers" in lic


def test_citation_cites_the_paper_and_the_software():
    text = (ROOT / "CITATION.cff").read_text()
    assert "cff-version: 1.2.0" in text and "type: software" in text
    assert re.search(r"^preferred-citation:", text, re.M)
    assert "2608.13335" in text
    assert "Neural Quadratic Forms: A Unified Minimal Model for Sudden Learning and Scaling Laws" in text
    version = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version and re.search(rf"^version: {re.escape(version.group(1))}$", text, re.M)


def _cited_files():
    files = sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py")) + [ROOT / "README.md"]
    return [f for f in files if ".egg-info" not in str(f)]


def test_no_reference_outside_the_package():
    outside = re.compile("|".join([re.escape("shared" + "/"), re.escape("THEORY" + ".md")]))
    hits = [
        f"{f.relative_to(ROOT)}:{i}"
        for f in _cited_files()
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if outside.search(line)
    ]
    assert not hits, hits


def test_theory_citations_point_to_existing_sections():
    theory = (ROOT / "docs" / "theory.md").read_text()
    sections = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", theory, re.M))
    assert {"0", "1", "2", "3", "4", "5", "6", "3.1", "4.3", "4.5", "4.6"} <= sections
    cite = re.compile(r"docs/theory\.md\s*§(\d+(?:\.\d+)?)(?:\s*[–-]\s*§?(\d+(?:\.\d+)?))?")
    missing, n = [], 0
    for f in _cited_files():
        for i, line in enumerate(f.read_text().splitlines(), 1):
            for m in cite.finditer(line):
                n += 1
                missing += [f"{f.relative_to(ROOT)}:{i} §{s}" for s in m.groups() if s and s not in sections]
    assert n >= 30 and not missing, missing


# --------------------------------------------------------------------------- layering
def _import_cycles(package: str = "nqf", *, type_checking: bool = False) -> list[list[str]]:
    """Strongly connected components (size > 1) of a package's module import graph (function-level imports count;
    ``if TYPE_CHECKING:`` imports, which Python never runs, only with ``type_checking=True``)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph(package, exclude_type_checking_imports=not type_checking)
    adj = {
        m: sorted(t for t in graph.find_modules_directly_imported_by(m) if t.split(".")[0] == package)
        for m in graph.modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in adj.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(adj):
        if m not in index:
            visit(m)
    return out


def test_no_import_cycles():
    assert _import_cycles() == []


#: The one circle left when the type checker's imports count too: the Lotka–Volterra system and its solver
#: functions, split across files by the 500-line cap (the solvers annotate their argument as the system, whose
#: methods call them).  Merging them is issue 36's item 5, which the file cap blocks.  It may not grow, and no
#: other circle may appear (``experiments/_base``–``_catalog`` and ``structure/_operator``–``_subspace`` are gone).
TYPE_ONLY_CIRCLES = [
    [f"nqf.reductions.lv.{m}" for m in ("_final", "_logistic", "_methods", "_solvers", "_system")],
]


def test_no_import_cycles_with_the_type_checkers_imports_but_the_known_one():
    assert _import_cycles(type_checking=True) == TYPE_ONLY_CIRCLES


def test_import_cycle_check_can_fail(tmp_path, monkeypatch):
    """Planted: two modules importing each other inside functions form a cycle; a third imported only for the type
    checker does not join it."""
    pkg = tmp_path / "plantedcycle"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_a.py").write_text("def f():\n    from ._b import g\n    return g\n")
    (pkg / "_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._c import h\n\n\ndef g():\n"
        "    from . import _a\n    return _a\n"
    )
    (pkg / "_c.py").write_text("from ._b import g\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _import_cycles("plantedcycle") == [["plantedcycle._a", "plantedcycle._b"]]
    # counting the type checker's imports, _c joins the circle through _b
    assert _import_cycles("plantedcycle", type_checking=True) == [
        ["plantedcycle._a", "plantedcycle._b", "plantedcycle._c"]
    ]


def test_layers_contract():
    """The import-linter layers contract of pyproject.toml holds (structure < dynamics < … < cli)."""
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    out = subprocess.run([str(exe), "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:]


def test_no_plain_value_or_type_errors_in_the_package():
    """Every error nqf raises on purpose is an NQFError subclass (issue 10: one error contract)."""
    import re

    offenders = []
    for path in sorted((ROOT / "src" / "nqf").rglob("*.py")):
        if path.name == "errors.py":
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\braise (ValueError|TypeError|KeyError)\b", line):
                offenders.append(f"{path.relative_to(ROOT)}:{i}")
    assert offenders == [], offenders


def test_operator_hooks_are_private_to_the_structure_package():
    """Outside nqf.structure only the public operator protocol is used (issue 10, deliverable 2)."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.is_relative_to(SRC / "structure"):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\._(forward|adjoint|squeeze|take)\(", line) or re.search(r"\bop\._dense\b", line):
                offenders.append(f"{path.relative_to(ROOT)}:{i}")
    assert offenders == [], offenders


def test_public_protocol_agrees_with_the_checked_calls():
    """forward_unchecked / adjoint_unchecked / compress against the checked calls and a dense einsum."""
    import torch

    from nqf.structure import mlp

    gen = torch.Generator().manual_seed(0)
    X = torch.randn(7, 3, generator=gen, dtype=torch.float64)
    op = mlp(X, "tanh", n_outputs=2)
    M = torch.randn(op.p, op.p, generator=gen, dtype=torch.float64)
    M = M + M.T
    R = torch.randn(7, 2, generator=gen, dtype=torch.float64)
    A = op.dense()  # (N, C, p, p)
    assert torch.allclose(op.forward_unchecked(M), torch.einsum("ncij,ij->nc", A, M), atol=1e-12)
    assert torch.allclose(op.adjoint_unchecked(R), torch.einsum("nc,ncij->ij", R, A), atol=1e-12)
    U = op.data_subspace()
    small = op.compress(U)
    assert small.p == U.shape[1] <= op.p
    Mr = U.T @ M @ U
    assert torch.allclose(small(Mr), op(U @ Mr @ U.T), atol=1e-12)
