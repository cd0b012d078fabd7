r"""Crowded drops: when predicted drops overlap, predict the curve they make together (docs/theory.md §5).

A drop of a :class:`nqf.Staircase` is a logistic mode: it removes ``ℓ_k = L_{k−1} − L_k`` at rate
``ζ_k`` (``Staircase.rates``) around its time ``t_k``, and its excess loss is
``ℓ_k expit(ζ_k (t_k − t))²``.  Its **width** is the time over which that excess falls from 90 %
to 10 % of ``ℓ_k``: ``w_k = (logit(1 − √0.1) − logit(1 − √0.9))/ζ_k ≈ 3.69/ζ_k``.  Two
consecutive drops **crowd** when ``t_{k+1} − t_k`` is below the mean of their widths: no plateau
between them can be resolved.

Rule for the **crowded window** (stated before any network is looked at): the longest run of
consecutive crowded pairs; the window runs from the first to the last drop time of that run.

Inside it the prediction is the *curve*: the exact mode sum of the staircase
(:func:`nqf.curves.predicted_curve` with ``ln q_k = ζ_k t_k``, i.e. each mode reaches half
saturation at its drop time), its local exponent ``α(t) = −d ln(L − L_∞)/d ln t`` on a 20-point
log grid, and the **band** at each grid point: the range of the mode sum's local exponent over
the grid cell ``[t_i/h, t_i h]`` (``h`` = half a grid step).  A curve that follows the mode sum
has its secant exponent over that cell inside the band (mean-value theorem).  Where the modes in
the window span at least a decade of index, the asymptotic exponent ``(a − 1)/b``
(:func:`nqf.curves.predict_exponent`) is reported with each spectral fit's mode window and a
95 % normal interval from its OLS standard error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import logit

from ..errors import InvalidParameterError, ShapeError
from ..results import Result, to_jsonable
from ._curves import as_curve
from ._exponents import predict_exponent, predicted_curve
from ._powerlaw import PowerLawFit, fit_power_law

__all__ = [
    "CrowdedPrediction",
    "CrowdedComparison",
    "crowded_prediction",
    "compare_crowded",
    "drop_widths",
    "mode_sum",
]

#: ``w_k ζ_k``: time for a logistic mode's excess loss to fall from 90 % to 10 % of ``ℓ_k``, times its rate.
WIDTH_FACTOR = float(logit(1 - math.sqrt(0.1)) - logit(1 - math.sqrt(0.9)))
_FINE = 16  # fine points per grid cell for the band


def drop_widths(staircase) -> np.ndarray:
    """Width ``w_k = 3.69/ζ_k`` of each drop (``inf`` where the rate is not positive), shape (K,)."""
    r = np.asarray(staircase.rates[: staircase.n_drops], float)
    with np.errstate(divide="ignore"):
        return np.where(r > 0, WIDTH_FACTOR / np.where(r > 0, r, 1.0), np.inf)


@dataclass(frozen=True, repr=False)
class CrowdedPrediction(Result):
    """Result of :func:`crowded_prediction`.

    Attributes
    ----------
    crowded : bool
        At least two consecutive crowded pairs and a window of positive length.
    eps : float
    window : tuple of float
        ``(t_start, t_end)`` of the crowded window (``nan`` when not crowded).
    drops : tuple of int
        1-based first and last drop of the window's run.
    n_crowded_pairs : int
        Crowded consecutive pairs over the whole staircase.
    L_inf : float
        Final level ``L_K``.
    t, loss, local_exponent, band_low, band_high : ndarray, shape (n_grid,)
        Grid, mode sum, its local exponent and the band at each grid point.
    exponent : float or None
        Asymptotic ``(a − 1)/b`` where the window's modes span ≥ a decade of index, else ``None``.
    exponent_ci : tuple
        95 % interval of ``(a − 1)/b`` propagated from the standard errors of ``a`` and ``b``.
    a, b : tuple
        ``(value, ci_low, ci_high)`` of each spectral exponent; ``k_range``: their 1-based mode window.
    window_exponent : float
        Exponent of a power law fitted (:func:`nqf.curves.fit_power_law`) to the mode sum over the window.
    notes : tuple of str
    """

    crowded: bool
    eps: float
    window: tuple
    drops: tuple
    n_crowded_pairs: int
    L_inf: float
    t: np.ndarray = field(repr=False)
    loss: np.ndarray = field(repr=False)
    local_exponent: np.ndarray = field(repr=False)
    band_low: np.ndarray = field(repr=False)
    band_high: np.ndarray = field(repr=False)
    exponent: float | None = None
    exponent_ci: tuple = (math.nan, math.nan)
    a: tuple = (math.nan, math.nan, math.nan)
    b: tuple = (math.nan, math.nan, math.nan)
    k_range: tuple = (0, 0)
    window_exponent: float = math.nan
    notes: tuple = ()

    def __repr__(self) -> str:
        if not self.crowded:
            return f"CrowdedPrediction(crowded=False, pairs={self.n_crowded_pairs}, eps={self.eps:g})"
        ex = "None" if self.exponent is None else f"{self.exponent:.3g}"
        return (
            f"CrowdedPrediction(window=({self.window[0]:.4g}, {self.window[1]:.4g}), drops={self.drops}, "
            f"local={np.nanmin(self.local_exponent):.3g}…{np.nanmax(self.local_exponent):.3g}, "
            f"(a−1)/b={ex}, eps={self.eps:g})"
        )

    def to_dict(self) -> dict:
        return to_jsonable({f: getattr(self, f) for f in self.__dataclass_fields__})

    def mode_sum(self, t, staircase) -> np.ndarray:
        """The staircase's exact mode sum at times ``t`` (array_like, shape (T,))."""
        return mode_sum(np.asarray(t, float), staircase)


