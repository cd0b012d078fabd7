"""Functions stay short (issue 19, step 6): a cap on function length, not on file length.

A function's length is ``end_lineno − lineno + 1`` of its ``def`` (decorators excluded) with the
docstring left out: counted from the first statement after the docstring when there is one.
Nested functions are measured on their own too (qualified name ``outer.inner``).  Source files
stay under :data:`FILE_CAP` lines (the project's rule): a file that grows past it is split where
its parts separate (solvers from state, reading files from preparing data, checks from runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "nqf"

CAP = 80  # lines, everywhere but the experiments
FILE_CAP = 500  # lines of any source file
EXPERIMENT_CAP = 60  # issue 19, step 3: no experiment function over 60 lines

# Numerical kernels allowed past the cap, by "module:qualified name", each with the reason.
EXEMPT: dict[str, str] = {}

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _length(fn: Function) -> int:
    """Lines of ``fn``: from the first statement after its docstring (else from the ``def``) to its end."""
    assert fn.end_lineno is not None
    first = fn.body[0]
    if not (
        isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    ):
        return fn.end_lineno - fn.lineno + 1  # no docstring: the whole def, signature included
    if len(fn.body) == 1:
        return 0
    return fn.end_lineno - fn.body[1].lineno + 1


def _functions(node: ast.AST, prefix: str = ""):
    """``(qualified name, node)`` of every function under ``node``, methods and nested functions included."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, child
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def _module(path: Path) -> str:
    """Dotted module name of a source file, e.g. ``nqf.dynamics.simulate``."""
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def offenders(paths) -> dict[str, tuple[int, int]]:
    """``{"module:qualname": (length, cap)}`` for every function of ``paths`` over its cap, exemptions left out."""
    found = {}
    for path in paths:
        module = _module(path)
        cap = EXPERIMENT_CAP if module.startswith("nqf.app._experiments") else CAP
        for name, fn in _functions(ast.parse(path.read_text(), filename=str(path))):
            key = f"{module}:{name}"
            if (n := _length(fn)) > cap and key not in EXEMPT:
                found[key] = (n, cap)
    return found


def test_no_function_over_the_cap():
    """Every function of ``src/nqf`` fits its cap (60 lines in experiments, 80 elsewhere) or is a listed kernel."""
    found = offenders(sorted(SRC.rglob("*.py")))
    report = "\n".join(
        f"  {k}: {n} lines (cap {cap})" for k, (n, cap) in sorted(found.items(), key=lambda kv: -kv[1][0])
    )
    assert not found, f"{len(found)} function(s) over the length cap; split them:\n{report}"


def test_exemptions_are_few_and_current():
    """At most five exempt kernels, each with a reason, each still existing and still over the cap."""
    assert len(EXEMPT) <= 5
    for key, reason in EXEMPT.items():
        assert reason.strip(), key
        module, name = key.split(":")
        path = SRC.parent.joinpath(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        lengths = {q: _length(fn) for q, fn in _functions(ast.parse(path.read_text()))}
        assert name in lengths, f"exempt {key} no longer exists: drop it from EXEMPT"
        cap = EXPERIMENT_CAP if module.startswith("nqf.app._experiments") else CAP
        assert lengths[name] > cap, f"exempt {key} is {lengths[name]} lines, within the cap: drop it from EXEMPT"


def test_length_counts_body_without_docstring_or_decorators():
    """The measure on a small example: decorators and docstring do not count, the body does."""
    code = (
        'import functools\n\n@functools.cache\ndef f(x):\n    """Doc.\n\n    More.\n    """\n    y = x\n    return y\n'
    )
    (fn,) = [n for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    assert _length(fn) == 2
    (g,) = ast.parse("def g():\n    a = 1\n    return a\n").body
    assert isinstance(g, ast.FunctionDef) and _length(g) == 3  # no docstring: the def line counts


def test_every_source_file_is_under_the_file_cap():
    long = {str(f.relative_to(SRC)): n for f in SRC.rglob("*.py") if (n := len(f.read_text().splitlines())) >= FILE_CAP}
    assert not long, f"source files of {FILE_CAP} lines or more (split them where their parts separate): {long}"
