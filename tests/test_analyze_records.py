"""``nqf.analyze``'s state travels in frozen records, not in long tuples (issue 36, item 3).

The modules of ``nqf.app._study`` (the pipeline of ``analyze``, its runs, its clock, the forecast) are scanned: no
function returns a tuple of more than three, none binds one to a name or passes one as an argument, and none
unpacks more than three names from a call.  Tables of constants (column names) are not state and are not
counted.  No helper takes more than seven positional parameters (the ``typer`` commands, whose parameters are
the command's options, excepted), and none fills a dict or a list it was handed (each phase returns what it made).
Planted: a 9-tuple of context, a 5-tuple returned, a 4-name unpacking, a helper of eight positional parameters and
a helper that fills its ``timings`` argument are each found.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import pytest

import nqf.app._study

STUDY = pathlib.Path(nqf.app._study.__file__).parent
MAX_TUPLE = 3
MAX_POSITIONAL = 7
#: The CLI commands: their parameters are the command's options (``typer`` reads them from the signature).
COMMANDS = {"analyze_cmd", "compare_cmd"}


def _constant(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) or (isinstance(node, ast.Tuple) and all(map(_constant, node.elts)))


def _long(node: ast.AST | None) -> bool:
    """A tuple display of more than three, not all constants."""
    return isinstance(node, ast.Tuple) and len(node.elts) > MAX_TUPLE and not all(map(_constant, node.elts))


def long_tuples(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of each tuple of more than three that carries state between functions."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Return) and _long(node.value):
            found.append((node.lineno, "returns a tuple"))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if _long(target) and isinstance(node.value, ast.Call):
                    found.append((node.lineno, "unpacks a call"))
                if isinstance(target, ast.Name) and _long(node.value):
                    found.append((node.lineno, "binds a tuple"))
        elif isinstance(node, ast.Call):
            if any(_long(a) for a in [*node.args, *(k.value for k in node.keywords)]):
                found.append((node.lineno, "passes a tuple"))
    return found


def many_positional(source: str) -> list[tuple[int, str]]:
    """``(line, function)`` of each function with more than seven positional parameters (commands excepted)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in COMMANDS:
            if len(node.args.posonlyargs) + len(node.args.args) > MAX_POSITIONAL:
                out.append((node.lineno, node.name))
    return out


#: Methods that change a dict, a list or a set in place.
MUTATORS = {"append", "extend", "update", "insert", "setdefault", "pop", "clear", "add", "remove"}


