"""``nqf.analyze``: your own model, your own data (docs/analyze.md).

:func:`analyze` predicts how a real network learns on real data (plateau levels and
drop times: Lotka–Volterra for commuting data, the greedy saddle sequence
otherwise), simulates its NQF, trains the real module from the same small
initial state ``M(0) = εI``, compares per plateau, and returns an
:class:`Analysis` with assumption checks and a verdict.

Public helpers: :func:`initial_weights`, :func:`stable_learning_rate`,
:func:`step_count` (from :mod:`nqf.curves._schedule`),
:func:`find_unit_layers`, :func:`choose_units`, :func:`build_model`.  The
prediction is :func:`nqf.predict` (a :class:`nqf.Staircase`); curve comparison
lives in :mod:`nqf.curves._compare`.

Names are imported on first use (PEP 562), so that ``nqf --version`` — whose
command table imports :mod:`nqf.study._cli` — does not load torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_ATTRS: dict[str, str] = {
    "analyze": "_pipeline",
    "prepare_analysis": "_pipeline",
    "Analysis": "_result",
    "CheckRow": "_result",
    "FoundUnits": "_discover",
    "choose_units": "_discover",
    "find_unit_layers": "_discover",
    "build_model": "_models",
    "save_analysis": "_output",
    "initial_weights": "..curves",
    "stable_learning_rate": "..curves",
    "step_count": "..curves",
}

__all__ = [  # equal to the keys of _ATTRS
    "Analysis",
    "CheckRow",
    "FoundUnits",
    "analyze",
    "build_model",
    "choose_units",
    "find_unit_layers",
    "initial_weights",
    "prepare_analysis",
    "save_analysis",
    "stable_learning_rate",
    "step_count",
]

if TYPE_CHECKING:
    from ..curves import initial_weights, stable_learning_rate, step_count
    from ._discover import FoundUnits, choose_units, find_unit_layers
    from ._models import build_model
    from ._output import save_analysis
    from ._pipeline import analyze, prepare_analysis
    from ._result import Analysis, CheckRow


def __getattr__(name: str) -> Any:
    if name not in _ATTRS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    mod = _ATTRS[name]
    module = importlib.import_module(mod if mod.startswith("..") else f".{mod}", __name__)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ATTRS))
