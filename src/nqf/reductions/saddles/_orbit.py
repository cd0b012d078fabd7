r"""Heteroclinic orbits of the saddle sequence in the normalised clock ``s`` (docs/theory.md §4.6).

From a stationary point ``M_k = V Vᵀ`` the flow leaves along the escape
directions ``Q`` (``p × m``) at rate ``4h``.  The orbit ``Φ(s)`` is normalised so
that ``qᵀ(Φ(s) − M_k) q ≈ e^{4 h s}`` as ``s → −∞``: it is seeded at
``V_0 = [V, √δ Q]`` at ``s_lo = −ln(1/δ)/(4h)`` (relative error ``O(δ)``) and
integrated with the factored gradient flow of :func:`nqf.dynamics.integrate_factor`
(DOP853, dense output) until the loss has fallen to ``floor``.  A level crossing
on ``Φ`` is bracketed on a grid and refined on the dense output by Brent's method
(:func:`nqf.reductions.crossing_time`).

The absolute tolerance follows the size of the factor: the orbit grows from
``√δ`` to ``O(1)``, and a fixed ``atol`` that resolves the seed (``10⁻¹⁵ √δ``) lies
far below the round-off of the right-hand side once the factor is ``O(1)``:
the step-size control then chases round-off noise, the steps collapse and the
integration stalls (iris, tanh MLP with a hidden bias: more than 1.4·10⁵
right-hand sides in 50 s without reaching the next plateau; 3.7·10³ with the
rule below, the same first offset to 3·10⁻¹¹ as a fixed ``atol = 10⁻¹⁷`` where
that finishes, tests/test_saddles_orbit.py).  The orbit is therefore integrated in
segments; a segment ends when the largest entry of the factor has grown by
:data:`SEGMENT_GROWTH`, and each uses ``atol = max(atol_scale √δ, ROUNDOFF_ATOL ·
u · max|V|)`` with ``u`` the float64 unit round-off.

The orbit is integrated only as far as it is read: to ``floor`` (or ``s_stop``), and further on
demand when :meth:`Heteroclinic.crossing` asks for a lower level (up to ``s_max``).  The relaxation
into the next saddle is where the integration is slow (algebraic where that saddle has marginal
directions): the first orbit of a SiLU MLP on breast_cancer took 8.9·10⁴ right-hand sides to
relax to 0.999 of the drop and 1.6·10³ to cross 0.75 of it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...dynamics import integrate_factor
from .._timing import crossing_time, leading_switch_time

__all__ = ["Heteroclinic", "solve_in_segments", "ROUNDOFF_ATOL", "SEGMENT_GROWTH"]

#: ``atol`` is never below this many unit round-offs of the factor's largest entry (see the module docstring).
ROUNDOFF_ATOL = 100.0
#: A segment of the orbit ends when the factor's largest entry has grown by this factor.
SEGMENT_GROWTH = 10.0
_U = float(np.finfo(np.float64).eps)


class _Segments:
    """Dense output of an orbit integrated in consecutive ``solve_ivp`` segments: ``sol(t)`` as one function."""

    def __init__(self, results: list):
        self.results = results
        self.starts = np.array([r.t[0] for r in results])
        self.t_end = float(results[-1].t[-1])

    def __call__(self, t: float) -> np.ndarray:
        i = int(np.clip(np.searchsorted(self.starts, t, side="right") - 1, 0, len(self.results) - 1))
        return self.results[i].sol(t)


def solve_in_segments(solve, t0: float, t_end: float, y0: np.ndarray, *, atol_min: float, atol_rel: float, stop=()):
    """Integrate ``[t0, t_end]`` in segments whose ``atol`` follows the size of the solution.

    ``solve(t0, y0, atol, events)`` runs one ``solve_ivp`` (dense output) from ``t0``; a segment
    ends when ``max|y|`` has grown by :data:`SEGMENT_GROWTH` and the next starts from its last
    state with ``atol = max(atol_min, atol_rel · max|y|)``.  Stops at ``t_end``, at the first
    terminal event of ``stop`` (events seen by every segment), or when a segment fails.
    """
    results, y = [], np.asarray(y0, dtype=np.float64)
    while True:
        size = float(np.abs(y).max())

        def grown(_t, v, limit=SEGMENT_GROWTH * size):
            return float(np.abs(v).max()) - limit

        grown.terminal = True
        res = solve(t0, y, max(atol_min, atol_rel * size), [*stop, grown])
        results.append(res)
        stopped = any(ev.size for ev in res.t_events[: len(stop)])
        if res.status != 1 or stopped or res.t[-1] >= t_end:
            return _Segments(results)
        t0, y = float(res.t[-1]), res.y[:, -1].copy()


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
        Integrate at most to ``s = s_max`` (also when :meth:`crossing` extends the orbit).
    s_stop : float, optional
        Stop the first integration at ``s = s_stop`` even above ``floor`` (default ``s_max``).
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
        s_stop: float | None = None,
    ):
        self.prob, self.h = prob, float(h)
        self.p, self.k = prob.p, V.shape[1] + Q.shape[1]
        self.shift = float(leading_switch_time(4.0 * self.h, delta))
        self._rtol, self._atol_min, self._n_grid = rtol, atol_scale * math.sqrt(delta), n_grid
        self._t_max = self.shift + s_max
        V0 = torch.cat([V, math.sqrt(delta) * Q], 1)
        t_stop = self._t_max if s_stop is None else min(self._t_max, self.shift + s_stop)
        self.sol = self._integrate(0.0, V0.reshape(-1).numpy(), t_stop, floor)
        self._set_grid()
        self.s_mid = math.nan if mid_level is None else self.crossing(mid_level)

    def _set_grid(self) -> None:
        self.s_lo, self.s_hi = -self.shift, self.sol.t_end - self.shift
        self.grid = np.linspace(self.s_lo, self.s_hi, self._n_grid)
        self.grid_loss = np.array([self.loss(s) for s in self.grid])

    def _integrate(self, t0: float, y0: np.ndarray, t_end: float, floor: float) -> _Segments:
        """The orbit from ``y0`` at ``t0`` on ``[t0, t_end]`` until the loss reaches ``floor``, in segments
        (see the module docstring)."""
        shape = (self.p, self.k)

        def settled(_t, v):
            return self._loss_flat(v) - floor

        settled.terminal = True

        def solve(t0, y, atol, events):
            L = torch.from_numpy(y).reshape(shape)
            return integrate_factor(
                self.prob.op, self.prob.y, L, (t0, t_end), rtol=self._rtol, atol=atol,
                method="DOP853", events=events, dense_output=True,
            )  # fmt: skip

        atol_rel = ROUNDOFF_ATOL * _U
        return solve_in_segments(solve, t0, t_end, y0, atol_min=self._atol_min, atol_rel=atol_rel, stop=[settled])

    def _extend(self, target: float) -> bool:
        """Integrate on from the end until the loss reaches ``target`` (at most to ``s_max``); whether it grew."""
        end = self.sol.results[-1]
        if self.sol.t_end >= self._t_max or end.status < 0:
            return False  # at the cap, or the last segment failed
        more = self._integrate(self.sol.t_end, end.y[:, -1].copy(), self._t_max, target)
        self.sol = _Segments([*self.sol.results, *more.results])
        self._set_grid()
        return True

    def _loss_flat(self, v: np.ndarray) -> float:
        V = torch.from_numpy(np.ascontiguousarray(v).reshape(self.p, self.k))
        return self.prob.loss(V @ V.T)

    def V(self, s: float) -> torch.Tensor:
        """Factor of ``Φ(s)``, shape (p, k)."""
        return torch.from_numpy(np.ascontiguousarray(self.sol(s + self.shift)).reshape(self.p, self.k))

    def loss(self, s: float) -> float:
        """``L(Φ(s))``."""
        return self._loss_flat(self.sol(s + self.shift))

    def crossing(self, target: float, *, extend: bool = True) -> float:
        """First ``s`` at which ``L(Φ(s))`` falls to ``target``; NaN if it does not within the integrated window,
        which ``extend`` first lengthens up to ``s_max`` when the orbit has not yet fallen to ``target``."""
        if extend and float(self.grid_loss.min()) > target:
            self._extend(target)
        return crossing_time(self.grid, self.grid_loss, target, direction="down", refine=self.loss)
