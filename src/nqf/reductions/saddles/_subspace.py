r"""Drop times from the NQF's flow restricted to the span of the saddle sequence (the saddle-subspace flow).

The saddle sequence names the stationary points ``M_k = V_k V_kᵀ`` the flow visits and the directions ``q_k``
along which it leaves them.  Let ``Q`` (``p × K``, orthonormal) span every ``V_k`` and ``q_k``.  Restricting the
units to that span, ``W = Q C``, gives the Galerkin reduction of the flow ``Ẇ = −2 G(M) W``:

.. math::  \dot C = −2\, Qᵀ G(Q C Cᵀ Qᵀ) Q\, C, \qquad C(0) = \text{a factor of } Qᵀ M(0) Q,

the NQF of the compressed operator ``A_K = Qᵀ A Q`` (:meth:`nqf.structure.StructureOperator.compress`).  Every
saddle of the sequence is a stationary point of the reduced flow and every escape direction lies in it, so the
reduced flow runs through the same plateaus; unlike the leading order ``τ_k ln(1/ε)`` it keeps what the clock
beyond leading order needs: the ``O(1)`` transits between saddles, the growth of the next escape direction during
the earlier plateaus and overlapping plateaus.  What it leaves out is the part of ``W`` outside the span; at
``M(0) = εI`` that part only enters the loss at ``O(ε)`` until its own direction escapes, and a direction that
escapes is, by construction, in the span.  The cost is that of the NQF in ``K`` dimensions (``K ≤`` the sum of the
saddles' ranks and escape multiplicities), with the operator's factored products.

A drop's time is the downward crossing of the midpoint ``(L_{k−1} + L_k)/2`` of the sequence's levels by the
reduced loss, the same definition :func:`nqf.curves.compare_staircase` applies to a simulated curve.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...dynamics import integrate_factor
from ...structure import ProjectedStructure
from .._timing import midpoint_levels
from ._clock import start_factor

__all__ = ["saddle_span", "subspace_times", "HORIZON"]

#: The reduced flow is integrated to this multiple of the latest leading-order drop time (then NaN for a drop
#: it has not reached).
HORIZON = 4.0


def saddle_span(saddles) -> torch.Tensor:
    """Orthonormal basis ``Q`` (``p × K``) of the span of every saddle's factor ``V_k`` and escape directions."""
    cols = [s.V for s in saddles if s.V.shape[1]]
    cols += [s.escape_direction for s in saddles if s.escape_direction is not None]
    p = int(saddles[0].M.shape[0])
    if not cols:
        return torch.zeros(p, 0, dtype=torch.float64)
    U, S, _ = torch.linalg.svd(torch.cat(cols, 1).to(torch.float64), full_matrices=False)
    return U[:, S > 1e-10 * float(S[0])]


def subspace_times(
    prob, saddles, eps: float, *, M0=None, t_max: float | None = None, through: int | None = None
) -> np.ndarray:
    """Drop times of the saddle-subspace flow (module docstring): the downward crossings of the midpoints.

    Parameters
    ----------
    prob : LossProblem
        The sequence's loss (operator, targets, offset).
    saddles : sequence of Saddle
        The saddle sequence, ``saddles[0]`` at ``M = 0``.
    eps : float in (0, 1)
        ``M(0) = εI`` (or the scale of ``M0``).
    M0 : torch.Tensor, shape (p, p), optional
        A start other than ``εI``.
    t_max : float, optional
        Integrate to this time (default :data:`HORIZON` times the latest leading-order time of the drops timed).
    through : int, optional
        Time drops ``1 … through`` only (default: all); the flow stops at the last of them, later drops are NaN.

    Returns
    -------
    numpy.ndarray, shape (K,)
        NaN for a drop the reduced loss does not reach by ``t_max``.
    """
    levels = np.array([s.loss for s in saddles], dtype=float)
    mids = midpoint_levels(levels)
    if mids.size == 0:
        return np.zeros(0)
    K = mids.size
    through = K if through is None else max(0, min(int(through), K))
    if through == 0:
        return np.full(K, math.nan)
    mids = mids[:through]
    Q = saddle_span(saddles)
    if t_max is None:
        taus = np.array([s.tau for s in saddles[1 : through + 1]], dtype=float)
        t_max = HORIZON * float(np.nanmax(taus)) * math.log(1.0 / eps) + HORIZON / max(saddles[0].escape_rate, 1e-300)
    # the lazy projection (factored products of the operator's own structure), not compress's dense K × K arrays:
    # N·C·K² entries per product cost ~100× the structured paths (2-head transformer on digits: 96 vs 1 ms)
    op = ProjectedStructure(prob.op, Q.to(dtype=prob.op.dtype, device=prob.op.device))
    M0_K = None if M0 is None else Q.T @ torch.as_tensor(M0, dtype=torch.float64) @ Q  # Qᵀ M(0) Q (εI for None)
    L0 = start_factor(Q.shape[1], eps, M0_K).to(dtype=op.dtype, device=op.device)
    shape = tuple(L0.shape)
    y, f0 = prob.y, prob.f0
    cache: dict = {}

    def loss(z) -> float:
        key = z.tobytes()
        if key not in cache:
            cache.clear()
            L = torch.as_tensor(z, dtype=op.dtype).to(op.device).reshape(shape)
            r = op.forward_factor(L) - y if f0 is None else f0 + op.forward_factor(L) - y
            cache[key] = prob.loss_of_residual(r)
        return cache[key]

    events = []
    for k, mid in enumerate(mids):

        def event(_t, z, mid=mid):
            return loss(z) - mid

        event.direction = -1.0
        event.terminal = k == mids.size - 1
        events.append(event)
    atol = 1e-9 * math.sqrt(float(torch.linalg.eigvalsh(L0 @ L0.T).max()))
    sol = integrate_factor(op, y, L0, (0.0, float(t_max)), rtol=1e-9, atol=atol, method="DOP853", events=events)
    times = [float(te[0]) if len(te) else math.nan for te in sol.t_events]
    return np.array(times + [math.nan] * (K - through))
