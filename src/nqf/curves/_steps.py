r"""Step (sudden-drop) detection on a loss curve.

Algorithm (all in log time ``x = ln t``, where the staircase of docs/theory.md
§4.2–§4.3 has steps of width ``O(1/ln(1/ε))`` separated by ``O(1)``):

1. ``y = ln(L − loss_floor)`` is bin-averaged on ``n_grid`` cells uniform in
   ``x`` and smoothed with a Gaussian of width ``smooth`` (in ``ln t``).
2. The local log–log slope ``D(x) = −dy/dx`` is zero on a plateau and has a
   peak of area ``≈ ln(L_before/L_after)`` at a step.
3. Candidate steps are the local maxima of ``D``.  For each, its base level
   ``D_base`` is the higher of the two minima of ``D`` on either side within a
   neighbourhood of length ``window`` (its *prominence* base,
   :func:`scipy.signal.peak_prominences` with ``wlen``); the step's *excess
   drop* is ``∫ (D − D_base)₊ dx`` over the interval around the peak where ``D``
   stays above ``D_base``.  A background power-law decay (constant ``D``) thus
   contributes nothing, and a noise wiggle contributes a small area.
4. A candidate is a step when its excess drop is at least ``min_drop``
   (in ``ln L``: 0.05 ≈ a 5 % drop) **and** its prominence is at least
   ``n_sigma`` standard deviations of the noise in ``D`` at the peak.  That
   noise is propagated from the data: the per-point scatter ``σ`` of ``ln L``
   about the smoothed curve (robust: 1.4826 × median absolute deviation) gives
   each cell a variance ``σ²/count`` (empty cells count as one point), pushed
   through the linear smoothing-and-differencing filter.  A noiseless curve
   has ``σ = 0`` and only the drop criterion acts.
5. The step time is the peak of ``D`` (steepest descent in log–log),
   parabolically refined; the step spans the interval where ``D`` exceeds half
   its prominence.  Peaks closer than ``2·smooth`` (in ``ln t``) to either end
   of the curve are not reported: smoothing is one-sided there, and there is
   no plateau on one side to confirm a step.  Plateau levels are ``exp(median y)`` over the grid cells
   between consecutive step intervals (plus ``loss_floor``).

Parameters trade sensitivity for robustness: raise ``smooth`` for noisy curves
(noise in ``D`` falls like ``smooth^{-3/2}``), lower ``min_drop`` for small
steps.  Two steps closer than about ``2·smooth`` in ``ln t`` merge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.ndimage import gaussian_filter1d
from scipy.signal import find_peaks, peak_prominences, peak_widths

from ..errors import InvalidParameterError
from ..results import Result
from ._curves import as_curve, log_grid

__all__ = ["Steps", "detect_steps"]


@dataclass(frozen=True, repr=False)
class Steps(Result):
    """Steps found on a loss curve (all arrays numpy float64).

    Attributes
    ----------
    times : ndarray, shape (S,)
        Time of each step (steepest log–log descent), increasing.
    t_start, t_end : ndarray, shape (S,)
        Interval where the log–log slope exceeds half the step's prominence.
    log_drops : ndarray, shape (S,)
        Excess drop ``∫(D − D_base)₊ d ln t`` of each step (natural log units).
    plateau_levels : ndarray, shape (S + 1,)
        Loss on the plateau before the first step, between steps, and after the last.
    plateau_intervals : ndarray, shape (S + 1, 2)
        Time intervals the plateau levels were measured on.
    drops : ndarray, shape (S,)
        ``plateau_levels[k] / plateau_levels[k + 1]``.
    """

    times: np.ndarray
    t_start: np.ndarray
    t_end: np.ndarray
    log_drops: np.ndarray
    plateau_levels: np.ndarray
    plateau_intervals: np.ndarray
    drops: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __len__(self) -> int:
        return int(self.times.size)


def detect_steps(
    t,
    loss,
    *,
    n_grid: int = 400,
    smooth: float | None = None,
    min_drop: float = 0.05,
    n_sigma: float = 6.0,
    window: float = 1.0,
    loss_floor: float = 0.0,
) -> Steps:
    """Find the sudden drops of a loss curve and the plateau levels between them.

    See the module docstring for the algorithm.  Times are training times
    ``t = η·steps`` (or any positive clock); ``L = (1/N)Σℓ``.

    Parameters
    ----------
    t : array_like, shape (T,)
        Strictly increasing times, positive except that a first point at
        ``t = 0`` (the initial state) is accepted and skipped.
    loss : array_like, shape (T,)
        Losses, finite and ``> loss_floor``.
    n_grid : int
        Cells of the uniform ``ln t`` grid (≥ 16).
    smooth : float, optional
        Gaussian smoothing width in ``ln t``; default two grid cells.
    min_drop : float
        Smallest accepted excess drop of ``ln L`` across a step (> 0).
    n_sigma : float
        Smallest accepted prominence of the slope peak, in noise standard deviations.
    window : float
        Length in ``ln t`` of the neighbourhood in which a peak's base is sought
        (prominence window); a step much wider than this is not seen as one.
    loss_floor : float
        Subtracted before taking logs (e.g. a known final loss ``L_∞``).

    Returns
    -------
    Steps
    """
    t, loss = _drop_origin(t, loss)
    t, loss = as_curve(t, loss, min_points=4)
    if int(n_grid) != n_grid or n_grid < 16:
        raise InvalidParameterError(f"`n_grid` must be an integer ≥ 16; found {n_grid!r}")
    n_grid = int(min(n_grid, max(16, 4 * t.size)))
    if not (min_drop > 0):
        raise InvalidParameterError(f"`min_drop` must be positive; found {min_drop!r}")
    if np.any(loss <= loss_floor):
        i = int(np.argmax(loss <= loss_floor))
        raise InvalidParameterError(
            f"`loss` must exceed `loss_floor` = {loss_floor:g} everywhere (steps are found on "
            f"ln(L − loss_floor)); found loss[{i}] = {loss[i]:.3g}"
        )
    x, _, _ = log_grid(t, np.log(loss - loss_floor), n_grid, 0.0)
    dx = float(x[1] - x[0])
    if smooth is None:
        smooth = 2 * dx
    if smooth < 0:
        raise InvalidParameterError(f"`smooth` must be ≥ 0; found {smooth!r}")
    ly = np.log(loss - loss_floor)
    x, ys, cnt = log_grid(t, ly, n_grid, smooth)
    D = -np.gradient(ys, dx)
    sigma_D = _slope_noise(t, ly, x, ys, cnt, smooth, dx)
    # pad so that a step at the very edge still has a base
    Dp = np.concatenate([[D.min()], D, [D.min()]])
    peaks, _ = find_peaks(Dp)
    keep = []
    if peaks.size:
        wlen = max(3, 2 * int(round(0.5 * window / dx)) + 1)
        prom, lb, rb = peak_prominences(Dp, peaks, wlen=wlen)
        _, _, lo, hi = peak_widths(Dp, peaks, rel_height=1.0, prominence_data=(prom, lb, rb))
        for j, pk in enumerate(peaks):
            base = Dp[pk] - prom[j]
            a, b = int(np.ceil(lo[j])), int(np.floor(hi[j]))
            area = np.clip(Dp[a : b + 1] - base, 0, None).sum() * dx
            edge = min(pk - 1, n_grid - pk) * dx  # distance in ln t to the ends of the curve
            if area >= min_drop and prom[j] >= n_sigma * sigma_D[pk - 1] and edge >= 2 * smooth:
                keep.append((pk, area, prom[j], lb[j], rb[j]))
    if keep:
        pk = np.array([k[0] for k in keep])
        prom = np.array([k[2] for k in keep])
        _, _, lo, hi = peak_widths(
            Dp,
            pk,
            rel_height=0.5,
            prominence_data=(prom, np.array([k[3] for k in keep]), np.array([k[4] for k in keep])),
        )
        times = np.exp(_refined_peaks(Dp, pk, x[0], dx, n_grid))
        xlo = x[0] + (lo - 1) * dx
        xhi = x[0] + (hi - 1) * dx
        log_drops = np.array([k[1] for k in keep])
    else:
        times = xlo = xhi = log_drops = np.zeros(0)
    levels, intervals = _plateaus(x, ys, xlo, xhi, loss_floor)
    return Steps(
        times=times,
        t_start=np.exp(xlo),
        t_end=np.exp(xhi),
        log_drops=log_drops,
        plateau_levels=levels,
        plateau_intervals=intervals,
        drops=levels[:-1] / levels[1:],
    )


def _refined_peaks(Dp: np.ndarray, pk: np.ndarray, x0: float, dx: float, n_grid: int) -> np.ndarray:
    """``ln t`` of the slope peaks ``pk`` of the padded slope ``Dp``, refined by a parabola through three cells."""
    xs = []
    for p in pk:
        if 1 <= p <= n_grid and 0 < p < Dp.size - 1:
            y0, y1, y2 = Dp[p - 1], Dp[p], Dp[p + 1]
            den = y0 - 2 * y1 + y2
            off = 0.5 * (y0 - y2) / den if den < 0 else 0.0
        else:
            off = 0.0
        xs.append(x0 + (p - 1 + np.clip(off, -0.5, 0.5)) * dx)
    return np.array(xs)


def _plateaus(x, ys, xlo, xhi, loss_floor: float) -> tuple[np.ndarray, np.ndarray]:
    """Plateau levels (median of the smoothed ``ln L`` between step intervals) and their ``(t_a, t_b)`` intervals."""
    seg_lo = np.concatenate([[x[0]], xhi])
    seg_hi = np.concatenate([xlo, [x[-1]]])
    levels, intervals = [], []
    for a, b in zip(seg_lo, seg_hi, strict=True):
        sel = (x >= a) & (x <= b)
        if sel.any():
            lv = np.median(ys[sel])
        else:
            lv = np.interp(0.5 * (a + b), x, ys)
        levels.append(np.exp(lv) + loss_floor)
        intervals.append((np.exp(a), np.exp(max(a, b))))
    return np.array(levels), np.array(intervals).reshape(-1, 2)


def _drop_origin(t, loss):
    """Drop a first point at ``t = 0`` (where every trajectory starts; it has no log time)."""
    from ._curves import _as_1d

    t, loss = _as_1d("t", t), _as_1d("loss", loss)
    if t.size and loss.size == t.size and t[0] == 0.0:
        return t[1:], loss[1:]
    return t, loss


def _slope_noise(t, ly, x, ys, cnt, smooth, dx) -> np.ndarray:
    """Standard deviation of the noise in ``D = −dy/d ln t`` per grid cell (see step 4)."""
    resid = ly - np.interp(np.log(t), x, ys)
    sigma = 1.4826 * np.median(np.abs(resid - np.median(resid)))
    if sigma == 0:
        return np.zeros_like(ys)
    var_cell = sigma**2 / np.maximum(cnt, 1)
    n = ys.size
    delta = np.zeros(2 * n + 1)
    delta[n] = 1.0
    sm = gaussian_filter1d(delta, smooth / dx, mode="constant") if smooth > 0 else delta
    h = np.gradient(sm, dx)  # response of D (up to sign) to a unit change of one cell
    full = np.convolve(var_cell, h**2, mode="full")  # full[i + n] = Σ_j var_j h²[n + i − j]
    return np.sqrt(full[n : 2 * n])
