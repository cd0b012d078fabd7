"""nqf — Neural Quadratic Forms.

Near small initialisation a layer built from interchangeable units is the
quadratic form ``f(0) + Tr[W Wᵀ A(x)]``; nqf computes the structure matrices
``A(x)``, simulates the closed dynamics of ``M = W Wᵀ`` and predicts plateau
times and scaling exponents.  Conventions (docs/theory.md §0):
``L = (1/N) Σ_n ℓ(f_n, y_n)``, ``ℓ = ½ (f − y)²`` for MSE, training time
``t = η · steps``, initial state ``M(0) = εI`` (``W0 = √ε Q``).

``import nqf`` is cheap: the subpackages (and with them torch, scipy and
matplotlib) are imported on first use of a name (PEP 562).  To add a public
name, add one entry to :data:`_LAZY_ATTRS` (or a subpackage to
:data:`_LAZY_SUBMODULES`) and the matching import under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Subpackages and modules reachable as ``nqf.NAME`` without an explicit import.
_LAZY_SUBMODULES: frozenset[str] = frozenset(
    {
        "curves",
        "dynamics",
        "errors",
        "modules",
        "networks",
        "reductions",
        "structure",
        "study",
    }
)

#: Public names defined in a submodule: ``name → (module, attribute)``.
_LAZY_ATTRS: dict[str, tuple[str, str]] = {
    "simulate": ("nqf.dynamics", "simulate"),
    "gradient_flow": ("nqf.dynamics", "gradient_flow"),
    "train_network": ("nqf.dynamics", "train_network"),
    "Trajectory": ("nqf.dynamics", "Trajectory"),
    "two_layer_modes": ("nqf.reductions.svd_modes", "two_layer_modes"),
    "predict": ("nqf.reductions", "predict"),
    "Staircase": ("nqf.reductions", "Staircase"),
    "analyze": ("nqf.study", "analyze"),
    "forecast": ("nqf.study", "forecast"),
    "Forecast": ("nqf.study", "Forecast"),
    "watch": ("nqf.study", "watch"),
}

__all__ = [  # kept equal to the two tables above by tests/test_package.py
    "__version__",
    "curves",
    "dynamics",
    "errors",
    "modules",
    "networks",
    "reductions",
    "structure",
    "study",
    "simulate",
    "gradient_flow",
    "train_network",
    "Trajectory",
    "two_layer_modes",
    "predict",
    "Staircase",
    "analyze",
    "forecast",
    "Forecast",
    "watch",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these are resolved lazily
    __version__: str
    from . import curves as curves
    from . import dynamics as dynamics
    from . import errors as errors
    from . import modules as modules
    from . import networks as networks
    from . import reductions as reductions
    from . import structure as structure
    from . import study as study
    from .dynamics import Trajectory as Trajectory
    from .dynamics import gradient_flow as gradient_flow
    from .dynamics import simulate as simulate
    from .dynamics import train_network as train_network
    from .reductions import Staircase as Staircase
    from .reductions import predict as predict
    from .reductions.svd_modes import two_layer_modes as two_layer_modes
    from .study import Forecast as Forecast
    from .study import analyze as analyze
    from .study import forecast as forecast
    from .study import watch as watch


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # ~40 ms: only when asked for

    try:
        return version(__name__)
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    elif name in _LAZY_SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    elif name in _LAZY_ATTRS:
        module, attr = _LAZY_ATTRS[name]
        value = getattr(importlib.import_module(module), attr)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"__version__"} | _LAZY_SUBMODULES | set(_LAZY_ATTRS))
