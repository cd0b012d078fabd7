"""Reductions of the closed dynamics: what the order-parameter flow reduces to.

The central output is a :class:`Staircase` (plateau levels, drop times and the
rule behind each), returned by every reduction and by :func:`predict`, which
picks the reduction for an operator (``nqf.predict`` is the same function).

* :mod:`nqf.reductions.lv` — commuting structure matrices: the Lotka–Volterra
  system of the mode strengths, its logistic closed forms and its ε → 0 limit;
* :mod:`nqf.reductions.svd_modes` — two-layer networks on whitened data: the
  SVD modes of the teacher and their Saxe-type sigmoidal switch-on;
* :mod:`nqf.reductions.saddles` — non-commuting data: the greedy low-rank saddle
  sequence (plateau levels and escape times);
* :mod:`nqf.reductions.dormant` — when the quadratic form is silent: the first order that carries
  signal and its power-law clock (dormant flows between active phases; chains with every layer small);
* switch-on times and level crossings shared by all three (:func:`logistic_switch_time`,
  :func:`leading_switch_time`, :func:`crossing_times`, :func:`crossing_time`,
  :func:`crossing_index`, :func:`midpoint_levels`); the staircase curve itself is
  :meth:`Staircase.loss_curve`;
* the drops that carry the learning (:func:`learning_drops`, :data:`TAIL_FRACTION`;
  :meth:`Staircase.carrying` cuts the tail after them).

The submodules are imported on first use (``nqf.reductions.lv`` loads scipy).
Conventions and equations: docs/theory.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # loaded lazily below; imported here for the type checker only
    from . import dormant, lv, saddles, svd_modes
    from ._predict import LV_MAX_ENTRIES, predict
    from ._staircase import METHODS, TIME_RULES, PredictionCost, Staircase
    from ._timing import (
        TAIL_FRACTION,
        crossing_index,
        crossing_time,
        crossing_times,
        leading_switch_time,
        learning_drops,
        logistic_switch_time,
        midpoint_levels,
    )

_SUBMODULES = ("dormant", "lv", "saddles", "svd_modes")

#: Public names defined in a private module: ``name → module``.
_NAMES = {
    "Staircase": "._staircase",
    "PredictionCost": "._staircase",
    "METHODS": "._staircase",
    "TIME_RULES": "._staircase",
    "predict": "._predict",
    "LV_MAX_ENTRIES": "._predict",
    "logistic_switch_time": "._timing",
    "leading_switch_time": "._timing",
    "crossing_times": "._timing",
    "crossing_time": "._timing",
    "crossing_index": "._timing",
    "midpoint_levels": "._timing",
    "learning_drops": "._timing",
    "TAIL_FRACTION": "._timing",
}

__all__ = [  # the submodules and the keys of _NAMES (tests/test_package.py)
    "dormant",
    "lv",
    "saddles",
    "svd_modes",
    "Staircase",
    "PredictionCost",
    "METHODS",
    "TIME_RULES",
    "predict",
    "LV_MAX_ENTRIES",
    "logistic_switch_time",
    "leading_switch_time",
    "crossing_times",
    "crossing_time",
    "crossing_index",
    "midpoint_levels",
    "learning_drops",
    "TAIL_FRACTION",
]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
