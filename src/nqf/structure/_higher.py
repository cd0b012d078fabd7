r"""The next orders of the normal form of an additive module (docs/theory.md, "The next orders").

For a module whose output is a sum over units of a one-unit function ``f_x(w)``,

.. math::

    f_x(W) = f_x(0) + Σ_i w_iᵀA(x)w_i + Σ_i T_3(x)[w_i,w_i,w_i] + Σ_i T_4(x)[w_i,w_i,w_i,w_i] + O(‖W‖⁵),

with ``T_3[w^3] = (1/6) d³/ds³ f_x(sw)|₀`` and ``T_4[w^4] = (1/24) d⁴/ds⁴ f_x(sw)|₀``.  Unlike the
quadratic term, which depends on ``W`` only through ``M = W Wᵀ``, these depend on
``Σ_i w_i^{⊗3}`` and ``Σ_i w_i^{⊗4}``; they are never stored as ``p³``/``p⁴`` arrays but evaluated
on ``W`` directly.  :class:`HigherOrderTerms` is the protocol; :func:`mlp_higher_order` the analytic
two-layer MLP (``f_c(x) = Σ_i a_{ic} σ(u_i·x + c_i)``): with ``z_i = u_i·x̃``

.. math::

    T_3: Σ_i a_{ic} \frac{σ''(0)}{2} z_i^2, \qquad T_4: Σ_i a_{ic} \frac{σ'''(0)}{6} z_i^3,

cost ``O(N (D + C) m)`` per evaluation or gradient.  The torch-module version is
:func:`nqf.modules.higher_order_terms`.
"""

from __future__ import annotations

import math

import torch

from .._validation import as_tensor, positive_int
from ..errors import InvalidParameterError, ShapeError
from ._activations import get_activation

__all__ = ["HigherOrderTerms", "MLPHigherOrder", "mlp_higher_order"]


class HigherOrderTerms:
    """Cubic and quartic terms of an additive module's normal form, evaluated on ``W`` (never as arrays).

    Subclasses implement :meth:`cubic`, :meth:`quartic`, :meth:`cubic_gradient`,
    :meth:`quartic_gradient` and :meth:`take`.

    Attributes
    ----------
    p : int
        Parameters per unit (rows of ``W``).
    N : int
        Samples.
    C : int
        Outputs.
    """

    __slots__ = ("p", "N", "C", "dtype", "device")

    def __init__(self, p: int, N: int, C: int, dtype: torch.dtype, device: torch.device):
        object.__setattr__(self, "p", int(p))
        object.__setattr__(self, "N", int(N))
        object.__setattr__(self, "C", int(C))
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "device", device)

    def __setattr__(self, name, value):
        if name in HigherOrderTerms.__slots__:
            raise AttributeError(f"`{name}` of {type(self).__name__} is frozen")
        object.__setattr__(self, name, value)

    def __getstate__(self):
        names = [k for c in type(self).__mro__ for k in getattr(c, "__slots__", ())]
        return {k: getattr(self, k) for k in names if hasattr(self, k)}

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(p={self.p}, N={self.N}, C={self.C})"

    # ------------------------------------------------------------------ checks
    def _W(self, W) -> torch.Tensor:
        if not (isinstance(W, torch.Tensor) and W.ndim == 2 and W.dtype == self.dtype and W.device == self.device):
            W = as_tensor("W", W, ndim=2, dtype=self.dtype, device=self.device)  # (a tensor as given keeps its graph)
        if W.shape[0] != self.p:
            raise ShapeError(f"`W` must have shape (p, m) with p = {self.p}; found {tuple(W.shape)}")
        return W

    def _R(self, R) -> torch.Tensor:
        if not (isinstance(R, torch.Tensor) and R.ndim == 2 and R.dtype == self.dtype and R.device == self.device):
            R = as_tensor("R", R, ndim=2, dtype=self.dtype, device=self.device)
        if tuple(R.shape) != (self.N, self.C):
            raise ShapeError(f"`R` must have shape (N, C) = ({self.N}, {self.C}); found {tuple(R.shape)}")
        return R

    # ------------------------------------------------------------------ protocol
    def cubic(self, W) -> torch.Tensor:
        """``Σ_i T_3(x_n)[w_i, w_i, w_i]``, shape ``(N, C)``."""
        raise NotImplementedError

    def quartic(self, W) -> torch.Tensor:
        """``Σ_i T_4(x_n)[w_i, w_i, w_i, w_i]``, shape ``(N, C)``."""
        raise NotImplementedError

    def cubic_gradient(self, W, R) -> torch.Tensor:
        """``∇_W Σ_{n,c} R_{n,c} cubic(W)_{n,c}``, shape ``(p, m)``."""
        raise NotImplementedError

    def quartic_gradient(self, W, R) -> torch.Tensor:
        """``∇_W Σ_{n,c} R_{n,c} quartic(W)_{n,c}``, shape ``(p, m)``."""
        raise NotImplementedError

    def take(self, idx) -> HigherOrderTerms:
        """The same terms on the samples ``idx``."""
        raise NotImplementedError

    def value(self, W) -> torch.Tensor:
        """``cubic(W) + quartic(W)``, shape ``(N, C)``."""
        return self.cubic(W) + self.quartic(W)

    def gradient(self, W, R) -> torch.Tensor:
        """``∇_W Σ_{n,c} R_{n,c} value(W)_{n,c}``, shape ``(p, m)``."""
        return self.cubic_gradient(W, R) + self.quartic_gradient(W, R)


