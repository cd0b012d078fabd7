r"""The next orders of the normal form: cubic and quartic terms of an additive module (docs/theory.md §7).

For a module that is a sum over units of a one-unit function, the expansion about ``W = 0``
continues past the quadratic form::

    f_x(W) = f_x(0) + Σ_i w_iᵀ A(x) w_i + Σ_i T₃(x)[w_i, w_i, w_i] + Σ_i T₄(x)[w_i, w_i, w_i, w_i] + O(‖W‖⁵)

``T₃`` and ``T₄`` do not close on ``M = W Wᵀ``: they depend on ``Σ_i w_i^{⊗3}`` and
``Σ_i w_i^{⊗4}``, i.e. on how the units share a direction.  Nothing here forms a ``p³`` or
``p⁴`` array: every product is a few passes over the data per unit column.

Two-layer MLP ``f_c(x) = Σ_i a_ic σ(u_i·x + c_i)`` (unit ``w = (a ∈ R^C, u ∈ R^D[, c])``, the
layout of :func:`nqf.structure.mlp`), with ``z_i = u_i·x + c_i``::

    cubic  = Σ_i a_ic σ''(0)/2 z_i²,     quartic = Σ_i a_ic σ'''(0)/6 z_i³

(``T₃ = 0`` for odd activations such as tanh, whose first correction is quartic with
``σ'''(0) = −2``).  :func:`nqf.modules.higher_order_terms` gives the same terms for any
additive module by ``torch.func`` (nested forward-mode derivatives along each unit).
"""

from __future__ import annotations

import math

import torch

from .._validation import as_tensor, positive_int
from ..errors import NormalFormError, ShapeError
from ._activations import get_activation

__all__ = ["HigherOrderTerms", "MLPHigherOrder", "mlp_higher_order"]


class HigherOrderTerms:
    """The cubic and quartic terms of an additive module's normal form on ``N`` samples (``C`` outputs).

    Subclasses implement :meth:`cubic`, :meth:`quartic`, :meth:`cubic_gradient`,
    :meth:`quartic_gradient` and :meth:`take`; ``W`` is ``(p, m)`` in the operator's unit layout,
    ``R`` is ``(N, C)``.
    """

    p: int
    N: int
    C: int

    def cubic(self, W: torch.Tensor) -> torch.Tensor:
        """``Σ_i T₃(x_n)[w_i, w_i, w_i]``, shape ``(N, C)``."""
        raise NotImplementedError

    def quartic(self, W: torch.Tensor) -> torch.Tensor:
        """``Σ_i T₄(x_n)[w_i, w_i, w_i, w_i]``, shape ``(N, C)``."""
        raise NotImplementedError

    def cubic_gradient(self, W: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """``∇_W Σ_{n,c} R_nc · cubic(W)_nc``, shape ``(p, m)``."""
        raise NotImplementedError

    def quartic_gradient(self, W: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """``∇_W Σ_{n,c} R_nc · quartic(W)_nc``, shape ``(p, m)``."""
        raise NotImplementedError

    def take(self, idx) -> HigherOrderTerms:
        """The terms on a subset of the samples."""
        raise NotImplementedError

    def value(self, W: torch.Tensor) -> torch.Tensor:
        """``cubic(W) + quartic(W)``, shape ``(N, C)``."""
        return self.cubic(W) + self.quartic(W)

    def gradient(self, W: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """``∇_W Σ_{n,c} R_nc · value(W)_nc``, shape ``(p, m)``."""
        return self.cubic_gradient(W, R) + self.quartic_gradient(W, R)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(p={self.p}, N={self.N}, C={self.C})"


class MLPHigherOrder(HigherOrderTerms):
    """The analytic cubic and quartic terms of a two-layer MLP (module docstring)."""

    def __init__(self, X: torch.Tensor, s2: float, s3: float, C: int, bias: bool):
        self.X, self.s2, self.s3, self.bias = X, float(s2), float(s3), bool(bias)
        self.N, self.C = int(X.shape[0]), int(C)
        self.p = self.C + int(X.shape[1]) + (1 if bias else 0)

    def _z(self, W: torch.Tensor) -> torch.Tensor:
        C, D = self.C, self.X.shape[1]
        z = self.X @ W[C : C + D]
        return z + W[C + D] if self.bias else z

    def _check(self, W: torch.Tensor) -> None:
        if W.ndim != 2 or W.shape[0] != self.p:
            raise ShapeError(f"`W` must have shape (p, m) = ({self.p}, m); found {tuple(W.shape)}")

    def cubic(self, W):
        self._check(W)
        return (0.5 * self.s2) * (self._z(W) ** 2) @ W[: self.C].T

    def quartic(self, W):
        self._check(W)
        return (self.s3 / 6.0) * (self._z(W) ** 3) @ W[: self.C].T

    def _grad(self, W, R, k: int, coef: float) -> torch.Tensor:
        """Gradient of ``coef Σ_{n,c,i} R_nc a_ic z_ni^k``."""
        self._check(W)
        C, D = self.C, self.X.shape[1]
        z = self._z(W)
        Ra = R @ W[:C]  # (N, m): Σ_c R_nc a_ic
        g = torch.empty_like(W)
        g[:C] = coef * R.T @ z**k
        dz = (coef * k) * Ra * z ** (k - 1)
        g[C : C + D] = self.X.T @ dz
        if self.bias:
            g[C + D] = dz.sum(0)
        return g

    def cubic_gradient(self, W, R):
        return self._grad(W, R, 2, 0.5 * self.s2)

    def quartic_gradient(self, W, R):
        return self._grad(W, R, 3, self.s3 / 6.0)

    def take(self, idx) -> MLPHigherOrder:
        idx = torch.as_tensor(idx, dtype=torch.long, device=self.X.device).reshape(-1)
        return MLPHigherOrder(self.X[idx], self.s2, self.s3, self.C, self.bias)


def mlp_higher_order(X, activation="tanh", bias: bool = False, n_outputs: int = 1, *, dtype=None) -> MLPHigherOrder:
    """The cubic and quartic normal-form terms of a two-layer MLP on inputs ``X`` (same layout as :func:`mlp`).

    Parameters
    ----------
    X : array_like, shape (N, D)
    activation : str or callable
        A smooth activation of the registry (its ``σ''(0)``, ``σ'''(0)``).
    bias : bool
        Hidden biases (the last entry of each unit).
    n_outputs : int
    dtype : torch.dtype, optional

    Returns
    -------
    MLPHigherOrder
    """
    X = as_tensor("X", X, ndim=2, dtype=dtype)
    n_outputs = positive_int("n_outputs", n_outputs)
    act = get_activation(activation)
    if not (math.isfinite(act.s2) and math.isfinite(act.s3)):
        raise NormalFormError(
            f"`activation` must have known second and third derivatives at 0 for the next orders; "
            f"found {act.name!r} without them"
        )
    return MLPHigherOrder(X, act.s2, act.s3, n_outputs, bias)
