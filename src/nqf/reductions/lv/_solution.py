"""Trajectories of a Lotka–Volterra system and their switch-on times (docs/theory.md §4).

* :class:`LVSolution` — ``ln z(t)`` on a time grid (from :meth:`LotkaVolterra.flow`,
  :meth:`LotkaVolterra.gd` or the logistic closed form) with crossing/switch times;
* :func:`switch_times` — half-saturation times of any trajectory.

Conventions: training time ``t = η · steps``; ``z_k`` the eigenvalues of ``M`` in the shared basis.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.optimize import brentq

from ..._validation import as_tensor
from ...errors import InvalidParameterError, NonFiniteError, ShapeError
from ...results import Result, compact_repr, to_jsonable
from .._timing import crossing_index, crossing_times

__all__ = ["LVSolution", "switch_times"]


def _np(name: str, value, ndim) -> np.ndarray:
    return as_tensor(name, value, ndim=ndim, dtype=torch.float64).cpu().numpy()


def _t(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=np.float64))


@dataclass(frozen=True)
class LVSolution(Result):
    """A trajectory of a :class:`LotkaVolterra` system.

    Attributes
    ----------
    t : torch.Tensor, shape (T,)
        Training times.
    log_z : torch.Tensor, shape (T, K)
        ``ln z_k(t)`` (``−inf`` for modes that start at exactly zero).
    system : LotkaVolterra
        The system that produced it.
    method : str
        ``"gd"``, ``"Radau"``, ``"BDF"`` or ``"logistic"``.
    success : bool
        False when the integrator stopped early (see ``message``).
    message : str
    stats : dict
        Integrator counters (``nfev``, ``njev``, ``nlu``) or GD step count.
    """

    t: torch.Tensor
    log_z: torch.Tensor
    system: Any
    method: str
    success: bool = True
    message: str = ""
    stats: dict = field(default_factory=dict)
    _dense: Any = field(default=None, repr=False)
    _mask: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        return compact_repr(self, ("method", "success", "t", "log_z", "message"))

    def without_dense_output(self) -> LVSolution:
        """The same samples without the integrator's interpolant (arrays only: what a checkpoint stores).

        :meth:`crossing_times` then interpolates between the saved samples instead of refining on the
        interpolant.
        """
        return dataclasses.replace(self, _dense=None, _mask=None)

    def to_dict(self) -> dict:
        """JSON-ready ``t``, ``log_z`` (``−inf`` as ``null``), ``method``, ``success``, ``message``, ``stats``
        (not the system that produced it)."""
        return to_jsonable(
            {
                "t": self.t,
                "log_z": self.log_z,
                "method": self.method,
                "success": self.success,
                "message": self.message,
                "stats": self.stats,
            }
        )

    @property
    def z(self) -> torch.Tensor:
        """``z_k(t)``, shape (T, K)."""
        return torch.exp(self.log_z)

    @property
    def loss(self) -> torch.Tensor:
        """``L(z(t))``, shape (T,) (see :meth:`LotkaVolterra.loss`)."""
        return self.system.loss(self.z)

    def switch_times(self, fraction: float = 0.5, final=None, *, refine: bool | None = None) -> torch.Tensor:
        """First time each ``z_k`` reaches ``fraction`` of its final value (half saturation).

        Parameters
        ----------
        fraction : float in (0, 1]
        final : array_like, shape (K,), optional
            Reference final values; default :meth:`LotkaVolterra.final_state`.
        refine : bool, optional
            See :meth:`crossing_times`.

        Returns
        -------
        torch.Tensor, shape (K,)
            ``inf`` for modes whose final value is 0 or that never reach the level.

        See Also
        --------
        crossing_times : the same for arbitrary levels.
        """
        if not 0 < fraction <= 1:
            raise InvalidParameterError(f"`fraction` must lie in (0, 1]; found {fraction}")
        final = self.system.final_state() if final is None else final
        fin = _np("final", final, 1)
        with np.errstate(divide="ignore"):
            levels = np.where(fin > 0, fraction * fin, np.inf)
        return self.crossing_times(levels, refine=refine)

    def crossing_times(self, levels, *, refine: bool | None = None) -> torch.Tensor:
        """First time each ``z_k`` reaches ``levels_k`` from below.

        Brackets the crossing on the stored grid and, for an ODE solution with dense
        output, refines it by root finding (Brent) on the interpolant of ``u = ln z``
        (accurate to the integrator tolerance); otherwise (GD) interpolates linearly in
        ``(ln t, ln z)``.

        Parameters
        ----------
        levels : array_like, shape (K,)
            Positive levels; ``inf`` skips a mode.
        refine : bool, optional
            Root-find on the dense output (each evaluation costs ``O(K)``, so ``O(K²)`` in
            all); default: refine when ``K ≤ 500``.

        Returns
        -------
        torch.Tensor, shape (K,)
            ``inf`` where the level is never reached; ``t[0]`` where ``z_k(0) ≥ levels_k``.
        """
        lev = as_tensor("levels", levels, ndim=1, dtype=torch.float64, finite=False).numpy()
        if lev.shape != (self.log_z.shape[1],):
            raise ShapeError(f"`levels` must have shape ({self.log_z.shape[1]},); found {lev.shape}")
        if np.isnan(lev).any() or (lev <= 0).any():
            raise InvalidParameterError("`levels` must be positive (inf to skip a mode); found NaN or ≤ 0")
        fin = np.where(np.isfinite(lev), lev, 0.0)
        times = switch_times(self.t, self.log_z, fin, fraction=1.0, log=True)
        if refine is None:
            refine = lev.shape[0] <= 500
        if self._dense is None or not refine:
            return times
        t = self.t.numpy()
        lz = self.log_z.numpy()
        out = times.numpy().copy()
        cols = np.flatnonzero(self._mask)
        with np.errstate(divide="ignore"):
            targets = np.where(fin > 0, np.log(np.where(fin > 0, fin, 1.0)), np.inf)
        first = crossing_index(t, lz, targets, direction="up")
        for k in range(lz.shape[1]):
            i, target = int(first[k]), targets[k]
            if not np.isfinite(out[k]) or fin[k] <= 0 or i <= 0:
                continue
            j = int(np.searchsorted(cols, k))
            f = lambda s, j=j, target=target: float(self._dense(s)[j]) - target  # noqa: E731
            a, b = t[i - 1], t[i]
            if f(a) < 0 < f(b):
                # scipy's unannotated `rtol=4·eps` default makes pyright infer a float64 parameter
                out[k] = brentq(f, a, b, xtol=1e-13 * max(b, 1.0), rtol=1e-14)  # pyright: ignore[reportArgumentType]
        return _t(out)


def switch_times(t, z, final, *, fraction: float = 0.5, log: bool = False) -> torch.Tensor:
    """First time each mode reaches ``fraction`` of its final value (half-saturation time).

    Interpolates linearly in ``(ln t, ln z)`` between the two grid points that
    bracket the crossing (linearly in ``t`` when the left point is ``t = 0``).

    Parameters
    ----------
    t : array_like, shape (T,)
        Increasing times, ``t ≥ 0``.
    z : array_like, shape (T, K)
        Trajectory (``ln z`` if ``log`` is True).
    final : array_like, shape (K,)
        Final values ``z_k(∞)``; modes with ``final ≤ 0`` get ``inf``.
    fraction : float in (0, 1]
    log : bool
        ``z`` holds ``ln z``.

    Returns
    -------
    torch.Tensor, shape (K,)
        ``inf`` where the level is never reached; ``t[0]`` where it is reached at the start.
    """
    t = _np("t", t, 1)
    lz = as_tensor("z", z, ndim=2, dtype=torch.float64, finite=False).cpu().numpy()
    if np.isnan(lz).any():
        raise NonFiniteError("`z` must not contain NaN")
    if lz.shape[0] != t.shape[0]:
        raise ShapeError(f"`z` must have shape ({t.shape[0]}, K) to match `t`; found {lz.shape}")
    if t.shape[0] < 1:
        raise ShapeError("`t` must contain at least one time; found an empty array")
    if np.any(np.diff(t) < 0) or t[0] < 0:
        raise InvalidParameterError("`t` must be non-negative and increasing")
    if not 0 < fraction <= 1:
        raise InvalidParameterError(f"`fraction` must lie in (0, 1]; found {fraction}")
    fin = _np("final", final, 1)
    if fin.shape[0] != lz.shape[1]:
        raise ShapeError(f"`final` must have shape ({lz.shape[1]},); found {fin.shape}")
    if not log:
        with np.errstate(divide="ignore"):
            lz = np.log(np.maximum(lz, 0.0))
    with np.errstate(divide="ignore"):
        target = np.where(fin > 0, np.log(fraction * np.where(fin > 0, fin, 1.0)), np.inf)
    out = crossing_times(t, lz, target, direction="up", log_t=True, never=np.inf)
    return _t(out)
