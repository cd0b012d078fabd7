"""nqf — Neural Quadratic Forms.

Near small initialisation a layer built from interchangeable units is the
quadratic form ``f(0) + Tr[W Wᵀ A(x)]``; nqf computes the structure matrices
``A(x)``, simulates the closed dynamics of ``M = W Wᵀ`` and predicts plateau
times and scaling exponents.  Conventions: ``L = (1/N) Σ_n ℓ(f_n, y_n)``,
``ℓ = ½ (f − y)²`` for MSE, training time ``t = η · steps``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nqf")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

from . import analysis, dynamics, errors, lv, networks, saddles, structure, svd_modes  # noqa: E402
from .dynamics import Trajectory, gradient_flow, simulate, train_network  # noqa: E402
from .svd_modes import two_layer_modes  # noqa: E402

__all__ = ["__version__", "errors", "networks", "structure", "dynamics", "lv", "analysis", "svd_modes", "saddles",
           "simulate", "gradient_flow", "train_network", "Trajectory", "two_layer_modes"]
