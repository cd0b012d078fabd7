r"""Heteroclinic orbits of the saddle sequence in the normalised clock ``s`` (docs/theory.md §4.6).

From a stationary point ``M_k = V Vᵀ`` the flow leaves along the escape
directions ``Q`` (``p × m``) at rate ``4h``.  The orbit ``Φ(s)`` is normalised so
that ``qᵀ(Φ(s) − M_k) q ≈ e^{4 h s}`` as ``s → −∞``: it is seeded at
``V_0 = [V, √δ Q]`` at ``s_lo = −ln(1/δ)/(4h)`` (relative error ``O(δ)``) and
integrated with the factored gradient flow of :func:`nqf.dynamics._flow.integrate_factor`
(DOP853, dense output) until the loss has fallen to ``floor``.  A level crossing
on ``Φ`` is bracketed on a grid and bisected on the dense output
(:func:`nqf.reductions.crossing_time`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...dynamics import integrate_factor
from .._timing import crossing_time, leading_switch_time

__all__ = ["Heteroclinic"]


class Heteroclinic:
    """``Φ(s)`` from a saddle along ``Q`` (see the module docstring).

    Parameters
    ----------
    prob : LossProblem
    V : torch.Tensor, shape (p, r)
        Factor of the saddle ``M_k``.
    Q : torch.Tensor, shape (p, m)
        Orthonormal escape directions.
    h : float
        ``λ_max(−P G(M_k) P)`` (the escape rate is ``4h``).
    floor : float
        Stop once the loss has fallen to this value.
    delta : float
        Seed size ``δ``.
    rtol, atol_scale : float
        ``solve_ivp`` tolerances; ``atol = atol_scale · √δ``.
    s_max : float
        Integrate at most to ``s = s_max``.
    n_grid : int
        Grid on which crossings are bracketed.
    mid_level : float, optional
        A loss level whose crossing is stored as ``s_mid`` (NaN without it), e.g.
        ``(L_k + L_{k+1})/2`` for the clock of :mod:`nqf.reductions.saddles._clock`.
    """

    def __init__(
        self,
        prob,
        V: torch.Tensor,
        Q: torch.Tensor,
        h: float,
        floor: float,
        *,
        delta: float,
        rtol: float,
        atol_scale: float,
        s_max: float,
        n_grid: int,
        mid_level: float | None = None,
    ):
        self.prob, self.h = prob, float(h)
        self.p, self.k = prob.p, V.shape[1] + Q.shape[1]
        self.shift = float(leading_switch_time(4.0 * self.h, delta))
        V0 = torch.cat([V, math.sqrt(delta) * Q], 1)

        def settled(_t, v):
            return self._loss_flat(v) - floor

        settled.terminal = True

        self.sol = integrate_factor(
            prob.op,
            prob.y,
            V0,
            (0.0, self.shift + s_max),
            rtol=rtol,
            atol=atol_scale * math.sqrt(delta),
            method="DOP853",
            events=[settled],
            dense_output=True,
        )
        self.s_lo, self.s_hi = -self.shift, float(self.sol.t[-1]) - self.shift
        self.grid = np.linspace(self.s_lo, self.s_hi, n_grid)
        self.grid_loss = np.array([self.loss(s) for s in self.grid])
        self.s_mid = math.nan if mid_level is None else self.crossing(mid_level)

    def _loss_flat(self, v: np.ndarray) -> float:
        V = torch.from_numpy(np.ascontiguousarray(v).reshape(self.p, self.k))
        return self.prob.loss(V @ V.T)

    def V(self, s: float) -> torch.Tensor:
        """Factor of ``Φ(s)``, shape (p, k)."""
        return torch.from_numpy(np.ascontiguousarray(self.sol.sol(s + self.shift)).reshape(self.p, self.k))

    def loss(self, s: float) -> float:
        """``L(Φ(s))``."""
        return self._loss_flat(self.sol.sol(s + self.shift))

    def crossing(self, target: float) -> float:
        """First ``s`` at which ``L(Φ(s))`` falls to ``target`` (NaN if not within the integrated window)."""
        return crossing_time(self.grid, self.grid_loss, target, direction="down", refine=self.loss)
