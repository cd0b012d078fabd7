r"""The cubic and quartic terms of any additive module, by nested forward-mode derivatives (no ``p³``/``p⁴`` array).

For the one-unit function ``f_x(w)`` of the reduced copy (all other units at zero),
``g(s) = f_x(s w)`` gives ``T_3(x)[w^3] = g'''(0)/6`` and ``T_4(x)[w^4] = g''''(0)/24``: four nested
:func:`torch.func.jvp` along ``w`` in one pass (the outer jvp returns the third derivative as its
primal and the fourth as its tangent).  Samples are vectorised with :func:`torch.func.vmap` in chunks
sized to a memory budget, columns of ``W`` in blocks; the gradient is a reverse pass
(:func:`torch.func.jacrev`, two cotangents: cubic and quartic) of that.  The sum over units is the
module's only when it is additive at these orders; :func:`higher_order_terms` checks that the
mixed third and fourth derivatives of the two-unit copy vanish and refuses the module otherwise.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.func import jacrev, jvp, vmap

from .._validation import as_tensor, tolerance
from ..errors import InvalidParameterError, InvalidTypeError, NormalFormError
from ..structure import HigherOrderTerms
from ._discover import select_units
from ._matrix_free import COLUMN_BLOCK, _saved_bytes
from ._narrowed import evaluation_mode, faithful_reduced_copy
from ._unit_function import UnitFunction
from ._units import UnitLayout, UnitSlice

__all__ = ["ModuleHigherOrder", "higher_order_terms"]

#: Bytes one vectorised chunk may use.
BUDGET = 256 * 2**20
#: Samples on which additivity at orders 3 and 4 is checked.
CHECK_SAMPLES = 8


def _taylor34(g: Callable[[torch.Tensor], torch.Tensor], s0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(g'''(0), g''''(0))`` of a function of a scalar ``s``, by four nested jvps."""
    one = torch.ones_like(s0)

    def d(h):
        return lambda s: jvp(h, (s,), (one,))[1]

    out = jvp(d(d(d(g))), (s0,), (one,))
    return out[0], out[1]


def _taylor234(g, s0):
    """``(g''(0), g'''(0), g''''(0))``."""
    one = torch.ones_like(s0)

    def d(h):
        return lambda s: jvp(h, (s,), (one,))[1]

    d3, d4 = _taylor34(g, s0)
    return d(d(g))(s0), d3, d4


class ModuleHigherOrder(HigherOrderTerms):
    """Cubic and quartic terms of a module's one-unit function on samples ``X`` (see :func:`higher_order_terms`)."""

    __slots__ = ("fn", "X", "chunk", "_per_sample")

    def __init__(self, fn: UnitFunction, X: torch.Tensor, C: int, chunk: int | None = None):
        super().__init__(fn.p, X.shape[0], C, X.dtype, X.device)
        self.fn, self.X, self.chunk = fn, X, chunk
        self._per_sample = None

    def _terms(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``(T_3(x)[w^3], T_4(x)[w^4])``, shape ``(2, C)``."""
        d3, d4 = _taylor34(lambda s: self.fn({0: s * w}, x), torch.zeros((), dtype=w.dtype, device=w.device))
        return torch.stack([d3 / 6.0, d4 / 24.0])

    def _chunks(self, n_columns: int):
        if self.chunk is not None:
            size = int(self.chunk)
        else:
            if self._per_sample is None:
                self._per_sample = _saved_bytes(self.fn, self.X[0])
            size = BUDGET // max(1, 32 * n_columns * self._per_sample)
        size = max(1, min(self.N, size))
        return [slice(s, min(s + size, self.N)) for s in range(0, self.N, size)]

    def _both(self, W) -> torch.Tensor:
        """``Σ_i (T_3, T_4)(x_n)[w_i]``, shape ``(2, N, C)``."""
        W = self._W(W)
        parts = []
        per = vmap(vmap(self._terms, in_dims=(None, 0)), in_dims=(1, None))  # (m, n, 2, C)
        with evaluation_mode():
            for c in range(0, W.shape[1], COLUMN_BLOCK):
                Wb = W[:, c : c + COLUMN_BLOCK]
                rows = [per(Wb, self.X[sl]).sum(0) for sl in self._chunks(Wb.shape[1])]
                parts.append(torch.cat(rows, 0))
        if not parts:
            return torch.zeros(2, self.N, self.C, dtype=self.dtype, device=self.device)
        return torch.stack(parts).sum(0).permute(1, 0, 2)

    def _gradients(self, W, R) -> torch.Tensor:
        """Gradients of ``Σ R·cubic`` and ``Σ R·quartic``, shape ``(2, p, m)``."""
        W, R = self._W(W), self._R(R)
        out = torch.zeros(2, *W.shape, dtype=self.dtype, device=self.device)

        def weighted(w, xs, r):  # (2,)
            return (vmap(self._terms, in_dims=(None, 0))(w, xs) * r[:, None, :]).sum((0, 2))

        per = vmap(jacrev(weighted), in_dims=(1, None, None), out_dims=2)  # (2, p, m)
        with evaluation_mode():
            for c in range(0, W.shape[1], COLUMN_BLOCK):
                Wb = W[:, c : c + COLUMN_BLOCK]
                for sl in self._chunks(2 * Wb.shape[1]):
                    out[:, :, c : c + COLUMN_BLOCK] += per(Wb, self.X[sl], R[sl])
        return out

    def cubic(self, W) -> torch.Tensor:
        return self._both(W)[0]

    def quartic(self, W) -> torch.Tensor:
        return self._both(W)[1]

    def value(self, W) -> torch.Tensor:
        return self._both(W).sum(0)

    def cubic_gradient(self, W, R) -> torch.Tensor:
        return self._gradients(W, R)[0]

    def quartic_gradient(self, W, R) -> torch.Tensor:
        return self._gradients(W, R)[1]

    def gradient(self, W, R) -> torch.Tensor:
        return self._gradients(W, R).sum(0)

    def take(self, idx) -> ModuleHigherOrder:
        return ModuleHigherOrder(self.fn, self.X[idx], self.C, self.chunk)


def _cross_defect(fn2: UnitFunction, X: torch.Tensor, seed: int) -> tuple[float, float]:
    """``max |h^{(k)} − h_1^{(k)} − h_2^{(k)}|`` over ``k = 3, 4`` and the scale of all ``k = 2, 3, 4`` terms.

    ``h(s) = f(w_1 = s v_1, w_2 = s v_2)``, ``h_j`` with only unit ``j``: additive at orders 3 and 4
    exactly when the mixed derivatives vanish, i.e. ``h`` = ``h_1 + h_2`` there.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed + 11)
    v1, v2 = (torch.randn(fn2.p, generator=gen, dtype=X.dtype).to(X.device) for _ in range(2))
    zero = torch.zeros((), dtype=X.dtype, device=X.device)

    def derivs(units_of_s):
        return vmap(lambda x: torch.stack(_taylor234(lambda s: fn2(units_of_s(s), x), zero)))(X)  # (n, 3, C)

    with evaluation_mode():
        both = derivs(lambda s: {0: s * v1, 1: s * v2})
        one = derivs(lambda s: {0: s * v1})
        two = derivs(lambda s: {1: s * v2})
    defect = (both - one - two)[:, 1:].abs().max()
    scale = torch.stack([one.abs().max(), two.abs().max()]).max()
    return float(defect), float(scale)


