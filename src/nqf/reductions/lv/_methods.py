"""The solvers of :class:`nqf.reductions.lv.LotkaVolterra` (a base class of it): exact discrete GD, the stiff
log-coordinate flow, the logistic closed form, switch times, the final state, plateaus, the staircase and the
ε → 0 limit (docs/theory.md §4.1–§4.3)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from ..._validation import eps_value
from .._staircase import Staircase
from . import _final as final, _logistic as logistic, _solvers as solvers
from ._final import Plateaus
from ._solution import LVSolution

if TYPE_CHECKING:
    from ._system import LotkaVolterra


class LotkaVolterraSolvers:
    """Solver methods of :class:`~nqf.reductions.lv.LotkaVolterra`, which sets the state they read."""

    K: int
    _beta: np.ndarray
    _sparse: Any  # a scipy.sparse CSR matrix, or None
    _dense: np.ndarray | None
    _diag: np.ndarray
    _z0: np.ndarray
    is_diagonal: bool
    y2: float | None

    @property
    def _system(self) -> LotkaVolterra:
        """``self`` as the :class:`LotkaVolterra` it is (the solver functions take the system)."""
        return cast("LotkaVolterra", self)

    # ------------------------------------------- solvers, closed forms, end state
    def gd(self, eta: float, steps: int, *, record_every: int = 1) -> LVSolution:
        r"""Exact discrete gradient descent: ``z ← (1 − 2η g)² z``, ``g = C z − β``.

        This is ``M ← (I − 2ηG) M (I − 2ηG)`` restricted to the shared eigenbasis,
        exact for any ``η`` (docs/theory.md §3.1, §4.1).  Time ``t = η · steps``.

        Parameters
        ----------
        eta : float > 0
        steps : int ≥ 0
        record_every : int ≥ 1
            Store every ``record_every``-th state (the last one is always stored).

        Returns
        -------
        LVSolution
            ``method="gd"``.

        Raises
        ------
        DivergenceError
            When ``z`` becomes non-finite (step too large).
        """
        return solvers.gd(self._system, eta, steps, record_every=record_every)

    def flow(
        self,
        t,
        *,
        n_points: int = 2001,
        method: str = "auto",
        rtol: float = 1e-10,
        atol: float = 1e-10,
        dense_output: bool = True,
    ) -> LVSolution:
        r"""Gradient flow in log coordinates with an implicit stiff integrator.

        Integrates ``u = ln z``, ``du_k/dt = 4(β_k − (C e^u)_k)``, with the analytic Jacobian
        ``∂u̇/∂u = −4 C diag(e^u)`` (sparse when ``C`` is sparse), by
        :func:`scipy.integrate.solve_ivp` with an implicit method: ``"auto"`` (default) takes
        LSODA with the Jacobian in banded form when ``C`` is sparse with a narrow band
        (bandwidth ≤ ``BAND_MAX``, e.g. tridiagonal: ``O(K)`` per step), BDF with the sparse
        Jacobian (real sparse LU) for other sparse ``C``, and Radau for dense ``C``.  Starting
        values ``u(0) = ln z(0)`` are finite for any positive float64 (``ln 1e-300 ≈ −690.8``),
        and ``z = e^u`` never overflows along the exact solution (``z`` stays bounded by the
        loss); trial Newton iterates are capped at ``z ≤ 1e3 · max(1, z∞, z(0))`` so that a
        rejected overshooting step cannot produce inf/NaN.  Explicit integrators fail
        here (the system is stiff once modes saturate).  Modes with ``z(0) = 0`` stay at 0 and
        are not integrated.

        Parameters
        ----------
        t : float or array_like of shape (T,)
            Final time (then ``n_points`` output times: a union of a linear and a
            logarithmic grid on ``[0, t]``), or increasing output times starting at 0.
        n_points : int
        method : {"auto", "Radau", "BDF", "LSODA"}
        rtol, atol : float
            Integrator tolerances on ``u``.
        dense_output : bool
            Keep the interpolant (used to refine :meth:`LVSolution.switch_times`).

        Returns
        -------
        LVSolution
            ``success``/``message`` report integrator failure instead of raising.
        """
        return solvers.flow(
            self._system, t, n_points=n_points, method=method, rtol=rtol, atol=atol, dense_output=dense_output
        )

    def logistic(self, t, *, log: bool = False) -> torch.Tensor:
        r"""Exact solution for diagonal ``C`` (each mode a logistic), any sign of ``β_k``.

        With ``c = C_kk``, ``ζ = 4β_k``: ``dz/dt = ζz − 4cz²`` is a Bernoulli equation,
        ``1/z(t) = 1/z* + (1/z(0) − 1/z*) e^{−ζt}`` (``z* = β/c``), i.e.

        .. math::

            z(t) = \frac{z(0)}{e^{−ζt} + 4 c\, z(0)\, φ(t)}, \qquad φ(t) = \frac{1 − e^{−ζt}}{ζ}

        (``φ = t`` for ``ζ = 0``).  For ``β > 0`` this is
        ``z*/(1 + (z*/z(0) − 1) e^{−ζt})``; for ``β ≤ 0`` the mode decays to 0.  Evaluated
        in log space (``logaddexp``, ``expm1``), so no overflow for any ``t`` or ``z(0)``.

        Parameters
        ----------
        t : array_like, shape (T,)
            Training times ``t = η · steps`` (gradient-flow limit).
        log : bool
            Return ``ln z`` instead of ``z``.

        Returns
        -------
        torch.Tensor, shape (T, K)
        """
        return logistic.logistic(self._system, t, log=log)

    def logistic_switch_times(self, fraction: float = 0.5) -> torch.Tensor:
        r"""Exact time at which a logistic mode reaches ``fraction · z*`` (diagonal ``C``).

        ``t_k = [ln(z*_k/z_k(0) − 1) − ln(1/f − 1)]/ζ_k`` (half saturation ``f = ½``:
        ``ln(z*/z(0) − 1)/ζ``, ``≈ ln(1/ε)/ζ_k`` for ``z(0) = ε``); 0 if ``z(0) ≥ f z*``;
        ``inf`` for modes with ``β_k ≤ 0`` (they never switch on).

        Returns
        -------
        torch.Tensor, shape (K,)
        """
        return logistic.logistic_switch_times(self._system, fraction)

    def switch_times(self, solution: LVSolution | None = None, fraction: float = 0.5) -> torch.Tensor:
        """Half-saturation (switch-on) times: analytic for diagonal ``C``, else from a trajectory.

        Parameters
        ----------
        solution : LVSolution, optional
            A trajectory from :meth:`flow` or :meth:`gd`; required when ``C`` is not diagonal.
            Without it the exact logistic times (:meth:`logistic_switch_times`) are returned.
        fraction : float in (0, 1]
            Level as a fraction of the final value (``½``: half saturation).

        Returns
        -------
        torch.Tensor, shape (K,)
            ``inf`` for modes that end at 0.
        """
        return logistic.switch_times(self._system, solution, fraction)

    def final_state(self) -> torch.Tensor:
        r"""Minimiser ``z∞`` of ``L(z)`` over ``z ≥ 0`` (where gradient flow ends).

        The problem is a convex quadratic program with a PSD, possibly singular ``C``.
        Diagonal ``C``: ``z∞_k = max(β_k, 0)/C_kk``.  With the least-squares factor of
        :func:`reduce` (``L = ½‖Az − b‖²``): :func:`scipy.optimize.nnls` on ``(A, b)``,
        which never forms ``C`` and is exact for singular ``C``.  Dense ``C`` without a
        factor: the finite active-set method of :class:`nqf.reductions.lv._qp.ActiveSetQP`
        (Lawson–Hanson on the quadratic form, with ray steps along null directions of
        singular ``C``).  Sparse non-diagonal ``C``: L-BFGS-B with bounds (iterative,
        converged to a projected-gradient tolerance ``1e-12``).

        Singular dense ``C`` (e.g. underdetermined commuting sensing): the minimisers form
        a face and the flow from ``z(0)`` ends on the one selected by the dynamics — the
        ε → 0 saddle-to-saddle construction of :meth:`limit` with
        ``s_k(0) = ln z_k(0)/ln(1/ε)``, ``ε = max z(0)`` — not on an arbitrary NNLS vertex.
        Modes that the limit leaves at 0 end at ``O(ε^{κ})`` (``κ > 0``) in the flow.  (For
        ``max z(0) ≥ 1``, or sparse ``C``, one minimiser is returned as above.)

        Returns
        -------
        torch.Tensor, shape (K,)
        """
        return final.final_state(self._system)

    def plateaus(self, eps: float | None = None) -> Plateaus:
        """Switch-on times and plateau losses.

        Diagonal ``C``: exact logistic half-saturation times
        (:meth:`logistic_switch_times`) in increasing order; the plateau after the
        ``j``-th switch has the first ``j`` modes at ``z*`` and the others at 0 (exact up
        to ``O(z(0))``).  Interacting ``C``: the ε → 0 limit (:meth:`limit`), with times
        ``t = τ ln(1/ε)``.

        Parameters
        ----------
        eps : float, optional
            Initial scale for the interacting case (default ``max z(0)``).
        """
        return final.plateaus(self._system, eps)

    def staircase(self, eps: float | None = None, *, limit: bool | None = None) -> Staircase:
        """The predicted staircase (:class:`nqf.reductions.Staircase`) of this system.

        Parameters
        ----------
        eps : float, optional
            Initial scale (default ``max z(0)``): the reference of the ε → 0 limit and of
            the leading-order times ``ln(1/ε)/ζ_k``.
        limit : bool, optional
            ``True``: the ε → 0 limit (:meth:`limit`, times ``τ ln(1/ε)``, method
            ``"limit"``) even for diagonal ``C``; ``False``: the exact logistic
            half-saturation times (diagonal ``C`` only); default: logistic for diagonal
            ``C``, the limit otherwise (as :meth:`plateaus`), both with method
            ``"lotka-volterra"`` (the rule of each time says which).

        Returns
        -------
        Staircase
            ``directions`` are the columns of ``basis`` of the switching modes (shape
            ``(0, K)`` for a system without a basis).
        """
        return final.staircase(self._system, eps, limit=limit)

    # -------------------------------------------------------------- limit
    def limit(self, eps: float | None = None):
        """ε → 0 limit of this system (:func:`nqf.reductions.lv.limit`), with ``s_k(0) = ln z_k(0)/ln(1/ε)``.

        A sparse ``C`` takes the banded path (half-bandwidth ≤ 64, never densified; ``path_s`` None).

        Parameters
        ----------
        eps : float in (0, 1), optional
            Reference scale; default ``max z(0)`` (so ``s(0) = −1`` when ``z(0) = ε``).
        """
        from ._limit import limit

        eps = eps_value(float(np.max(self._z0)) if eps is None else eps)
        with np.errstate(divide="ignore"):
            s0 = np.log(self._z0) / (-np.log(eps))
        C = self._dense if self._dense is not None else np.diag(self._diag) if self.is_diagonal else self._sparse
        return dataclasses.replace(limit(self._beta, C, s0, y2=self.y2), eps=eps)
