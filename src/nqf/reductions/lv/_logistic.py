"""Exact logistic solutions of a Lotka–Volterra system with diagonal ``C`` (docs/theory.md §4).

With ``C`` diagonal (orthogonal features) every mode is an independent Bernoulli
equation ``dz/dt = ζz − 4cz²`` with the closed form of :func:`logistic` and exact
half-saturation times.  Functions of the system, behind the methods of the same names of
:class:`nqf.reductions.lv.LotkaVolterra`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ...errors import InvalidParameterError
from .._timing import logistic_switch_time
from ._solution import LVSolution, _np, _t

if TYPE_CHECKING:
    from ._system import LotkaVolterra

__all__ = ["require_diagonal", "logistic", "logistic_switch_times", "switch_times"]


def require_diagonal(system: LotkaVolterra, what: str) -> None:
    """Raise :class:`InvalidParameterError` naming ``what`` unless ``C`` is diagonal."""
    if not system.is_diagonal:
        raise InvalidParameterError(
            f"`{what}` needs a diagonal `C` (orthogonal features); this system has "
            "interacting modes — use `flow`, `gd` or `limit`"
        )


def logistic(system: LotkaVolterra, t, *, log: bool = False) -> torch.Tensor:
    """Exact solution ``z(t)`` (or ``ln z``), shape (T, K), for diagonal ``C`` (:meth:`LotkaVolterra.logistic`)."""
    require_diagonal(system, "logistic")
    tt = _np("t", t, (0, 1)).reshape(-1)[:, None]
    zeta = 4.0 * system._beta[None, :]
    c = system._diag[None, :]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lz0 = np.log(system._z0)[None, :]
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


def logistic_switch_times(system: LotkaVolterra, fraction: float = 0.5) -> torch.Tensor:
    """Exact times at which the modes reach ``fraction · z*`` (:meth:`LotkaVolterra.logistic_switch_times`)."""
    require_diagonal(system, "logistic_switch_times")
    if not 0 < fraction <= 1:
        raise InvalidParameterError(f"`fraction` must lie in (0, 1]; found {fraction}")
    b, c, z0 = system._beta, system._diag, system._z0
    with np.errstate(divide="ignore", invalid="ignore"):
        zs = np.where((b > 0) & (c > 0), b / np.where(c > 0, c, 1.0), 0.0)
    out = logistic_switch_time(4.0 * b, zs, z0, fraction)
    return _t(out)


def switch_times(system: LotkaVolterra, solution: LVSolution | None = None, fraction: float = 0.5) -> torch.Tensor:
    """Switch-on times: analytic for diagonal ``C``, else of ``solution`` (:meth:`LotkaVolterra.switch_times`)."""
    if solution is None:
        return system.logistic_switch_times(fraction)
    return solution.switch_times(fraction)
