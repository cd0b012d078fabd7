"""nqf — Neural Quadratic Forms.

Near small initialisation a layer built from interchangeable units is the
quadratic form ``f(0) + Tr[W Wᵀ A(x)]``; nqf computes the structure matrices
``A(x)``, simulates the closed dynamics of ``M = W Wᵀ`` and predicts plateau
times and scaling exponents.  Conventions (docs/theory.md §0):
``L = (1/N) Σ_n ℓ(f_n, y_n)``, ``ℓ = ½ (f − y)²`` for MSE, training time
``t = η · steps``, initial state ``M(0) = εI`` (``W0 = √ε Q``).

``import nqf`` is cheap: the subpackages (and with them torch, scipy and
matplotlib) are imported on first use of a name.  Each public name is written once, in
``__init__.pyi`` (what type checkers read); ``lazy_loader`` builds ``__all__`` and the loading on
first use from it.
"""

from __future__ import annotations

from typing import Any

import lazy_loader as _lazy

_attr, _dir, _names = _lazy.attach_stub(__name__, __file__)
__all__ = ["__version__", *_names]  # pyright: ignore[reportUnsupportedDunderAll]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # ~40 ms: only when asked for

    try:
        return version(__name__)
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0+unknown"


def __getattr__(name: str) -> Any:
    if name != "__version__":
        return _attr(name)  # cached on the package after the first look-up
    globals()[name] = value = _version()
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
