"""Numerical solvers of a Lotka–Volterra system: the exact GD map and the stiff flow (docs/theory.md §4.1, §4.3).

Mixed into :class:`nqf.reductions.lv.LotkaVolterra`:

* :meth:`Solvers.gd` — the exact discrete GD map ``z ← (1 − 2ηg)² z``, ``g = Cz − β``;
* :meth:`Solvers.flow` — gradient flow in log coordinates ``u = ln z``,
  ``du/dt = 4(β − C e^u)`` with the analytic (banded, for sparse ``C``) Jacobian.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.integrate import solve_ivp

from ...errors import DivergenceError, InvalidParameterError
from .solution import LVSolution, _np, _t

__all__ = ["Solvers", "BAND_MAX"]

BAND_MAX = 32  # widest band of a sparse C given to LSODA as a banded Jacobian


class Solvers:
    """GD map and stiff flow (methods of :class:`~nqf.reductions.lv.LotkaVolterra`)."""

    # set by LotkaVolterra.__init__; exactly one of _dense and _sparse is not None
    K: int
    _beta: np.ndarray
    _z0: np.ndarray
    _dense: np.ndarray | None
    _sparse: sp.csr_matrix | sp.csr_array | None

    _matvec: Callable[[np.ndarray], np.ndarray]  # C z, defined by LotkaVolterra
    final_state: Callable[[], Any]  # defined by FinalState

    # ------------------------------------------------------------ GD map
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
        eta = float(eta)
        if not (np.isfinite(eta) and eta > 0):
            raise InvalidParameterError(f"`eta` must be a finite positive step size; found {eta}")
        steps, record_every = int(steps), int(record_every)
        if steps < 0 or record_every < 1:
            raise InvalidParameterError(f"`steps` must be ≥ 0 and `record_every` ≥ 1; found {steps}, {record_every}")
        z = self._z0.copy()
        ts, zs = [0.0], [z.copy()]
        with np.errstate(over="ignore", invalid="ignore"):
            for s in range(1, steps + 1):
                g = self._matvec(z) - self._beta
                z = (1.0 - 2.0 * eta * g) ** 2 * z
                if s % record_every == 0 or s == steps:
                    if not np.isfinite(z).all():
                        raise DivergenceError(
                            f"GD diverged at step {s} (t = {s * eta:.4g}); reduce `eta` "
                            f"(stability needs η · λ_max(C) · max z ≲ 1)"
                        )
                    ts.append(s * eta)
                    zs.append(z.copy())
        with np.errstate(divide="ignore"):
            lz = np.log(np.array(zs))
        return LVSolution(_t(ts), _t(lz), self, "gd", True, "", {"steps": steps})

    # ---------------------------------------------------------- log flow
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
        if method not in ("auto", "Radau", "BDF", "LSODA"):
            raise InvalidParameterError(
                f"`method` must be one of 'auto', 'Radau', 'BDF', 'LSODA' (implicit, stiff); found {method!r}"
            )
        tt = _np("t", t, (0, 1))
        if tt.ndim == 0:
            T = float(tt)
            if not T > 0:
                raise InvalidParameterError(f"`t` (final time) must be > 0; found {T}")
            n = max(int(n_points), 4)
            tt = np.unique(np.concatenate([[0.0], np.linspace(0, T, n // 2), np.geomspace(T * 1e-6, T, n - n // 2)]))
        if tt[0] != 0 or np.any(np.diff(tt) <= 0):
            raise InvalidParameterError("`t` must be increasing and start at 0")
        mask = self._z0 > 0
        idx = np.flatnonzero(mask)
        b = self._beta[idx]
        lband = uband = 0
        coo = None
        if self._dense is not None:
            Cm = self._dense[np.ix_(idx, idx)]
        else:
            assert self._sparse is not None  # exactly one of _dense and _sparse is set
            Cm = self._sparse[idx][:, idx].tocsc()
            coo = Cm.tocoo()
            lband = int(max(0, (coo.row - coo.col).max(initial=0)))
            uband = int(max(0, (coo.col - coo.row).max(initial=0)))
        sparse = coo is not None

        # Trial Newton iterates of a large implicit step can overshoot far beyond any state the
        # flow visits; capping z there keeps f finite (no inf − inf = NaN in the error estimate),
        # so the step is rejected and shrunk normally.  The exact solution never reaches the cap:
        # the loss decreases along the flow, which bounds z (cap = 1e3 · max(1, z∞, z(0))).
        zcap = 1e3 * max(1.0, float(np.max(self._z0)), float(np.max(self.final_state().numpy())))
        ucap = float(np.log(zcap))

        def fun(_t_, u):
            return 4.0 * (b - Cm @ np.exp(np.minimum(u, ucap)))

        def jac(_t_, u):
            z = np.exp(np.minimum(u, ucap))
            if sparse:
                return (-4.0 * (Cm @ sp.diags(z))).tocsc()
            return -4.0 * Cm * z[None, :]

        extra: dict[str, Any] = {}
        jacobian = jac
        if method == "auto":
            method = ("LSODA" if max(lband, uband) <= BAND_MAX else "BDF") if sparse else "Radau"
        if method == "LSODA" and coo is not None:
            # LSODA's packed banded Jacobian: J[uband + i − j, j] = −4 C_ij z_j
            pos = uband + coo.row - coo.col

            def banded_jac(_t_, u):
                z = np.exp(np.minimum(u, ucap))
                J = np.zeros((lband + uband + 1, u.shape[0]))
                J[pos, coo.col] = -4.0 * coo.data * z[coo.col]
                return J

            jacobian = banded_jac
            extra = {"lband": lband, "uband": uband}

        u0 = np.log(self._z0[idx])
        with np.errstate(over="ignore", invalid="ignore"):  # rejected Newton trials inside scipy
            sol = solve_ivp(
                fun,
                (0.0, float(tt[-1])),
                u0,
                method=method,
                t_eval=tt,
                jac=jacobian,
                rtol=rtol,
                atol=atol,
                dense_output=dense_output,
                **extra,
            )
        lz = np.full((sol.t.shape[0], self.K), -np.inf)
        lz[:, idx] = sol.y.T
        stats = {"nfev": sol.nfev, "njev": sol.njev, "nlu": sol.nlu, "method": method}
        return LVSolution(
            _t(sol.t),
            _t(lz),
            self,
            method,
            bool(sol.success),
            sol.message,
            stats,
            sol.sol if dense_output else None,
            mask,
        )