def mode_sum(t, staircase) -> np.ndarray:
    """The staircase as a smooth curve, each drop a logistic mode: ``L_K + Σ_k ℓ_k expit(ζ_k (t_k − t))²`` at
    times ``t`` (array_like), through :func:`predicted_curve` (``ln q_k = ζ_k t_k``: half saturation at ``t_k``)."""
    t = np.asarray(t, float)
    K = staircase.n_drops
    lv = np.asarray(staircase.levels, float)
    ell, zeta, tk = lv[:-1] - lv[1:], np.asarray(staircase.rates[:K], float), np.asarray(staircase.times, float)
    keep = (ell > 0) & (zeta > 0) & np.isfinite(tk)
    e = staircase.eps
    z_star = e * (1.0 + np.exp(np.minimum(zeta[keep] * tk[keep], 700.0)))
    return predicted_curve(t, ell[keep], zeta[keep], e, "absolute", z_star, L_inf=float(lv[-1]))


def _window(staircase) -> tuple[int, int, int]:
    """``(first, last, n_pairs)``: 0-based drops bounding the longest run of crowded pairs."""
    t, w = np.asarray(staircase.times, float), drop_widths(staircase)
    crowd = np.diff(t) < 0.5 * (w[:-1] + w[1:])
    best, run = (0, -1), None  # pairs i..j-1 crowded -> drops i..j
    for i, c in enumerate(np.append(crowd, False)):
        if c and run is None:
            run = i
        elif not c and run is not None:
            if i - run > best[1] - best[0]:
                best = (run, i)
            run = None
    return best[0], best[1], int(crowd.sum())


def _local(t: np.ndarray, excess: np.ndarray) -> np.ndarray:
    return -np.gradient(np.log(excess), np.log(t))