def filled_arguments(source: str) -> list[tuple[int, str, str]]:
    """``(line, function, parameter)`` where a function changes a container it was handed (``x[k] = …``,
    ``x.append(…)``, …)."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]} - {"self", "cls"}
        for node in ast.walk(fn):
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                target = node.func.value
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    target = t.value if isinstance(t, ast.Subscript) else target
            if isinstance(target, ast.Name) and target.id in params:
                out.append((node.lineno, fn.name, target.id))
    return out


def _modules():
    return sorted(STUDY.glob("*.py"))


def test_analyze_passes_no_tuple_longer_than_three():
    found = {p.name: hits for p in _modules() if (hits := long_tuples(p.read_text()))}
    assert found == {}


def test_no_function_of_analyze_fills_a_container_it_was_handed():
    found = {p.name: hits for p in _modules() if (hits := filled_arguments(p.read_text()))}
    assert found == {}


def test_planted_helper_that_fills_its_timings_is_found():
    source = "def run(problem, timings):\n    timings['nqf'] = 1.0\n    out = []\n    out.append(2)\n    return out\n"
    assert filled_arguments(source) == [(2, "run", "timings")]
    assert filled_arguments("def run(rows):\n    rows.append(1)\n") == [(2, "run", "rows")]


def test_no_helper_of_analyze_takes_more_than_seven_positional_parameters():
    found = {p.name: hits for p in _modules() if (hits := many_positional(p.read_text()))}
    assert found == {}


@pytest.mark.parametrize(
    "planted, what",
    [
        ("ctx = (module, found, Xt, op, op_data, Ynqf, r0, how, W0)", "binds a tuple"),
        ("def f(a):\n    return a, a, a, a, a", "returns a tuple"),
        ("data, module, found, desc = prepare(model)", "unpacks a call"),
        ("run(ctx, (lr, steps, form, every))", "passes a tuple"),
    ],
)
def test_planted_long_tuple_is_found(planted, what):
    assert [w for _, w in long_tuples(planted)] == [what]


def test_tables_of_constants_and_short_tuples_are_not_state():
    source = 'COLUMNS = (("k", "k"), ("rank", "rank"), ("L", "L"), ("t", "t"))\ndef f(a):\n    return a, a, a\n'
    assert long_tuples(source) == []


def test_planted_helper_of_eight_positional_parameters_is_found():
    assert many_positional("def helper(a, b, c, d, e, f, g, h):\n    return a\n") == [(1, "helper")]
    assert many_positional("def helper(a, b, c, d, e, f, g, *, h):\n    return a\n") == []


def test_the_records_are_frozen():
    from nqf.app._study._plan import Comparison, NQFData, Prepared, Problem, RunPlan

    plan = RunPlan(lr=0.1, steps=10, form="weights", save_every=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.lr = 0.2  # type: ignore[misc]
    for record in (Comparison, NQFData, Prepared, Problem, RunPlan):
        assert record.__dataclass_params__.frozen, record  # type: ignore[attr-defined]


def test_timings_read_like_a_mapping_and_name_a_missing_part():
    from nqf.app._study._parts import Timings
    from nqf.errors import UnknownNameError

    t = Timings.of({"setup": 0.12345, "nqf_step": 1.23456789e-5})
    assert t["setup"] == 0.123 and t["nqf_step"] == 1.23e-5 and "setup" in t and t.get("seeded_nqf") is None
    assert t.to_dict() == {"setup": 0.123, "nqf_step": 1.23e-5} and dict(t.items()) == t.to_dict()
    assert list(t) == ["setup", "nqf_step"] and set(t) == {"setup", "nqf_step"} and len(t) == 2
    with pytest.raises(UnknownNameError, match="no part 'prediction'; its parts are 'setup', 'nqf_step'"):
        t["prediction"]


def _dict_fields(cls) -> list[str]:
    """The fields of a dataclass annotated as a plain ``dict``."""
    return [f.name for f in dataclasses.fields(cls) if f.type in (dict, "dict") or str(f.type).startswith("dict")]


def test_no_field_of_an_analysis_is_an_untyped_dict():
    """``Analysis``'s parts are frozen records (verdict, validity, curves, timings, memory), not dicts."""
    from nqf.app._study._result import Analysis

    @dataclasses.dataclass(frozen=True)
    class Planted:
        validity: dict = dataclasses.field(repr=False)

    assert _dict_fields(Analysis) == []
    assert _dict_fields(Planted) == ["validity"]  # the check can fail


def test_validity_and_curves_read_like_the_dicts_they_replaced():
    import numpy as np

    from nqf.app._study._parts import Curves, Validity
    from nqf.errors import UnknownNameError

    v = Validity(max_gap=0.01, gap_tolerance=0.05, nqf_minimum=None, final_real=0.1, final_nqf=0.1)
    assert v["max_gap"] == v.max_gap == 0.01 and v.get("left_time") is None and "reason" in v
    assert list(v.to_dict())[:3] == ["max_gap", "gap_tolerance", "nqf_minimum"] and repr(v).startswith("Validity(")
    with pytest.raises(UnknownNameError, match="Validity has no 'gap'"):
        v["gap"]
    t = np.linspace(0.0, 1.0, 5)
    c = Curves(t, t, t, t, strength_real=np.zeros((5, 2)), strength_nqf=np.zeros((5, 2)))
    assert c["loss_real"] is c.loss_real and dict(c.items())["t"] is t and repr(c) == "Curves(T=5, directions=2)"
