r"""The cubic and quartic normal-form terms of any additive module, by ``torch.func`` (docs/theory.md §7).

For unit column ``w`` the one-unit curve ``φ(s) = f_x(s w)`` (all other units at zero) gives
``T₃[w³] = φ'''(0)/6`` and ``T₄[w⁴] = φ''''(0)/24``: nested forward-mode derivatives of the module
along ``w``, on the whole batch at once, never a ``p³`` or ``p⁴`` array.  The module must be
*additive* at these orders (its output a sum over units): the mixed derivative
``∂_s ∂_t² f(s w₁ + t w₂)`` at zero, a cross-unit cubic term, is checked on two random units and a
module that has one (a softmax-gated mixture of experts) is refused.
"""

from __future__ import annotations

import math

import torch
from torch.func import functional_call, jvp

from .._validation import check_inputs
from ..errors import InvalidTypeError, NormalFormError
from ..structure import HigherOrderTerms
from ._units import UnitLayout, UnitScatter

__all__ = ["ModuleHigherOrder", "higher_order_terms"]

#: Cross-unit cubic term relative to the one-unit one above which a module is not additive.
ADDITIVE_RTOL = 1e-8


def _derivative(fn, order: int, s: torch.Tensor) -> torch.Tensor:
    """``d^order/ds^order fn(s)`` at ``s`` by nested forward mode."""
    one = torch.ones_like(s)

    def nest(f, k):
        if k == 0:
            return f
        inner = nest(f, k - 1)
        return lambda x: jvp(inner, (x,), (one,))[1]

    return nest(fn, order)(s)


class ModuleHigherOrder(HigherOrderTerms):
    """Cubic and quartic terms of an additive module on inputs ``X`` (module docstring)."""

    def __init__(self, module: torch.nn.Module, units: UnitLayout, X: torch.Tensor, output=None):
        self.module, self.units, self.X, self.output = module, units, X, output
        self.scatter = UnitScatter(module, units)
        ref = next(iter(self.scatter.base.values()))
        self.dtype, self.device = ref.dtype, ref.device
        self.p, self.N, self.n_units = self.scatter.p, int(X.shape[0]), self.scatter.m
        with torch.no_grad():
            self.f0 = self.module_output(torch.zeros(self.p, self.scatter.m, dtype=self.dtype, device=self.device))
        self.C = int(self.f0.shape[1])

    def module_output(self, W: torch.Tensor) -> torch.Tensor:
        """The module's output ``f(W)`` (``(N, C)``) with the unit weights ``W`` (``(p, m)``)."""
        out = functional_call(self.module, self.scatter(W), (self.X,))
        if self.output is not None:
            out = self.output(out)
        return out.reshape(out.shape[0], -1)

    def _along(self, columns: dict[int, torch.Tensor]):
        """``s ↦ f(Σ_j s_j w_j e_jᵀ)`` for the given unit columns (all other units zero)."""
        zero = torch.zeros(self.p, self.scatter.m, dtype=self.dtype, device=self.device)

        def f(*s):
            W = zero
            for (i, w), sj in zip(columns.items(), s, strict=True):
                W = W.index_put((torch.arange(self.p, device=self.device), torch.full((self.p,), i)), sj * w)
            return self.module_output(W)

        return f

    def _term(self, W: torch.Tensor, order: int) -> torch.Tensor:
        s0 = torch.zeros((), dtype=self.dtype, device=self.device)
        total = torch.zeros(self.N, self.C, dtype=self.dtype, device=self.device)
        for i in range(W.shape[1]):
            f = self._along({0: W[:, i]})
            total = total + _derivative(f, order, s0) / math.factorial(order)
        return total

    def cubic(self, W):
        return self._term(W, 3)

    def quartic(self, W):
        return self._term(W, 4)

    def _gradient(self, W, R, order: int) -> torch.Tensor:
        Wd = W.detach().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad((R * self._term(Wd, order)).sum(), Wd)
        return g.detach()

    def cubic_gradient(self, W, R):
        return self._gradient(W, R, 3)

    def quartic_gradient(self, W, R):
        return self._gradient(W, R, 4)

    def take(self, idx) -> ModuleHigherOrder:
        idx = torch.as_tensor(idx, dtype=torch.long, device=self.X.device).reshape(-1)
        return ModuleHigherOrder(self.module, self.units, self.X[idx], self.output)

    def cross_unit_ratio(self, generator: torch.Generator | None = None) -> float:
        """``|∂_s ∂_t² f(s w₁ + t w₂)| / |∂_s³ f(s w₁)|`` at zero for two random units (0 for additive modules)."""
        if self.scatter.m < 2:
            return 0.0
        g = generator if generator is not None else torch.Generator().manual_seed(0)
        w1, w2 = (torch.randn(self.p, generator=g, dtype=torch.float64).to(self.dtype) for _ in range(2))
        f = self._along({0: w1, 1: w2})
        s0 = torch.zeros((), dtype=self.dtype, device=self.device)
        one = torch.ones_like(s0)

        def d_t2(s):
            def in_t(t):
                return jvp(lambda u: f(s, u), (t,), (one,))[1]

            return jvp(in_t, (s0,), (one,))[1]

        mixed = jvp(d_t2, (s0,), (one,))[1]
        own = _derivative(self._along({0: w1}), 3, s0)
        scale = float(own.abs().max()) + float(self._term(torch.stack([w2, w2], 1), 3).abs().max()) + 1e-300
        return float(mixed.abs().max()) / scale


def higher_order_terms(module, X, *, units: UnitLayout | None = None, output=None) -> ModuleHigherOrder:
    """Cubic and quartic normal-form terms of ``module``'s units on inputs ``X``, by ``torch.func``.

    Parameters
    ----------
    module : torch.nn.Module
        Float64 recommended; parameters outside the units stay at their values.
    X : torch.Tensor, shape (N, ...)
    units : UnitLayout, optional
        The unit axis (default ``module.units``, as for :mod:`nqf.networks`).
    output : callable, optional
        Maps the module's raw output to ``(N, C)``.

    Returns
    -------
    ModuleHigherOrder

    Raises
    ------
    NormalFormError
        The module is not additive at third order (a cross-unit cubic term, e.g. a softmax gate).
    """
    if not isinstance(module, torch.nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    layout = units if units is not None else getattr(module, "units", None)
    if not isinstance(layout, UnitLayout):
        raise InvalidTypeError(f"`units` must be a UnitLayout (or the module's .units); found {type(layout).__name__}")
    X = check_inputs("X", X)
    terms = ModuleHigherOrder(module, layout, X, output)
    ratio = terms.cross_unit_ratio()
    if ratio > ADDITIVE_RTOL:
        raise NormalFormError(
            f"`module` must be additive over its units at third order; found a cross-unit cubic term "
            f"{ratio:.2g} × the one-unit one (e.g. a softmax gate mixing the units)"
        )
    return terms
