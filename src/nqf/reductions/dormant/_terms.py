r"""Homogeneous terms: the one piece of a model the dormant phase sees (docs/theory.md, "The degree-k clock").

A *homogeneous term of degree k* is a map ``W ↦ g(W)`` of shape ``(N, C)`` with ``g(sW) = s^k g(W)``,
evaluated matrix-free, with the gradient ``∇_W ⟨R, g(W)⟩``.  Three kinds:

* :func:`unit_term` — order ``k = 2, 3, 4`` of an additive layer (``g(W) = Σ_i T_k(x)[w_i^{⊗k}]``, the
  columns of ``W`` are the units and are independent of each other);
* the order-2 term of a structure operator (``g(W) = 𝒜(W Wᵀ)``, also additive over units);
* :func:`nqf.reductions.dormant.chain_term` — a whole chain of layers, every parameter at the same small
  scale, homogeneous of the chain's degree (one block: ``W`` is the flattened parameter vector).
"""

from __future__ import annotations

import torch

from ...errors import InvalidParameterError, InvalidTypeError, ShapeError
from ...structure import HigherOrderTerms, StructureOperator

__all__ = ["HomogeneousTerm", "unit_term"]


class HomogeneousTerm:
    """A homogeneous term ``g`` of degree ``k`` evaluated on ``W`` of shape ``(p, m)``.

    Attributes
    ----------
    degree : int
        ``k``: ``g(sW) = s^k g(W)``.
    p : int
        Rows of ``W`` (parameters of one unit, or of the whole chain).
    N, C : int
        Samples and outputs of ``g(W)``.
    additive : bool
        ``g`` is a sum over the columns of ``W`` (units): column ``i`` of the gradient depends on
        column ``i`` of ``W`` only.  A chain is one block (``m = 1``).
    name : str
        What the term is (for messages).
    """

    __slots__ = ("degree", "p", "N", "C", "additive", "name", "dtype")

    def __init__(self, degree: int, p: int, N: int, C: int, additive: bool, name: str, dtype: torch.dtype):
        self.degree, self.p, self.N, self.C = int(degree), int(p), int(N), int(C)
        self.additive, self.name, self.dtype = bool(additive), str(name), dtype

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, k={self.degree}, p={self.p}, N={self.N}, C={self.C})"

    def value(self, W: torch.Tensor) -> torch.Tensor:
        """``g(W)``, shape ``(N, C)``."""
        raise NotImplementedError

    def gradient(self, W: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """``∇_W ⟨R, g(W)⟩``, shape ``(p, m)``."""
        raise NotImplementedError

    def per_column(self, W: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """``⟨R, g(w_i)⟩`` for each column ``w_i`` of ``W``, shape ``(m,)``: by Euler's identity
        ``⟨w, ∇⟨R, g(w)⟩⟩ = k ⟨R, g(w)⟩`` for an additive term (one gradient call for all columns)."""
        if self.additive:
            return (W * self.gradient(W, R)).sum(0) / self.degree
        return torch.stack([(R * self.value(W[:, i : i + 1])).sum() for i in range(W.shape[1])])


class _UnitOrder(HomogeneousTerm):
    """Order 3 or 4 of a :class:`nqf.structure.HigherOrderTerms`."""

    __slots__ = ("terms",)

    def __init__(self, terms: HigherOrderTerms, order: int):
        super().__init__(order, terms.p, terms.N, terms.C, True, f"order {order} of the units", terms.dtype)
        self.terms = terms

    def value(self, W):
        return self.terms.cubic(W) if self.degree == 3 else self.terms.quartic(W)

    def gradient(self, W, R):
        return self.terms.cubic_gradient(W, R) if self.degree == 3 else self.terms.quartic_gradient(W, R)


class _Quadratic(HomogeneousTerm):
    """Order 2: the structure operator, ``g(W) = 𝒜(W Wᵀ)``, ``∇⟨R, g⟩ = 2 𝒜*(R) W``."""

    __slots__ = ("op",)

    def __init__(self, op: StructureOperator):
        super().__init__(2, op.p, op.n_samples, op.n_outputs, True, "the quadratic form", op.dtype)
        self.op = op

    def value(self, W):
        return self.op.forward_factor(W.to(self.op.dtype))

    def gradient(self, W, R):
        return 2.0 * self.op.adjoint_apply(R.to(self.op.dtype), W.to(self.op.dtype))


def unit_term(source, order: int) -> HomogeneousTerm:
    """Order ``k`` of an additive layer as a :class:`HomogeneousTerm` (the columns of ``W`` are the units).

    Parameters
    ----------
    source : StructureOperator (order 2) or HigherOrderTerms (orders 3 and 4)
        :func:`nqf.structure.mlp` / :func:`nqf.modules.from_module` for the quadratic form;
        :func:`nqf.structure.mlp_higher_order` / :func:`nqf.modules.higher_order_terms` for the next orders.
    order : {2, 3, 4}

    Raises
    ------
    InvalidParameterError
        ``order`` outside 2–4, or a source that does not carry it.
    """
    if isinstance(order, bool) or order not in (2, 3, 4):
        raise InvalidParameterError(f"`order` must be 2, 3 or 4; found {order!r}")
    if order == 2:
        if not isinstance(source, StructureOperator):
            raise InvalidTypeError(
                f"`source` of order 2 must be a StructureOperator (the quadratic form); found {type(source).__name__}"
            )
        return _Quadratic(source)
    if not isinstance(source, HigherOrderTerms):
        raise InvalidTypeError(
            f"`source` of order {order} must be a HigherOrderTerms (nqf.structure.mlp_higher_order or "
            f"nqf.modules.higher_order_terms); found {type(source).__name__}"
        )
    return _UnitOrder(source, order)


def check_residual(term: HomogeneousTerm, R) -> torch.Tensor:
    """``R`` as a float64 tensor of shape ``(N, C)`` (a 1-D ``R`` is one output)."""
    R = torch.as_tensor(R, dtype=term.dtype)
    if R.ndim == 1:
        R = R[:, None]
    if tuple(R.shape) != (term.N, term.C):
        raise ShapeError(f"`residual` must have shape (N, C) = ({term.N}, {term.C}); found {tuple(R.shape)}")
    if not torch.isfinite(R).all():
        raise InvalidParameterError("`residual` must be finite; found NaN or inf")
    return R
