"""``nqf.analyze``: your own model, your own data (docs/analyze.md).

:func:`analyze` predicts how a real network learns on real data (plateau levels and
drop times: Lotka–Volterra for commuting data, the greedy saddle sequence
otherwise), simulates its NQF, trains the real module from the same small
initial state ``M(0) = εI``, compares per plateau, and returns an
:class:`Analysis` with assumption checks and a verdict.

Public helpers: :func:`find_unit_layers`, :func:`choose_units`, :func:`unit_listing`, :func:`build_model`.
The initial state is :func:`nqf.dynamics.initial_weights`, the step size and step
count :func:`nqf.curves.stable_learning_rate` and :func:`nqf.curves.step_count`; the
prediction is :func:`nqf.predict` (a :class:`nqf.Staircase`), judged by
:func:`nqf.curves.compare_staircase`.

Names are imported on first use (PEP 562), so that ``nqf --version`` — whose
command table registers ``nqf analyze`` with :func:`register_cli` — does not load torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_ATTRS: dict[str, str] = {
    "analyze": "_pipeline",
    "forecast": "_forecast",
    "Forecast": "_forecast_result",
    "LogJudgement": "_forecast_result",
    "watch": "_watch",
    "Monitor": "_watch",
    "WatchStatus": "_watch",
    "prepare_analysis": "_pipeline",
    "Prepared": "_plan",
    "Analysis": "_result",
    "CheckRow": "_result",
    "FoundUnits": "_discover",
    "choose_units": "_discover",
    "find_unit_layers": "_discover",
    "unit_listing": "_discover",
    "build_model": "_models",
    "save_analysis": "_output",
    "register_cli": "_cli",
}

__all__ = [  # equal to the keys of _ATTRS
    "Analysis",
    "CheckRow",
    "FoundUnits",
    "Forecast",
    "LogJudgement",
    "Monitor",
    "Prepared",
    "WatchStatus",
    "analyze",
    "forecast",
    "build_model",
    "choose_units",
    "find_unit_layers",
    "prepare_analysis",
    "register_cli",
    "save_analysis",
    "unit_listing",
    "watch",
]

if TYPE_CHECKING:
    from ._cli import register_cli
    from ._discover import FoundUnits, choose_units, find_unit_layers, unit_listing
    from ._forecast import forecast
    from ._forecast_result import Forecast, LogJudgement
    from ._models import build_model
    from ._output import save_analysis
    from ._pipeline import analyze, prepare_analysis
    from ._plan import Prepared
    from ._result import Analysis, CheckRow
    from ._watch import Monitor, WatchStatus, watch


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
