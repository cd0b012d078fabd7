"""Reductions of the closed dynamics: what the order-parameter flow reduces to.

* :mod:`nqf.reductions.lv` — commuting structure matrices: the Lotka–Volterra
  system of the mode strengths, its logistic closed forms and its ε → 0 limit;
* :mod:`nqf.reductions.svd_modes` — two-layer networks on whitened data: the
  SVD modes of the teacher and their Saxe-type sigmoidal switch-on;
* :mod:`nqf.reductions.saddles` — non-commuting data: the greedy low-rank saddle
  sequence (plateau levels and escape times);
* :mod:`nqf.reductions.timing` — switch-on times, plateau levels and level
  crossings shared by all three.

The submodules are imported on first use (``nqf.reductions.lv`` loads scipy).
Conventions and equations: docs/theory.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # loaded lazily below; imported here for the type checker only
    from . import lv, saddles, svd_modes

__all__ = ["lv", "saddles", "svd_modes"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
