"""Exact logistic solutions of a Lotka–Volterra system with diagonal ``C`` (docs/theory.md §4).

With ``C`` diagonal (orthogonal features) every mode is an independent Bernoulli
equation ``dz/dt = ζz − 4cz²`` with the closed form of :meth:`LogisticSolutions.logistic`
and exact half-saturation times.  Mixed into :class:`nqf.reductions.lv.LotkaVolterra`.
"""

from __future__ import annotations

import numpy as np
import torch

from ...errors import InvalidParameterError
from ..timing import logistic_switch_time
from .solution import LVSolution, _np, _t

__all__ = ["LogisticSolutions"]


class LogisticSolutions:
    """Closed forms of the diagonal case (methods of :class:`~nqf.reductions.lv.LotkaVolterra`)."""

    # set by LotkaVolterra.__init__
    is_diagonal: bool
    _beta: np.ndarray
    _diag: np.ndarray
    _z0: np.ndarray

    def _require_diagonal(self, what: str):
        if not self.is_diagonal:
            raise InvalidParameterError(
                f"`{what}` needs a diagonal `C` (orthogonal features); this system has "
                "interacting modes — use `flow`, `gd` or `limit`"
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
        self._require_diagonal("logistic")
        tt = _np("t", t, (0, 1)).reshape(-1)[:, None]
        zeta = 4.0 * self._beta[None, :]
        c = self._diag[None, :]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lz0 = np.log(self._z0)[None, :]
            x = zeta * tt
            pos = zeta > 0
            neg = zeta < 0
            lphi = np.where(
                pos,
                np.log(-np.expm1(-x)) - np.log(np.where(pos, zeta, 1.0)),
                np.where(neg, -x + np.log(-np.expm1(x)) - np.log(np.where(neg, -zeta, 1.0)), np.log(tt + 0 * zeta)),
            )
            second = np.where(c > 0, np.log(4.0 * np.where(c > 0, c, 1.0)) + lz0 + lphi, -np.inf)
            lz = lz0 - np.logaddexp(-x, second)
            lz = np.where(np.isfinite(lz0), lz, -np.inf)
        return _t(lz) if log else _t(np.exp(lz))

    def logistic_switch_times(self, fraction: float = 0.5) -> torch.Tensor:
        r"""Exact time at which a logistic mode reaches ``fraction · z*`` (diagonal ``C``).

        ``t_k = [ln(z*_k/z_k(0) − 1) − ln(1/f − 1)]/ζ_k`` (half saturation ``f = ½``:
        ``ln(z*/z(0) − 1)/ζ``, ``≈ ln(1/ε)/ζ_k`` for ``z(0) = ε``); 0 if ``z(0) ≥ f z*``;
        ``inf`` for modes with ``β_k ≤ 0`` (they never switch on).

        Returns
        -------
        torch.Tensor, shape (K,)
        """
        self._require_diagonal("logistic_switch_times")
        if not 0 < fraction <= 1:
            raise InvalidParameterError(f"`fraction` must lie in (0, 1]; found {fraction}")
        b, c, z0 = self._beta, self._diag, self._z0
        with np.errstate(divide="ignore", invalid="ignore"):
            zs = np.where((b > 0) & (c > 0), b / np.where(c > 0, c, 1.0), 0.0)
        out = logistic_switch_time(4.0 * b, zs, z0, fraction)
        return _t(out)

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
        if solution is None:
            return self.logistic_switch_times(fraction)
        return solution.switch_times(fraction)
