r"""Switch-on times, level crossings and staircases: the one place for each (docs/theory.md §4.2, §4.6).

* :func:`logistic_switch_time` — exact time at which a logistic mode
  ``dz/dt = ζ z (1 − z/z*)`` started at ``z(0)`` reaches ``f · z*``:

  .. math:: t_f = \frac{\ln(z^*/z(0) − 1) − \ln(1/f − 1)}{ζ}

  (half saturation ``f = ½``: ``ln(z*/z(0) − 1)/ζ``); ``0`` when ``z(0) ≥ f z*``,
  ``inf`` when the mode never switches on (``ζ ≤ 0``, ``z* ≤ 0`` or ``z(0) = 0``).
  Computed from ``ln(z*/z(0))`` so that ``z(0) = 10⁻³⁰⁰`` does not overflow;
* :func:`leading_switch_time` — its ε → 0 leading form ``ln(1/ε)/ζ`` (every
  escape of a plateau at rate ``ζ`` from size ``ε``: Lotka–Volterra modes, SVD
  modes, the saddle sequence);
* :func:`crossing_times` / :func:`crossing_time` — first time a sampled curve
  reaches a level, upward (``x ≥ level``) or downward (``x ≤ level``), by linear
  interpolation between the bracketing samples (optionally linear in ``ln t``,
  or refined by Brent's method on a callable such as an ODE's dense output);
* :func:`crossing_index` — the bracketing sample itself;
* :func:`midpoint_levels` and :func:`staircase` — the levels halfway between
  plateaus (where a drop is timed) and the piecewise-constant staircase.

Conventions: training time ``t = η · steps``; rates ``ζ`` in the same units.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from .._validation import eps_value
from ..errors import InvalidParameterError, ShapeError

__all__ = [
    "logistic_switch_time",
    "leading_switch_time",
    "crossing_index",
    "crossing_times",
    "crossing_time",
    "midpoint_levels",
    "learning_drops",
    "TAIL_FRACTION",
    "staircase",
]

#: A staircase's tail: the drops after the first one that leaves at most this fraction of its fall ``L_0 − L_K``.
TAIL_FRACTION = 0.01

_DIRECTIONS = ("up", "down")


def _check_fraction(fraction) -> float:
    f = float(fraction)
    if not 0.0 < f <= 1.0:
        raise InvalidParameterError(f"`fraction` must lie in (0, 1]; found {fraction!r}")
    return f


def logistic_switch_time(rate, z_star=None, z0=None, fraction: float = 0.5, *, log_ratio=None) -> np.ndarray:
    r"""Exact time at which a logistic mode reaches ``fraction · z*`` (see the module docstring).

    Parameters
    ----------
    rate : array_like, shape (K,)
        ``ζ_k`` (``dz/dt = ζ z (1 − z/z*)``; for Lotka–Volterra ``ζ = 4β``).
    z_star, z0 : array_like, shape (K,), optional
        Saturation value and initial value (``z* ≤ 0`` or ``z0 ≤ 0``: never switches on).
    fraction : float in (0, 1]
        Level as a fraction of ``z*`` (``1`` is never reached from below: ``inf``).
    log_ratio : array_like, shape (K,), optional
        ``ln(z*/z0)`` directly, instead of ``z_star`` and ``z0`` (e.g. ``ln(1/ε)`` for
        ``z0 = ε z*``; ``−inf`` or NaN: never switches on).

    Returns
    -------
    numpy.ndarray, shape (K,)
    """
    f = _check_fraction(fraction)
    zeta = np.atleast_1d(np.asarray(rate, dtype=np.float64))
    if log_ratio is None:
        if z_star is None or z0 is None:
            raise InvalidParameterError("`logistic_switch_time` needs `z_star` and `z0`, or `log_ratio`; found neither")
        zs = np.broadcast_to(np.asarray(z_star, dtype=np.float64), zeta.shape)
        z0a = np.broadcast_to(np.asarray(z0, dtype=np.float64), zeta.shape)
        on = (zs > 0) & (z0a > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.where(on, np.log(np.where(on, zs, 1.0)) - np.log(np.where(on, z0a, 1.0)), -np.inf)
    else:
        lr = np.broadcast_to(np.asarray(log_ratio, dtype=np.float64), zeta.shape)
    if lr.shape != zeta.shape:
        raise ShapeError(f"`z_star`/`z0`/`log_ratio` must match `rate` of shape {zeta.shape}; found {lr.shape}")
    out = np.full(zeta.shape, np.inf)
    on = (zeta > 0) & (lr > -np.inf)  # NaN compares False
    lf = math.log(1.0 / f - 1.0) if f < 1.0 else -math.inf
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lrp = lr[on]
        num = lrp + np.log1p(-np.exp(-lrp))  # ln(z*/z0 − 1), no overflow for huge ratios
        t = (num - lf) / zeta[on]
        # z0 ≥ f z*  ⇔  ln(z*/z0) ≤ ln(1/f): already there at t = 0
        t = np.where(lrp <= -math.log(f), 0.0, t)
    out[on] = t
    return out


def leading_switch_time(rate, eps: float) -> np.ndarray:
    """Leading-order escape time ``ln(1/ε)/ζ`` of a mode growing at rate ``ζ`` from size ``ε`` (``inf`` for ζ ≤ 0).

    Parameters
    ----------
    rate : array_like
    eps : float > 0
        Initial scale in ``(0, 1)`` (a plateau exists only for ``ε < 1``; ``ε ≥ 1`` is refused, as everywhere).

    Returns
    -------
    numpy.ndarray, shape of ``rate``
    """
    e = eps_value(eps)
    zeta = np.asarray(rate, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(zeta > 0, math.log(1.0 / e) / np.where(zeta > 0, zeta, 1.0), np.inf)


def _direction(direction: str) -> float:
    if direction not in _DIRECTIONS:
        raise InvalidParameterError(f"`direction` must be 'up' (x ≥ level) or 'down' (x ≤ level); found {direction!r}")
    return 1.0 if direction == "up" else -1.0


def _curve(t, x, levels):
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    x = np.asarray(x, dtype=np.float64)
    lev = np.atleast_1d(np.asarray(levels, dtype=np.float64))
    if lev.ndim != 1:
        raise ShapeError(f"`levels` must be a scalar or 1-D; found shape {lev.shape}")
    if x.ndim == 1:
        x = np.broadcast_to(x[:, None], (x.shape[0], lev.shape[0]))
    if x.ndim != 2 or x.shape[0] != t.shape[0] or x.shape[1] != lev.shape[0]:
        raise ShapeError(
            f"`x` must have shape ({t.shape[0]},) or ({t.shape[0]}, {lev.shape[0]}) to match `t` and "
            f"`levels`; found {np.shape(x)}"
        )
    if t.shape[0] < 1:
        raise ShapeError("`t` must hold at least one time; found an empty array")
    if np.any(np.diff(t) < 0):
        raise InvalidParameterError("`t` must be non-decreasing")
    return t, x, lev


def crossing_index(t, x, levels, *, direction: str = "up") -> np.ndarray:
    """Index of the first sample at or beyond each level (``x ≥ level`` up, ``x ≤ level`` down); −1 if none.

    ``x`` of shape (T,) is tested against every level, ``x`` of shape (T, K) column ``k``
    against ``levels[k]``.  Returns an int array of shape (K,).
    """
    s = _direction(direction)
    t, x, lev = _curve(t, x, levels)
    with np.errstate(invalid="ignore"):
        hit = s * x >= s * lev[None, :]
    return np.where(hit.any(axis=0), np.argmax(hit, axis=0), -1)


def crossing_times(t, x, levels, *, direction: str = "up", log_t: bool = False, never: float = math.nan) -> np.ndarray:
    """First time a sampled curve reaches each level, linear interpolation between the bracketing samples.

    Parameters
    ----------
    t : array_like, shape (T,)
        Non-decreasing times.
    x : array_like, shape (T,) or (T, K)
        One curve for all levels, or one column per level.
    levels : float or array_like, shape (K,)
    direction : {"up", "down"}
        ``"up"``: first ``x ≥ level``; ``"down"``: first ``x ≤ level``.
    log_t : bool
        Interpolate linearly in ``ln t`` (exact for power laws; linear in ``t`` when the
        left sample is ``t ≤ 0``).
    never : float
        Value where the level is never reached (NaN, or ``inf`` for switch-on times).

    Returns
    -------
    numpy.ndarray, shape (K,)
        ``t[0]`` where the level is reached at the first sample; the right sample where
        the left one is not finite (e.g. ``ln z = −inf``).
    """
    idx = crossing_index(t, x, levels, direction=direction)
    t, x, lev = _curve(t, x, levels)
    out = np.full(lev.shape, float(never))
    out[idx == 0] = t[0]
    k = np.flatnonzero(idx > 0)
    if k.size:
        i = idx[k]
        t0, t1, x0, x1 = t[i - 1], t[i], x[i - 1, k], x[i, k]
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(np.isfinite(x0) & (x1 != x0), (lev[k] - x0) / (x1 - x0), 1.0)
            lin = t0 + w * (t1 - t0)
            if log_t:
                lin = np.where(
                    t0 > 0, np.exp(np.log(np.where(t0 > 0, t0, 1.0)) + w * np.log(t1 / np.where(t0 > 0, t0, 1.0))), lin
                )
        out[k] = lin
    return out


def crossing_time(
    t,
    x,
    level: float,
    *,
    direction: str = "up",
    log_t: bool = False,
    never: float = math.nan,
    refine=None,
    iters: int = 60,
) -> float:
    """First time the curve ``x(t)`` reaches ``level`` (see :func:`crossing_times`).

    Parameters
    ----------
    refine : callable, optional
        ``s ↦ x(s)`` between samples (e.g. an ODE's dense output): the crossing is then found by Brent's method
        (:func:`scipy.optimize.brentq`) on ``x(s) − level`` inside the bracketing interval ``[t_{i−1}, t_i]``
        instead of interpolated.  The left sample is returned where ``x`` already reaches the level there, the
        right one where it does not reach it there (NaN included).
    iters : int
        The resolution of the refinement, as the number of interval halvings it is worth: the root is located
        to ``xtol = (t_i − t_{i−1}) · 2^−iters`` (what ``iters`` bisection steps resolve; bounded below by
        brentq's relative tolerance of 4 machine epsilons), in at most ``max(4 iters, 100)`` iterations.
    """
    if refine is None:
        return float(crossing_times(t, x, [level], direction=direction, log_t=log_t, never=never)[0])
    s = _direction(direction)
    i = int(crossing_index(t, x, [level], direction=direction)[0])
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    if i < 0:
        return float(never)
    if i == 0:
        return float(t[0])
    return _refined_crossing(refine, float(level), s, float(t[i - 1]), float(t[i]), int(iters))


def _refined_crossing(refine, level: float, s: float, a: float, b: float, iters: int) -> float:
    """The root of ``s · (refine − level)`` in ``[a, b]`` by brentq (see :func:`crossing_time`'s ``refine``)."""
    from scipy.optimize import brentq

    def gap(c: float) -> float:
        v = s * (float(refine(c)) - level)
        return v if v == v else -math.inf  # NaN: not reached

    if b <= a or gap(a) >= 0.0:
        return a
    if not gap(b) >= 0.0:
        return b
    xtol = max(math.ldexp(b - a, -iters), sys.float_info.min)  # brentq needs xtol > 0
    root, _ = brentq(gap, a, b, xtol=xtol, maxiter=max(4 * iters, 100), full_output=True, disp=False)
    return float(root)


def midpoint_levels(levels) -> np.ndarray:
    """``(L_{k−1} + L_k)/2``, ``k = 1..K``: the level at which drop ``k`` of a staircase is timed."""
    lev = np.asarray(levels, dtype=np.float64).reshape(-1)
    return 0.5 * (lev[:-1] + lev[1:])


def learning_drops(levels, fraction: float = TAIL_FRACTION) -> int:
    """The drops that carry the learning: the smallest ``k`` with ``L_k − L_K ≤ fraction · (L_0 − L_K)`` (``K``
    when the staircase does not fall).  The drops after it (the tail) remove at most ``fraction`` of the fall."""
    lev = np.asarray(levels, dtype=np.float64).reshape(-1)
    f = _check_fraction(fraction)
    fall = lev[0] - lev[-1]
    K = lev.size - 1
    if not (np.isfinite(fall) and fall > 0):
        return K
    return int(np.argmax(lev - lev[-1] <= f * fall))


def staircase(t, times, levels) -> np.ndarray:
    """Piecewise-constant staircase ``L(t)``: ``L_k`` on ``[t_k, t_{k+1})`` (``t_0 = −∞``).

    Parameters
    ----------
    t : array_like, shape (T,)
    times : array_like, shape (K,)
        Increasing drop times.
    levels : array_like, shape (K + 1,)
    """
    times = np.asarray(times, dtype=np.float64).reshape(-1)
    lev = np.asarray(levels, dtype=np.float64).reshape(-1)
    if lev.shape[0] != times.shape[0] + 1:
        raise ShapeError(f"`levels` must have one entry more than `times`; found {lev.shape[0]} and {times.shape[0]}")
    return lev[np.searchsorted(times, np.asarray(t, dtype=np.float64), side="right")]
