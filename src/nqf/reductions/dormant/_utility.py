r"""The utility of a dormant unit and the first order that carries signal (docs/theory.md, "The degree-k clock").

For a term ``g`` of degree ``k`` and the residual ``r = y − f`` at the current weights, a dormant unit of
direction ``u`` (``‖u‖ = 1``) and norm ``ρ`` grows as ``dρ/dt = k U(u) ρ^{k−1}``, with the *utility*

.. math::  U(u) = \frac1N Σ_n ⟨r_n, g_n(u)⟩.

:func:`utility_maximum` maximises ``U`` on the sphere (shifted power iterations from many starts, each
step one gradient of ``g``, never a ``p^k`` array); :func:`leading_order` does so for each order and
names the first whose maximum is above round-off.  The round-off bound is the summation bound
``|fl(Σ_j a_j) − Σ_j a_j| ≤ n u Σ_j |a_j|`` (``u`` the unit round-off, ``n = N·C + p`` terms), applied to
``U``'s own terms at the maximiser: nothing is tuned.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..._validation import not_one_of
from ...errors import InvalidParameterError
from ...results import Result, to_jsonable
from ._terms import HomogeneousTerm, check_residual

__all__ = ["UtilityMaximum", "LeadingOrder", "utility_maximum", "leading_order"]

#: Random starts of the maximisation (the best is kept; more starts: more local maxima seen).
STARTS = 24
#: Shifted power iterations per start (stops earlier when the utility no longer rises).
ITERATIONS = 400


@dataclass(frozen=True)
class UtilityMaximum(Result):
    """The largest utility of one order on the unit sphere.

    Attributes
    ----------
    order : int
        ``k``.
    value : float
        ``U* = max_{‖u‖=1} U(u)``.
    tolerance : float
        Round-off bound of ``U`` at the maximiser: ``U*`` at or below it is no signal.
    direction : ndarray, shape (p,)
        The maximiser ``u*``.
    null : float
        The largest ``U*`` over the residual's rows shuffled (a permutation test: what a finite sample
        gives without any relation between inputs and targets); 0 when no shuffles were asked for.  It
        does not decide whether a unit grows (any ``U* > 0`` does): it says whether what grows is a
        relation in the data or a fit of this sample.
    """

    order: int
    value: float
    tolerance: float
    direction: np.ndarray = field(repr=False)
    null: float = 0.0

    @property
    def carries_signal(self) -> bool:
        """``U*`` above its round-off bound: a dormant unit grows at this order."""
        return bool(self.value > self.tolerance)

    @property
    def beyond_shuffled(self) -> bool:
        """``U*`` above the largest ``U*`` of the shuffled targets (False when none were computed): the growth
        is driven by a relation between inputs and targets, not by what any finite sample lets a unit fit."""
        return bool(self.carries_signal and self.null > 0 and self.value > self.null)

    def to_dict(self) -> dict:
        return to_jsonable(
            {
                "order": self.order,
                "value": self.value,
                "tolerance": self.tolerance,
                "null": self.null,
                "carries_signal": self.carries_signal,
            }
        )


@dataclass(frozen=True)
class LeadingOrder(Result):
    """The first order of a layer's expansion that carries signal on the data.

    Attributes
    ----------
    maxima : tuple of UtilityMaximum
        One per order examined, in increasing order.
    order : int or None
        The lowest order whose ``U*`` is above round-off (None: none of them).
    """

    maxima: tuple
    order: int | None

    @property
    def quadratic_silent(self) -> bool:
        """The quadratic form (order 2) was examined and carries no signal."""
        return any(m.order == 2 and not m.carries_signal for m in self.maxima)

    def maximum(self, order: int) -> UtilityMaximum:
        """The :class:`UtilityMaximum` of ``order``."""
        for m in self.maxima:
            if m.order == order:
                return m
        raise not_one_of("order", order, [m.order for m in self.maxima])

    def sentence(self) -> str:
        """One sentence in words: which orders are silent and which is the first that carries signal."""
        silent = [m.order for m in self.maxima if not m.carries_signal and (self.order is None or m.order < self.order)]
        names = {2: "second", 3: "third", 4: "fourth"}
        said = " or ".join(names.get(k, f"order-{k}") for k in silent)
        if self.order is None:
            top = max(m.order for m in self.maxima)
            return (
                f"at {said} order these data carry no signal for these units (every utility at round-off); "
                f"no order up to {top} predicts a drop"
            )
        u = self.maximum(self.order)
        head = f"at {said} order these data carry no signal; " if silent else ""
        null = ""
        if u.null > 0:
            null = f", {'above' if u.beyond_shuffled else 'not above'} shuffled targets' {u.null:.4g}"
        return f"{head}the first order that does is k = {self.order} (largest utility U* = {u.value:.4g}{null})"

    def __repr__(self) -> str:
        return f"LeadingOrder(order={self.order}, U*={[round(m.value, 6) for m in self.maxima]})"

    def to_dict(self) -> dict:
        return to_jsonable({"order": self.order, "maxima": [m.to_dict() for m in self.maxima]})


def _unit_columns(W: torch.Tensor) -> torch.Tensor:
    return W / W.norm(dim=0, keepdim=True).clamp_min(1e-300)


def utility_maximum(
    term: HomogeneousTerm,
    residual,
    *,
    starts: int = STARTS,
    iterations: int = ITERATIONS,
    seed: int = 0,
    initial=None,
) -> UtilityMaximum:
    r"""``max U(u)`` over unit vectors ``u``, ``U(u) = (1/N) ⟨r, g(u)⟩`` (module docstring).

    Shifted power iterations ``u ← normalise(∇U(u) + σ u)`` from ``starts`` random unit vectors (and the
    columns of ``initial``), all at once for an additive term; ``σ`` doubles for a start whose utility fell,
    so each start's utility never decreases (Kolda and Mayo's SS-HOPM).

    Parameters
    ----------
    term : HomogeneousTerm
    residual : array_like, shape (N,) or (N, C)
        ``r = y − f`` at the weights the units are dormant around (``y − f(0)`` at zero).
    starts, iterations, seed : int
    initial : array_like, shape (p, s), optional
        Extra starting directions.

    Returns
    -------
    UtilityMaximum
    """
    R = check_residual(term, residual)
    gen = torch.Generator().manual_seed(int(seed))
    U0 = torch.randn(term.p, int(starts), generator=gen, dtype=term.dtype)
    if initial is not None:
        U0 = torch.cat([U0, torch.as_tensor(initial, dtype=term.dtype).reshape(term.p, -1)], 1)
    U = _unit_columns(U0)
    N, k = term.N, term.degree

    def grad_and_value(V):
        if term.additive:
            G = term.gradient(V, R) / N
            return G, (V * G).sum(0) / k
        cols = [term.gradient(V[:, i : i + 1], R) / N for i in range(V.shape[1])]
        G = torch.cat(cols, 1)
        return G, (V * G).sum(0) / k

    G, val = grad_and_value(U)
    sigma = torch.full_like(val, 1.0) * (G.norm(dim=0).max().clamp_min(1e-300))
    for _ in range(int(iterations)):
        cand = _unit_columns(G + sigma * U)
        Gc, vc = grad_and_value(cand)
        better = vc >= val
        U = torch.where(better, cand, U)
        G = torch.where(better, Gc, G)
        gain = torch.where(better, vc - val, torch.zeros_like(val))
        val = torch.where(better, vc, val)
        sigma = torch.where(better, sigma, 2 * sigma)
        if float(gain.max()) <= 1e-13 * max(float(val.abs().max()), 1e-300):
            break
    best = int(torch.argmax(val))
    u = U[:, best : best + 1]
    per = R * term.value(u)  # (N, C): the terms of U* at the maximiser
    n_terms = term.N * term.C + term.p
    unit_roundoff = float(torch.finfo(term.dtype).eps) / 2
    tol = n_terms * unit_roundoff * float(per.abs().sum()) / N
    return UtilityMaximum(order=k, value=float(val[best]), tolerance=tol, direction=u[:, 0].detach().numpy().copy())


def leading_order(terms, residual, *, shuffles: int = 0, starts: int = STARTS, seed: int = 0) -> LeadingOrder:
    """The first of ``terms`` (by degree) whose utility is above round-off (and above shuffled targets').

    Parameters
    ----------
    terms : sequence of HomogeneousTerm
        The orders to examine (e.g. ``unit_term(op, 2)``, ``unit_term(higher, 3)``, ``unit_term(higher, 4)``).
    residual : array_like, shape (N,) or (N, C)
        ``y − f`` at the weights the units are dormant around.
    shuffles : int
        ``B``: also maximise the utility on ``B`` random row permutations of the residual
        (:attr:`UtilityMaximum.null`, a permutation test at level ``1/(B + 1)``).  The leading order is
        decided by round-off alone: a finite sample's spurious correlation makes units grow too.

    Returns
    -------
    LeadingOrder
    """
    terms = sorted(terms, key=lambda t: t.degree)
    if not terms:
        raise InvalidParameterError("`terms` must hold at least one HomogeneousTerm; found none")
    R = check_residual(terms[0], residual)
    gen = torch.Generator().manual_seed(int(seed) + 7)
    perms = [torch.randperm(R.shape[0], generator=gen) for _ in range(int(shuffles))]
    maxima = []
    for t in terms:
        best = utility_maximum(t, R, starts=starts, seed=seed)
        null = max((utility_maximum(t, R[p], starts=starts, seed=seed).value for p in perms), default=0.0)
        maxima.append(dataclasses.replace(best, null=max(null, 0.0)))
    maxima = tuple(maxima)
    order = next((m.order for m in maxima if m.carries_signal), None)
    return LeadingOrder(maxima=maxima, order=order)


def aligned_escape_time(order: int, utility: float, norm: float, *, rate: float = 0.0) -> float:
    r"""The blow-up time of a unit of norm ``ρ₀`` aligned with the maximiser of an order ``k > 2``.

    Alone, ``dρ/dt = kU*ρ^{k−1}`` blows up at ``ρ₀^{2−k} / (k (k−2) U*)``.  With an order-2 rate ``ζ = 2U*₂ > 0``
    along the same direction (``dρ/dt = ζρ + kU*ρ^{k−1}``; ``s = ρ^{2−k}`` is then linear) it blows up at
    ``ln(1 + ζ/(kU*ρ₀^{k−2})) / ((k−2)ζ)``: ``ln(1/ρ₀)/ζ`` while the quadratic rate leads, the power law once
    ``ρ₀`` is above the crossover ``(ζ/(kU*))^{1/(k−2)}``.  For ``k = 2`` the NQF's ``ln(1/ρ₀²)/(4U*)`` is not
    this (no blow-up): refused."""
    if order <= 2:
        raise InvalidParameterError(f"`order` must be above 2 for a power-law escape; found {order!r}")
    if not utility > 0:
        return math.inf
    scale = order * float(utility) * float(norm) ** (order - 2)
    if rate > 0:
        return math.log1p(float(rate) / scale) / ((order - 2) * float(rate))
    return 1.0 / ((order - 2) * scale)