def _spectral(staircase, first: int, last: int) -> dict:
    """``(a − 1)/b`` from the window's modes when they span ≥ a decade of index (else empty)."""
    lv = np.asarray(staircase.levels, float)
    ell, zeta = lv[:-1] - lv[1:], np.asarray(staircase.rates[:-1], float)
    order = np.argsort(-zeta, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(1, order.size + 1)
    k0, k1 = int(rank[first : last + 1].min()), int(rank[first : last + 1].max())
    if k1 < 10 * k0 or np.any(ell <= 0) or np.any(zeta <= 0):
        return {}
    p = predict_exponent(ell, zeta, (k0, k1))
    z = 1.959963984540054
    se = math.hypot(p.a_stderr / p.b, (p.a - 1) * p.b_stderr / p.b**2)
    return {
        "exponent": p.exponent,
        "exponent_ci": (p.exponent - z * se, p.exponent + z * se),
        "a": (p.a, p.a - z * p.a_stderr, p.a + z * p.a_stderr),
        "b": (p.b, p.b - z * p.b_stderr, p.b + z * p.b_stderr),
        "k_range": p.k_range,
    }


def crowded_prediction(staircase, *, n_grid: int = 20, max_decades: float | None = None) -> CrowdedPrediction:
    """Detect crowded drops of ``staircase`` and predict the curve over the crowded window.

    Parameters
    ----------
    staircase : nqf.Staircase
        A predicted staircase at its ``ε`` (``staircase.eps``); drops with a positive rate are modes.
    n_grid : int
        Points of the log grid over the window (≥ 3).
    max_decades : float, optional
        Keep only the first ``max_decades`` decades of the crowded run (``t_end ≤ t_start·10^max_decades``).

    Returns
    -------
    CrowdedPrediction
        ``crowded=False`` (empty arrays) when fewer than two consecutive pairs crowd.
    """
    if int(n_grid) != n_grid or n_grid < 3:
        raise InvalidParameterError(f"`n_grid` must be an integer ≥ 3; found {n_grid!r}")
    if not hasattr(staircase, "levels") or not hasattr(staircase, "rates"):
        raise InvalidParameterError(f"`staircase` must be an nqf.Staircase; found {type(staircase).__name__}")
    first, last, n_pairs = _window(staircase) if staircase.n_drops > 2 else (0, -1, 0)
    t_all = np.asarray(staircase.times, float)
    L_inf = float(staircase.levels[-1])
    if last - first < 2 or not t_all[last] > t_all[first] > 0:
        empty = np.zeros(0)
        return CrowdedPrediction(
            False, staircase.eps, (math.nan, math.nan), (0, 0), n_pairs, L_inf, empty, empty, empty, empty, empty
        )
    t0, t1 = float(t_all[first]), float(t_all[last])
    if max_decades is not None:
        t1 = min(t1, t0 * 10.0 ** float(max_decades))
        last = max(int(np.searchsorted(t_all, t1, side="right")) - 1, first + 2)
    t = np.geomspace(t0, t1, int(n_grid))
    h = (t1 / t0) ** (0.5 / (n_grid - 1))
    fine = np.geomspace(t0 / h, t1 * h, _FINE * n_grid + 1)
    ex = mode_sum(fine, staircase) - L_inf
    notes = []
    if np.any(ex <= 0):
        notes.append("the mode sum reaches L_K inside the window (float64): local exponent undefined there")
    loc = _local(fine, np.where(ex > 0, ex, np.nan))
    cells = [(fine >= ti / h) & (fine <= ti * h) for ti in t]
    lo = np.array([np.nanmin(loc[c]) for c in cells])
    hi = np.array([np.nanmax(loc[c]) for c in cells])
    L = mode_sum(t, staircase)
    ok = (fine >= t0) & (fine <= t1) & (ex > 0)
    wfit = (
        fit_power_law(fine[ok], ex[ok] + L_inf, window=(t0, t1), L_inf=L_inf, n_boot=0).exponent
        if ok.sum() >= 3
        else math.nan
    )
    return CrowdedPrediction(
        True,
        staircase.eps,
        (t0, t1),
        (first + 1, last + 1),
        n_pairs,
        L_inf,
        t,
        L,
        np.interp(np.log(t), np.log(fine), loc),
        lo,
        hi,
        window_exponent=float(wfit),
        notes=tuple(notes),
        **_spectral(staircase, first, last),
    )


@dataclass(frozen=True, repr=False)
class CrowdedComparison(Result):
    """Result of :func:`compare_crowded`: a measured curve against a :class:`CrowdedPrediction`.

    Attributes
    ----------
    t, local_exponent : ndarray, shape (n_grid,)
        The prediction's grid and the measured secant exponent over each grid cell.
    inside : ndarray of bool, shape (n_grid,)
        Measured exponent within the prediction's band.
    all_inside : bool
    worst : float
        Largest distance of the measured exponent outside the band (0 when all inside).
    fit : PowerLawFit or None
        Power law fitted to the measured curve over the window, with bootstrap CI; ``None`` when
        the measured loss reaches the predicted ``L_∞`` inside the window.
    predicted : float
        The same fit of the mode sum (``prediction.window_exponent``).
    """

    t: np.ndarray = field(repr=False)
    local_exponent: np.ndarray = field(repr=False)
    inside: np.ndarray = field(repr=False)
    all_inside: bool
    worst: float
    fit: PowerLawFit | None
    predicted: float

    def __repr__(self) -> str:
        f = self.fit
        m = "None" if f is None else f"{f.exponent:.4g} [{f.ci[0]:.4g}, {f.ci[1]:.4g}]"
        return (
            f"CrowdedComparison(inside={int(self.inside.sum())}/{self.inside.size}, worst={self.worst:.3g}, "
            f"measured={m}, "
            f"predicted={self.predicted:.4g})"
        )

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in ("t", "local_exponent", "inside", "all_inside", "worst")}
        d.update(fit=None if self.fit is None else self.fit.to_dict(), predicted=self.predicted)
        return to_jsonable(d)