class MLPHigherOrder(HigherOrderTerms):
    """Analytic cubic and quartic terms of the two-layer MLP (see :func:`mlp_higher_order`)."""

    __slots__ = ("X", "bias", "s2", "s3", "layout")

    def __init__(self, X: torch.Tensor, bias: bool, C: int, s2: float, s3: float):
        D = X.shape[1]
        super().__init__(C + D + (1 if bias else 0), X.shape[0], C, X.dtype, X.device)
        self.X, self.bias, self.s2, self.s3 = X, bool(bias), float(s2), float(s3)
        self.layout = f"w = (a ∈ R^{C} readout [0:{C}], u ∈ R^{D} input weights [{C}:{C + D}]" + (
            f", c bias [{self.p - 1}])" if bias else ")"
        )

    def _split(self, W):
        W = self._W(W)
        A, U = W[: self.C], W[self.C :]
        Z = self.X @ U[: self.X.shape[1]]
        if self.bias:
            Z = Z + U[-1]
        return A, Z

    def _xt_times(self, G: torch.Tensor) -> torch.Tensor:
        """``X̃ᵀ G`` for ``G`` of shape ``(N, m)`` (``X̃ = [X, 1]`` with a bias)."""
        out = self.X.T @ G
        return torch.cat([out, G.sum(0, keepdim=True)], 0) if self.bias else out

    def cubic(self, W) -> torch.Tensor:
        A, Z = self._split(W)
        return (0.5 * self.s2) * (Z * Z) @ A.T

    def quartic(self, W) -> torch.Tensor:
        A, Z = self._split(W)
        return (self.s3 / 6.0) * (Z * Z * Z) @ A.T

    def _grad(self, W, R, k: int, coef: float) -> torch.Tensor:
        """Gradient of ``Σ R_{nc} Σ_i a_{ic} coef z_{ni}^k``."""
        A, Z = self._split(W)
        R = self._R(R)
        gA = coef * (R.T @ Z**k)  # (C, m)
        gU = self._xt_times((R @ A) * (coef * k) * Z ** (k - 1))
        return torch.cat([gA, gU], 0)

    def cubic_gradient(self, W, R) -> torch.Tensor:
        return self._grad(W, R, 2, 0.5 * self.s2)

    def quartic_gradient(self, W, R) -> torch.Tensor:
        return self._grad(W, R, 3, self.s3 / 6.0)

    def take(self, idx) -> MLPHigherOrder:
        return MLPHigherOrder(self.X[idx], self.bias, self.C, self.s2, self.s3)


def mlp_higher_order(X, activation="tanh", bias: bool = False, n_outputs: int = 1, *, dtype=None) -> MLPHigherOrder:
    """Cubic and quartic terms of a two-layer MLP on inputs ``X`` (the unit layout of :func:`mlp`).

    Parameters
    ----------
    X : array_like, shape (N, D)
    activation : str or Activation
        A smooth registry activation with known ``σ''(0)`` and ``σ'''(0)``.
    bias : bool
        Hidden biases (the last entry of each unit).
    n_outputs : int
        ``C``.
    dtype : torch.dtype, optional

    Returns
    -------
    MLPHigherOrder
        ``cubic = Σ_i a_i σ''(0)/2 z_i²``, ``quartic = Σ_i a_i σ'''(0)/6 z_i³``, ``z_i = u_i·x + c_i``.

    Raises
    ------
    InvalidParameterError
        The activation's ``σ''(0)`` or ``σ'''(0)`` is unknown (NaN).
    """
    X = as_tensor("X", X, ndim=2, dtype=dtype)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ShapeError(f"`X` must have shape (N, D) with N, D ≥ 1; found {tuple(X.shape)}")
    C = positive_int("n_outputs", n_outputs)
    act = get_activation(activation)
    if not (math.isfinite(act.s2) and math.isfinite(act.s3)):
        raise InvalidParameterError(
            f"`activation` must have known σ''(0) and σ'''(0) for the higher orders; "
            f"found {act.name!r} with s2 = {act.s2}, s3 = {act.s3}"
        )
    return MLPHigherOrder(X, bool(bias), int(C), act.s2, act.s3)