def _layout_of(module: nn.Module, units) -> UnitLayout:
    if units is None:
        found = getattr(module, "units", None)
        if isinstance(found, UnitLayout):
            return found
        return select_units(module).layout
    if isinstance(units, UnitLayout):
        return units
    if isinstance(units, (list, tuple)) and units and all(isinstance(s, UnitSlice) for s in units):
        return UnitLayout(list(units))
    raise InvalidTypeError(f"`units` must be a UnitLayout, a sequence of UnitSlice or None; found {units!r}")


def higher_order_terms(
    module: nn.Module, X, *, units=None, output=None, chunk=None, seed: int = 0
) -> ModuleHigherOrder:
    """Cubic and quartic terms of ``module``'s normal form on samples ``X``, by ``torch.func``.

    Parameters
    ----------
    module : torch.nn.Module
        Called as ``module(x[None])``; not modified.
    X : array_like, shape (N, ...)
    units : UnitLayout or sequence of UnitSlice, optional
        Default: ``module.units`` when it has one, else :func:`select_units`.
    output : callable, optional
        Maps the module's output to the quantity expanded (as in :func:`from_module`).
    chunk : int, optional
        Samples per vectorised chunk (default: from a 256 MiB budget).
    seed : int
        Seed of the random directions of the additivity check.

    Returns
    -------
    ModuleHigherOrder
        ``cubic(W)``, ``quartic(W)``, their gradients; ``W`` of shape ``(p, m)`` in the layout's unit order.

    Raises
    ------
    NormalFormError
        The module is not additive over units at orders 3 and 4 (a mixed derivative
        ``∂³/∂s∂t² f(s w_1 + t w_2)`` or a fourth-order one does not vanish).
    """
    if not isinstance(module, nn.Module):
        raise InvalidTypeError(f"`module` must be a torch.nn.Module; found {type(module).__name__}")
    params = dict(module.named_parameters())
    if not params:
        raise InvalidParameterError("`module` has no parameters")
    first = next(iter(params.values()))
    X = as_tensor("X", X, dtype=first.dtype, device=first.device)
    if X.ndim < 1 or X.shape[0] == 0:
        raise InvalidParameterError(f"`X` must have a leading sample axis with N ≥ 1; found shape {tuple(X.shape)}")
    layout = _layout_of(module, units)
    lay = layout.resolve(params)
    if lay.m < 2:
        raise InvalidParameterError(f"`units` must describe at least 2 units (for the additivity check); found {lay.m}")
    full = copy.deepcopy(module).eval()
    sub = X[: min(CHECK_SAMPLES, X.shape[0])]
    fns = []
    for k in (1, 2):
        found = faithful_reduced_copy(full, lay, sub, n_units=k, output=output, seed=seed)
        red, red_lay = (full, lay) if found is None else found[:2]
        fns.append(UnitFunction(red, red_lay, output))
    fn, fn2 = fns
    defect, scale = _cross_defect(fn2, sub, seed)
    if defect > tolerance(X.dtype, 1e4) * max(scale, 1e-300):
        raise NormalFormError(
            f"`module` must be additive over its units at orders 3 and 4 ({layout.describe(params)}); found "
            f"mixed third/fourth derivatives between two units of max {defect:.3e} (scale of the one-unit "
            f"terms {scale:.3e}): the cubic and quartic terms are not sums over units"
        )
    with evaluation_mode(), torch.no_grad():
        C = fn({}, X[0]).numel()
    return ModuleHigherOrder(fn, X, C, chunk)