def compare_crowded(prediction: CrowdedPrediction, t, loss, *, n_boot: int = 200, seed: int | None = 0):
    """The measured local exponent of ``loss`` on the prediction's grid, and a fitted exponent with bootstrap CI.

    Parameters
    ----------
    prediction : CrowdedPrediction
        With ``crowded=True``.
    t, loss : array_like, shape (T,)
        The measured curve (``t = η·steps``); ``L_∞`` is the prediction's ``L_K``.
    n_boot, seed :
        Bootstrap of :func:`nqf.curves.fit_power_law` over the same window.

    Returns
    -------
    CrowdedComparison
    """
    if not isinstance(prediction, CrowdedPrediction) or not prediction.crowded:
        raise InvalidParameterError("`prediction` must be a CrowdedPrediction with crowded=True")
    t, loss = as_curve(t, loss)
    g = prediction.t
    h = (g[-1] / g[0]) ** (0.5 / (g.size - 1))
    if t[0] > g[0] / h or t[-1] < g[-1] * h:
        raise ShapeError(
            f"`t` must cover the crowded window [{g[0] / h:.4g}, {g[-1] * h:.4g}]; found [{t[0]:.4g}, {t[-1]:.4g}]"
        )
    ex = loss - prediction.L_inf
    with np.errstate(invalid="ignore", divide="ignore"):
        lex = np.log(np.where(ex > 0, ex, np.nan))
    lo_, hi_ = np.interp(np.log(g / h), np.log(t), lex), np.interp(np.log(g * h), np.log(t), lex)
    loc = -(hi_ - lo_) / (2 * math.log(h))
    dist = np.maximum(prediction.band_low - loc, loc - prediction.band_high)
    inside = np.isfinite(loc) & (dist <= 0)
    fit_kw = {"window": prediction.window, "L_inf": prediction.L_inf, "n_boot": n_boot, "seed": seed}
    sel = (t >= prediction.window[0]) & (t <= prediction.window[1])
    fit = fit_power_law(t, loss, **fit_kw) if np.all(loss[sel] > prediction.L_inf) else None
    return CrowdedComparison(
        g,
        loc,
        inside,
        bool(inside.all()),
        float(np.nanmax(np.where(np.isfinite(dist), dist.clip(min=0), np.inf))),
        fit,
        prediction.window_exponent,
    )
