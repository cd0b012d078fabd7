r"""The real network's clock: the seeded NQF's drop times, the seeds and the seeding floor (docs/theory.md §7).

:func:`nqf.dynamics.seeded_nqf` runs the NQF with the next orders' seeds in the unlearned
directions.  :func:`real_clock` reads its drop times with the one judge
(:func:`compare_staircase`: downward crossings of the predicted midpoints), and compares
them with the NQF's own crossings at the same ``ε``.  For a later drop ``k`` the two differ
by the seed: mode ``k``'s strength grows like ``e^{t/τ_k}`` from its ``ε``-part plus a seed,
so the seeded drop comes ``τ_k ln(1 + ρ_k)`` earlier, with ``ρ_k`` the seed's strength over
the ``ε``-part's::

    ρ_k = exp((t_k^NQF − t_k^seeded) / τ_k) − 1,     τ_k = t_k^leading / ln(1/ε).

The seed is made when the first mode switches on (at ``t_1 ≈ τ_1 ln(1/ε)``) with an
``ε``-independent amplitude, while the ``ε``-part has only grown by ``ε^{τ_1/τ_k}`` by then, so
``ρ_k ∝ ε^{−(1 − τ_1/τ_k)}`` and the **seeding floor** — the ``ε`` below which the seed
dominates and the leading-order clock ``τ_k ln(1/ε)`` fails for drop ``k`` — is

    ε*_k = ε · ρ_k^{1/(1 − τ_1/τ_k)}.

:meth:`RealClock.times_at` carries the seeded times to any other ``ε`` with the same two
scalings (the NQF's time shifted by ``τ_k ln(ε/ε')``, the seed ratio by ``(ε/ε')^{1−τ_1/τ_k}``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from .._validation import eps_value
from ..errors import InvalidParameterError
from ..reductions import Staircase
from ..results import Result, to_jsonable
from ._compare import compare_staircase

__all__ = ["RealClock", "real_clock", "measured_floors", "level_time_bounds", "TRUSTED_TIME_ERROR"]

#: A drop time is trusted when its bound (:func:`level_time_bounds`) is at most this.
TRUSTED_TIME_ERROR = 0.05


@dataclass(frozen=True)
class RealClock(Result):
    """The seeded (real-network) clock beside the NQF's, at one ``ε``.

    Attributes
    ----------
    staircase : Staircase
        The prediction with the seeded NQF's drop times (rule ``"seeded NQF"``); levels unchanged.
    times_nqf : ndarray, shape (K,)
        The NQF's own drop times (midpoint crossings) at the same ``ε``.
    seed_ratio : ndarray, shape (K,)
        ``ρ_k``, the seed's strength over the ``ε``-part's (NaN for the first drop, which nothing seeds).
    floor : ndarray, shape (K,)
        ``ε*_k``: below it the seed dominates drop ``k`` (NaN where no seed was measured).
    """

    staircase: Staircase = field(repr=False)
    times_nqf: np.ndarray = field(repr=False)
    seed_ratio: np.ndarray = field(repr=False)
    floor: np.ndarray = field(repr=False)

    @property
    def eps(self) -> float:
        return float(self.staircase.eps)

    @property
    def times(self) -> np.ndarray:
        """The seeded drop times (the real network's clock), shape (K,)."""
        return self.staircase.times

    @property
    def seeded(self) -> np.ndarray:
        """Drop ``k`` is seeded at this ``ε`` (``ρ_k > 1``: ``ε`` below its floor), shape (K,)."""
        return np.nan_to_num(self.seed_ratio, nan=0.0) > 1.0

    def _tau(self) -> np.ndarray:
        return self.staircase.times_leading / math.log(1.0 / self.eps)

    def times_at(self, eps: float) -> np.ndarray:
        """The real network's drop times at another ``eps``, from this run's seeds (module docstring)."""
        eps = eps_value(eps)
        tau = self._tau()
        shift = np.log(self.eps / eps)
        t_nqf = self.times_nqf + tau * shift
        out = t_nqf + (self.times - self.times_nqf)  # no seed measured: the same O(1) difference
        a = _exponents(tau)
        rho = self.seed_ratio * np.exp(a * shift)
        has = np.isfinite(rho) & (self.seed_ratio > 0)
        out[has] = t_nqf[has] - tau[has] * np.log1p(rho[has])
        return out

    def __repr__(self) -> str:
        finite = self.floor[np.isfinite(self.floor)]
        top = f"{finite.max():.1e}" if finite.size else "—"
        return f"RealClock(eps={self.eps:g}, drops={self.times.size}, seeded={int(self.seeded.sum())}, max floor={top})"

    def to_dict(self) -> dict:
        return to_jsonable(
            {
                "eps": self.eps,
                "times": self.times,
                "times_nqf": self.times_nqf,
                "seed_ratio": self.seed_ratio,
                "floor": self.floor,
                "seeded": self.seeded,
                "staircase": self.staircase.to_dict(),
            }
        )


def _exponents(tau: np.ndarray) -> np.ndarray:
    """``1 − τ_1/τ_k`` (NaN for the first drop)."""
    a = np.full(tau.shape, np.nan)
    if tau.size > 1:
        a[1:] = 1.0 - tau[0] / tau[1:]
    return a


def real_clock(staircase: Staircase, t_seeded, loss_seeded, t_nqf, loss_nqf) -> RealClock:
    """The real network's clock from a seeded-NQF run and the NQF run at the same ``ε``.

    Parameters
    ----------
    staircase : Staircase
        The NQF prediction (levels, leading-order times) at the runs' ``ε``.
    t_seeded, loss_seeded : array_like
        Time and loss of :func:`nqf.dynamics.seeded_nqf`.
    t_nqf, loss_nqf : array_like
        Time and loss of the NQF (:func:`nqf.simulate`) from the same ``W(0)``.

    Returns
    -------
    RealClock
    """
    if not isinstance(staircase, Staircase):
        raise InvalidParameterError(f"`staircase` must be a nqf.Staircase; found {type(staircase).__name__}")
    t_s = compare_staircase(t_seeded, loss_seeded, staircase).times_measured
    t_n = compare_staircase(t_nqf, loss_nqf, staircase).times_measured
    tau = staircase.times_leading / math.log(1.0 / staircase.eps)
    with np.errstate(invalid="ignore", over="ignore"):
        rho = np.expm1((t_n - t_s) / tau)
    rho[:1] = np.nan
    a = _exponents(tau)
    with np.errstate(invalid="ignore", divide="ignore"):
        floor = np.where((rho > 0) & (a > 0), staircase.eps * rho ** (1.0 / a), np.nan)
    K = staircase.n_drops
    corrected = dataclasses.replace(
        staircase,
        times=t_s,
        time_rules=("seeded NQF",) * K,
        notes=(*staircase.notes, "drop times of the seeded NQF (the next orders' seeds in the unlearned directions)"),
    )
    return RealClock(staircase=corrected, times_nqf=t_n, seed_ratio=rho, floor=floor)


def measured_floors(eps, times_real, times_nqf) -> np.ndarray:
    """Where a network's later drops stop following ``ln(1/ε)``, measured over an ε sweep (model-free).

    Between neighbouring ε the local slope ``Δt_k / Δln(1/ε)`` of the measured drop times is
    compared with the NQF's own slope for that drop (which follows ``τ_k``) and with the measured
    first drop's (the clock a seeded drop follows): the floor is where the measured slope first
    falls below their midpoint, interpolated in ``ln ε`` between the centres of the two intervals.

    Parameters
    ----------
    eps : array_like, shape (E,)
        Initial scales, decreasing (at least three).
    times_real, times_nqf : array_like, shape (E, K)
        Drop times of the network and of its NQF at each ε (midpoint crossings).

    Returns
    -------
    ndarray, shape (K,)
        NaN for the first drop and where the slope never falls below the midpoint; ``+inf`` where it
        is below already in the first interval (the floor lies above the sweep).
    """
    eps = np.asarray(eps, dtype=float)
    tr, tn = np.asarray(times_real, dtype=float), np.asarray(times_nqf, dtype=float)
    if eps.ndim != 1 or eps.size < 3 or np.any(np.diff(eps) >= 0):
        raise InvalidParameterError(f"`eps` must be at least three decreasing values; found {eps.tolist()}")
    eps = np.array([eps_value(e) for e in eps])
    if tr.shape != tn.shape or tr.shape[0] != eps.size:
        raise InvalidParameterError(
            f"`times_real` and `times_nqf` must both have shape ({eps.size}, K); found {tr.shape} and {tn.shape}"
        )
    le = np.log(1.0 / eps)
    mid = 0.5 * (le[1:] + le[:-1])
    floors = np.full(tr.shape[1], np.nan)
    s1 = np.diff(tr[:, 0]) / np.diff(le)
    for k in range(1, tr.shape[1]):
        s_real = np.diff(tr[:, k]) / np.diff(le)
        target = 0.5 * (np.diff(tn[:, k]) / np.diff(le) + s1)
        below = np.nonzero(s_real < target)[0]
        if not below.size:
            continue
        i = int(below[0])
        if i == 0:
            floors[k] = np.inf
            continue
        d0, d1 = s_real[i - 1] - target[i - 1], s_real[i] - target[i]
        floors[k] = math.exp(-(mid[i - 1] + (mid[i] - mid[i - 1]) * d0 / (d0 - d1)))
    return floors


def level_time_bounds(levels, levels_module, levels_reference=None) -> np.ndarray:
    r"""A bound on each drop time's relative error from the real module's level on the preceding plateau.

    The mode that switches at drop ``k`` escapes plateau ``k − 1`` at a rate set by the residual there, and
    linearly in it: its signal ``s`` along the escaping direction gives the rate ``ζ ∝ s`` and the drop
    ``ΔL_k = L_{k−1} − L_k ∝ s²``.  Where the real module settles at ``L^mod_{k−1}`` instead of the NQF's
    ``L^ref_{k−1}`` and, at worst, the whole difference ``δ`` lies along that direction, ``s`` changes by the factor
    ``√(1 ± δ/ΔL_k)``, the rate by ``δ/(2ΔL_k)`` to first order, and the escape time by as much::

        e_k = |L^mod_{k−1} − L^ref_{k−1}| / (2 |L_{k−1} − L_k|).

    The criterion uses no measured time: ``L^mod`` and ``L^ref`` are the module's and the NQF's levels reached by
    the same steps over the plateau's learned directions (:func:`nqf.dynamics.active_levels`), computed before any
    comparison.  The first drop has ``e_1 = 0`` (at ``W = 0`` the module's level is the NQF's).

    Parameters
    ----------
    levels : array_like, shape (K + 1,)
        The NQF's plateau levels (the drops ``ΔL_k``).
    levels_module : array_like, shape (K + 1,)
        The module's levels (NaN where not computed: the bound is NaN).
    levels_reference : array_like, shape (K + 1,), optional
        The NQF's levels by the same steps (default: ``levels``).

    Returns
    -------
    ndarray, shape (K,)
    """
    L, Lm = np.asarray(levels, float).reshape(-1), np.asarray(levels_module, float).reshape(-1)
    Lr = L if levels_reference is None else np.asarray(levels_reference, float).reshape(-1)
    if L.shape != Lm.shape or L.shape != Lr.shape or L.size < 1:
        raise InvalidParameterError(
            f"`levels`, `levels_module` and `levels_reference` must all have shape (K + 1,); found {L.shape}, "
            f"{Lm.shape} and {Lr.shape}"
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.abs(Lm[:-1] - Lr[:-1]) / (2.0 * np.abs(L[:-1] - L[1:]))
