"""The package layout: private modules stay behind their package's door (issue 19, step 5)."""

import ast
import types
from pathlib import Path

SRC = Path(__file__).parents[1] / "src"


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _private_owner(module: str) -> str | None:
    """The package that owns the last private component of ``module`` (None: nothing private).

    The last, not the first: ``nqf.app._report._atomic`` belongs to ``nqf.app._report`` (only the report
    reaches it), while ``nqf.app._report`` itself belongs to ``nqf.app`` (the application's parts reach each
    other through their doors)."""
    parts = module.split(".")
    owner = None
    for i, p in enumerate(parts):
        if p.startswith("_") and not p.startswith("__"):
            owner = ".".join(parts[:i])
    return owner


def _imports(path: Path):
    name = _module_name(path)
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(name, is_pkg, node)
            yield node.lineno, target
            for alias in node.names:  # `from pkg import _private_module` (a module, not a private name)
                sub = SRC.joinpath(*f"{target}.{alias.name}".split("."))
                if sub.with_suffix(".py").is_file() or (sub / "__init__.py").is_file():
                    yield node.lineno, f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def test_no_module_imports_another_packages_private_modules():
    """A private module (``_name.py``) is imported only from inside the package that holds it; every other
    module goes through that package's ``__init__`` (its one door)."""
    bad = []
    for path in sorted((SRC / "nqf").rglob("*.py")):
        importer = _module_name(path)
        for line, target in _imports(path):
            if not target.startswith("nqf"):
                continue
            owner = _private_owner(target)
            if owner is None:
                continue
            if not (importer == owner or importer.startswith(owner + ".")):
                bad.append(f"{importer}:{line} imports {target} (private to {owner})")
    assert not bad, bad


def test_the_rule_sees_a_violation():
    """The check itself can fail: an import of another package's private module is reported."""
    node = ast.parse("from ...reductions._predict import predict").body[0]
    assert isinstance(node, ast.ImportFrom)
    target = _resolve("nqf.app._study._pipeline", False, node)
    assert target == "nqf.reductions._predict"
    owner = _private_owner(target)
    assert owner == "nqf.reductions" and not "nqf.app._study._pipeline".startswith(owner + ".")


def test_the_rule_keeps_the_applications_parts_behind_their_doors():
    """Inside the application, one part reaches another through its door (``from .._report import …``), never
    through its private modules (``from .._report._atomic import …``)."""
    door = _resolve("nqf.app._study._pipeline", False, ast.parse("from .._report import x").body[0])  # type: ignore[arg-type]
    inner = _resolve("nqf.app._study._pipeline", False, ast.parse("from .._report._atomic import x").body[0])  # type: ignore[arg-type]
    assert (door, inner) == ("nqf.app._report", "nqf.app._report._atomic")
    assert "nqf.app._study._pipeline".startswith(_private_owner(door) + ".")  # type: ignore[operator]
    assert not "nqf.app._study._pipeline".startswith(_private_owner(inner) + ".")  # type: ignore[operator]


def _doors() -> list[str]:
    """Every public package of nqf (its ``__init__`` is a door) and the public top-level modules."""
    doors = []
    for init in sorted((SRC / "nqf").rglob("__init__.py")):
        name = _module_name(init)
        if _private_owner(name) is None:
            doors.append(name)
    doors += [_module_name(p) for p in sorted((SRC / "nqf").glob("[!_]*.py"))]
    return doors


def _exported_objects(door: str):
    import importlib
    import inspect

    mod = importlib.import_module(door)
    for name in getattr(mod, "__all__", ()):
        value = getattr(mod, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            yield name, value


def _shared_exports(doors) -> list:
    """Objects that more than one door exports (the top-level shortcuts of ``nqf`` excepted)."""
    import nqf

    owners: dict[int, list[str]] = {}
    for door in doors:
        for name, value in _exported_objects(door):
            if door == "nqf" and not isinstance(getattr(nqf, name), types.ModuleType):
                continue  # the documented short names: nqf.simulate is nqf.dynamics.simulate
            owners.setdefault(id(value), []).append(f"{door}.{name}")
    return [paths for paths in owners.values() if len(paths) > 1]


def test_one_import_path_per_public_name():
    """No object is exported by two doors (no re-export shims: ``initial_weights`` lives in nqf.dynamics only)."""
    doors = _doors()
    assert {"nqf.reductions.svd_modes", "nqf.app", "nqf.reductions"} <= set(doors)
    assert not [d for d in doors if "._" in d]  # the application's parts are not doors
    assert not _shared_exports(doors), _shared_exports(doors)


def test_the_one_path_rule_sees_a_shim(monkeypatch):
    """The check can fail: a door that re-exports another door's function is reported."""
    import nqf.curves
    import nqf.dynamics

    monkeypatch.setattr(nqf.curves, "__all__", [*nqf.curves.__all__, "initial_weights"], raising=True)
    monkeypatch.setattr(nqf.curves, "initial_weights", nqf.dynamics.initial_weights, raising=False)
    assert ["nqf.curves.initial_weights", "nqf.dynamics.initial_weights"] in _shared_exports(_doors())
