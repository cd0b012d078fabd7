"""Numerical solvers of a Lotka–Volterra system: the exact GD map and the stiff flow (docs/theory.md §4.1, §4.3).

Functions of the system, behind the methods of the same names of :class:`nqf.reductions.lv.LotkaVolterra`:

* :func:`gd` — the exact discrete GD map ``z ← (1 − 2ηg)² z``, ``g = Cz − β``;
* :func:`flow` — gradient flow in log coordinates ``u = ln z``,
  ``du/dt = 4(β − C e^u)`` with the analytic (banded, for sparse ``C``) Jacobian.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp
from scipy.integrate import solve_ivp

from ..._validation import int_param, one_of, positive_float, steps_value
from ...errors import DivergenceError, InvalidParameterError
from ._solution import LVSolution, _np, _t

if TYPE_CHECKING:
    from ._system import LotkaVolterra

__all__ = ["gd", "flow", "BAND_MAX"]

BAND_MAX = 32  # widest band of a sparse C given to LSODA as a banded Jacobian


def gd(system: LotkaVolterra, eta: float, steps: int, *, record_every: int = 1) -> LVSolution:
    """Exact discrete gradient descent: ``z ← (1 − 2η g)² z``, ``g = C z − β`` (:meth:`LotkaVolterra.gd`)."""
    eta, steps = positive_float("eta", eta), steps_value(steps)
    record_every = int_param("record_every", record_every, minimum=1)
    z = system._z0.copy()
    ts, zs = [0.0], [z.copy()]
    with np.errstate(over="ignore", invalid="ignore"):
        for s in range(1, steps + 1):
            g = system._matvec(z) - system._beta
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
    return LVSolution(_t(ts), _t(lz), system, "gd", True, "", {"steps": steps})


def flow(
    system: LotkaVolterra,
    t,
    *,
    n_points: int = 2001,
    method: str = "auto",
    rtol: float = 1e-10,
    atol: float = 1e-10,
    dense_output: bool = True,
) -> LVSolution:
    """Gradient flow in log coordinates with an implicit stiff integrator (:meth:`LotkaVolterra.flow`)."""
    one_of("method", method, ("auto", "Radau", "BDF", "LSODA"))  # the implicit (stiff) solvers
    tt = _output_times(t, n_points)
    mask = system._z0 > 0
    idx = np.flatnonzero(mask)
    b = system._beta[idx]
    Cm, lband, uband = _restricted_C(system, idx)
    sparse, narrow = sp.issparse(Cm), max(lband, uband) <= BAND_MAX
    if method == "auto":
        method = ("LSODA" if narrow else "BDF") if sparse else "Radau"
    band = _diagonals(Cm) if sparse and method == "LSODA" else None  # LSODA takes a banded Jacobian
    Cz = band if band is not None and narrow else Cm  # C z through its diagonals when narrow (2× faster than CSC)

    # Trial Newton iterates of a large implicit step can overshoot far beyond any state the
    # flow visits; capping z there keeps f finite (no inf − inf = NaN in the error estimate),
    # so the step is rejected and shrunk normally.  The exact solution never reaches the cap:
    # the loss decreases along the flow, which bounds z (cap = 1e3 · max(1, z∞, z(0))).
    zcap = 1e3 * max(1.0, float(np.max(system._z0)), float(np.max(system.final_state().numpy())))
    ucap = float(np.log(zcap))

    def fun(_t_, u):
        z = np.exp(np.minimum(u, ucap))
        r = Cz @ z
        np.subtract(b, r, out=r)
        r *= 4.0
        return r

    jacobian, extra = _jacobian(Cm, band, ucap)

    u0 = np.log(system._z0[idx])
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
    lz = np.full((sol.t.shape[0], system.K), -np.inf)
    lz[:, idx] = sol.y.T
    stats = {"nfev": sol.nfev, "njev": sol.njev, "nlu": sol.nlu, "method": method}
    return LVSolution(
        _t(sol.t),
        _t(lz),
        system,
        method,
        bool(sol.success),
        sol.message,
        stats,
        sol.sol if dense_output else None,
        mask,
    )


def _output_times(t, n_points: int) -> np.ndarray:
    """Output times of :func:`flow`: the given increasing times from 0, or a linear ∪ log grid on ``[0, t]``."""
    tt = _np("t", t, (0, 1))
    if tt.ndim == 0:
        T = float(tt)
        if not T > 0:
            raise InvalidParameterError(f"`t` (final time) must be > 0; found {T}")
        n = max(int(n_points), 4)
        tt = np.unique(np.concatenate([[0.0], np.linspace(0, T, n // 2), np.geomspace(T * 1e-6, T, n - n // 2)]))
    if tt[0] != 0 or np.any(np.diff(tt) <= 0):
        raise InvalidParameterError("`t` must be increasing and start at 0")
    return tt


def _restricted_C(system: LotkaVolterra, idx: np.ndarray):
    """``C`` on the modes ``idx``: ``(C, lband, uband)``, with the bands set only for sparse ``C`` (0 for dense)."""
    lband = uband = 0
    if system._dense is not None:
        Cm = system._dense[np.ix_(idx, idx)]
    else:
        assert system._sparse is not None  # exactly one of _dense and _sparse is set
        Cm = system._sparse[idx][:, idx].tocsc()
        coo = Cm.tocoo()
        lband = int(max(0, (coo.row - coo.col).max(initial=0)))
        uband = int(max(0, (coo.col - coo.row).max(initial=0)))
    return Cm, lband, uband


def _diagonals(Cm) -> sp.dia_matrix:
    """A banded sparse ``C`` in DIA form, with the entries outside the matrix (DIA's padding) set to zero."""
    D = sp.dia_matrix(Cm)
    n = int(Cm.shape[1])
    j = np.arange(D.data.shape[1])
    for k, o in enumerate(D.offsets.tolist()):
        D.data[k, (j < max(o, 0)) | (j >= min(n + o, n))] = 0.0  # data[k, j] = C[j − o, j]
    return D


def _jacobian(Cm, band, ucap: float) -> tuple[Callable, dict[str, Any]]:
    """The analytic Jacobian ``−4 C diag(z)`` in the integrator's form, and the integrator's extra arguments.

    Dense ``C``: a dense matrix; sparse ``C``: a sparse one, or, when ``band`` is given (``C`` in DIA
    form, for LSODA), LSODA's packed banded form ``J[w + i − j, j]`` with ``lband = uband = w``.
    """
    sparse = sp.issparse(Cm)

    def jac(_t_, u):
        z = np.exp(np.minimum(u, ucap))
        if sparse:
            return (-4.0 * (Cm @ sp.diags(z))).tocsc()
        return -4.0 * Cm * z[None, :]

    extra: dict[str, Any] = {}
    jacobian = jac
    if band is not None:
        w = int(np.max(np.abs(band.offsets), initial=0))
        rows = w - band.offsets  # DIA's data[k, j] = C[j − o_k, j] is packed row w − o_k, column j
        data = -4.0 * band.data[:, : band.shape[1]]

        def banded_jac(_t_, u):
            J = np.zeros((2 * w + 1, u.shape[0]))
            J[rows] = data * np.exp(np.minimum(u, ucap))
            return J

        jacobian = banded_jac
        extra = {"lband": w, "uband": w}
    return jacobian, extra
