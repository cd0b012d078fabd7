r"""Power-law fit of a loss curve, ``L(t) − L_∞ ≈ c · t^{−α}``, with a bootstrap interval.

Method
------
Points inside the window are bin-averaged in log time (``n_bins`` cells
uniform in ``ln t``, the mean of ``ln(L − L_∞)`` per cell), so every decade of
time weighs the same whatever the sampling (GD curves are dense at late times);
then ordinary least squares of ``ln(L − L_∞)`` on ``ln t`` gives ``−α`` and
``ln c``.  With ``L_inf="fit"``, ``L_∞ ∈ [0, min L)`` is chosen by minimising
the residual sum of squares (profile least squares).

Confidence interval: percentile bootstrap of the cell regression, four ways
(``bootstrap=``; every replicate drawn at once and the regressions solved as one
batch, ``nqf.curves._bootstrap``):

* ``"residuals"`` (default): resample the *standardised* cell residuals
  ``√n_c · r_c`` (``n_c`` points in cell ``c``) and add ``z*/√n_c`` to the fitted
  line.  For i.i.d. per-point noise in ``ln L`` (multiplicative noise on the
  loss) these are exchangeable although cells hold very different numbers of
  points; measured coverage of the nominal 95 % interval: 93 % (100 draws,
  uniform-in-t and log-spaced sampling).
* ``"block"``: the standardised residuals of ``"residuals"`` resampled in moving
  blocks of ``block`` consecutive cells (default ``⌈n^{1/3}⌉`` of the ``n`` cells, at
  most ``n/2``; ``block=1`` is ``"residuals"``), laid end to end — for noise
  correlated along the curve (SGD fluctuations slower than a cell), which the
  other schemes take as independent and so give too narrow an interval.
* ``"wild"``: multiply each cell residual by a random sign (Rademacher) —
  valid when the noise variance changes along the curve in a way not tied to
  ``n_c``; coverage 91 % on the same draws.
* ``"pairs"``: resample the cells with replacement — robust to a slightly
  wrong model, but it also resamples the design; coverage 90–94 %.

The slight under-coverage comes from the few early cells that hold one point
each and dominate the variance.  With ``L_inf="fit"``, ``"wild"`` and
``"pairs"`` refit ``L_∞`` in every replicate; ``"residuals"`` and ``"block"`` hold
it fixed.  Noise correlated over many cells (e.g. SGD fluctuations slower than a
cell) makes the other intervals too narrow: use ``"block"`` with blocks longer
than the correlation (in cells), or widen the cells (fewer ``n_bins``) until
neighbouring residuals are uncorrelated.

Automatic window (``window=None``)
----------------------------------
On the smoothed curve of ``ln E``, ``E = L − L_∞``, on a log-time grid of fixed
spacing (``GRID_DX = 0.025`` in ``ln t``), every rule looking forward from the
start of the window — so the window does not change when the same curve is
sampled further into its tail:

1. **start** — the end of the first plateau: the first time the smoothed excess
   has fallen below ``start_fraction`` (default ½) of its initial value;
2. **end** — the earliest of (i) the noise floor: the first later time where the
   smoothed excess falls below ``floor_factor`` (default 10) times the noise
   floor ``F``, the smallest absolute scatter of the loss about its smoothed
   curve in any neighbourhood ±0.25 of ``ln t`` (1.4826 × median absolute
   deviation; multiplicative noise of relative size ``σ`` gives ``F = σ L_end``
   and never ends the window early, an additive floor ends it where the
   signal-to-noise ratio drops to ``floor_factor``); (ii) the end of the power-law
   regime: the first time at which the local log–log slope (smoothed over 0.5 in
   ``ln t``) leaves ``[α̂/r, r α̂]`` (``r = max_slope_ratio``, default 3; ``α̂`` the
   exponent fitted from the start to that time) and stays out for one unit of
   ``ln t`` or to the end of the data — the exponential tail once the modes are
   exhausted only steepens, an unmodelled floor only flattens, an isolated step
   returns; (iii) the last point with a positive excess;
3. a window shorter than ``min_decades`` (default one decade of ``t``) is not a
   power-law range: :class:`~nqf.errors.NoPowerLawError` says so (as it does for a
   curve still on its first plateau) instead of returning a number;
4. the window is then trimmed by ``margin`` (default 10 %) of its length in
   ``ln t`` at both ends.

The result reports the window (and whether it was automatic), the bootstrap
interval and the goodness of fit (``r_squared``, ``rms_residual`` of
``ln E`` about the line).

With ``L_inf="fit"`` the window is chosen with ``L_∞ = 0``, ``L_∞`` fitted, and
the window chosen again with that ``L_∞`` (one refinement).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
from scipy.ndimage import gaussian_filter1d
from scipy.optimize import OptimizeResult, minimize_scalar

from .._validation import one_of, unit_fraction
from ..errors import InvalidParameterError, NoPowerLawError, ShapeError
from ..results import Result, to_jsonable
from ._bootstrap import SCHEMES, bootstrap_exponents, check_block
from ._curves import as_curve, log_grid

__all__ = ["PowerLawFit", "fit_power_law", "auto_window", "GRID_DX"]

GRID_DX = 0.025  # spacing of the automatic window's log-time grid (in ln t)


@dataclass(frozen=True)
class PowerLawFit(Result):
    """Result of :func:`fit_power_law` (``L(t) − L_∞ ≈ prefactor · t^{−exponent}``).

    Attributes
    ----------
    exponent : float
        ``α``.
    prefactor : float
        ``c``.
    L_inf : float
        ``L_∞`` used (given or fitted).
    window : tuple of float
        ``(t0, t1)`` fitted over.
    ci : tuple of float
        Bootstrap percentile interval of ``α`` at level ``ci_level``.
    ci_level : float
    stderr : float
        OLS standard error of ``α`` (assumes independent residuals).
    n_points : int
        Points of the curve inside the window.
    n_bins : int
        Log-time cells used in the regression.
    boot : ndarray, shape (n_boot,)
        Bootstrap replicates of ``α``.
    r_squared : float
        Coefficient of determination of the cell regression (goodness of fit).
    rms_residual : float
        Root-mean-square residual of ``ln(L − L_∞)`` about the fitted line, over the cells
        (``0.01`` means the curve stays within about 1 % of the power law).
    window_source : str
        ``"given"`` or ``"automatic"``.
    """

    exponent: float
    prefactor: float
    L_inf: float
    window: tuple
    ci: tuple
    ci_level: float
    stderr: float
    n_points: int
    n_bins: int
    boot: np.ndarray
    r_squared: float = float("nan")
    rms_residual: float = float("nan")
    window_source: str = "given"

    def __repr__(self) -> str:
        return (
            f"PowerLawFit(exponent={self.exponent:.4g}, ci=({self.ci[0]:.4g}, {self.ci[1]:.4g}), "
            f"window=({self.window[0]:.4g}, {self.window[1]:.4g}) [{self.window_source}], "
            f"L_inf={self.L_inf:.4g}, r_squared={self.r_squared:.6f}, rms_residual={self.rms_residual:.3g}, "
            f"n_points={self.n_points})"
        )

    def to_dict(self) -> dict:
        """JSON-ready summary (without the bootstrap replicates)."""
        return to_jsonable(
            {
                "exponent": self.exponent,
                "prefactor": self.prefactor,
                "L_inf": self.L_inf,
                "window": list(self.window),
                "window_source": self.window_source,
                "ci": list(self.ci),
                "ci_level": self.ci_level,
                "stderr": self.stderr,
                "n_points": self.n_points,
                "n_bins": self.n_bins,
                "r_squared": self.r_squared,
                "rms_residual": self.rms_residual,
            }
        )

    def __call__(self, t) -> np.ndarray:
        """The fitted curve ``L_∞ + c t^{−α}`` at times ``t`` (array_like, shape (T,))."""
        t = np.asarray(t, dtype=np.float64)
        return self.L_inf + self.prefactor * t ** (-self.exponent)


def _bin(lt: np.ndarray, ly: np.ndarray, n_bins: int):
    if lt.size <= n_bins:
        return lt, ly, np.ones(lt.size)
    edges = np.linspace(lt[0], lt[-1], n_bins + 1)
    idx = np.clip(np.searchsorted(edges, lt, side="right") - 1, 0, n_bins - 1)
    cnt = np.bincount(idx, minlength=n_bins)
    have = cnt > 0
    bx = np.bincount(idx, weights=lt, minlength=n_bins)[have] / cnt[have]
    by = np.bincount(idx, weights=ly, minlength=n_bins)[have] / cnt[have]
    return bx, by, cnt[have].astype(np.float64)


def _ols(x, y):
    xm, ym = x.mean(), y.mean()
    sxx = ((x - xm) ** 2).sum()
    slope = ((x - xm) * (y - ym)).sum() / sxx
    icpt = ym - slope * xm
    res = y - icpt - slope * x
    return slope, icpt, res, sxx


def _fit_once(lt, L, L_inf, n_bins):
    """Return (slope, intercept, residuals, sxx, L_inf, binned x) for fixed or fitted L_inf."""
    if L_inf == "fit":
        Lmin = L.min()

        def sse(u):
            bx, by, _ = _bin(lt, np.log(L - u * Lmin), n_bins)
            return (_ols(bx, by)[2] ** 2).sum()

        # the profile SSE need not be unimodal: coarse grid (dense near u → 1), then a bounded refinement
        grid = np.concatenate([[0.0], 1.0 - np.geomspace(1.0, 1e-7, 48)[1:]])
        vals = np.array([sse(u) for u in grid])
        j = int(np.argmin(vals))
        lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
        u = grid[j]
        if hi > lo:
            # documented to return an OptimizeResult; scipy's unannotated body infers a wider union
            r = cast(OptimizeResult, minimize_scalar(sse, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12}))
            if r.fun < vals[j]:
                u = r.x
        linf = u * Lmin
    else:
        linf = float(L_inf)
    bx, by, cnt = _bin(lt, np.log(L - linf), n_bins)
    slope, icpt, res, sxx = _ols(bx, by)
    return slope, icpt, res, sxx, linf, bx, by, cnt


def auto_window(
    t,
    loss,
    L_inf: float = 0.0,
    *,
    start_fraction: float = 0.5,
    floor_factor: float = 10.0,
    max_slope_ratio: float = 3.0,
    margin: float = 0.1,
    n_grid: int | None = None,
    smooth: float | None = None,
    min_decades: float = 1.0,
) -> tuple[float, float]:
    """The automatic power-law window of a loss curve (see the module docstring).

    Every rule is decided from the start of the window onwards, on a log-time grid of
    fixed spacing (``GRID_DX`` in ``ln t``), so the window does not depend on how far
    beyond it the curve is sampled.

    Parameters
    ----------
    t, loss : array_like, shape (T,)
    L_inf : float
        Final loss subtracted (``loss > L_inf`` required).
    start_fraction, floor_factor, max_slope_ratio, margin : float
        Rules 1–3 of the module docstring.
    n_grid : int, optional
        Cells of the log-time grid (default: spacing ``GRID_DX``, at least 50 cells).
    smooth : float, optional
        Gaussian smoothing in ``ln t`` (default ``3 · GRID_DX``).
    min_decades : float
        Shortest accepted power-law range (decades of ``t``, before the margins).

    Returns
    -------
    (t0, t1) : tuple of float

    Raises
    ------
    NoPowerLawError
        Still on the first plateau, or no straight stretch of at least ``min_decades``.
    """
    t, loss = as_curve(t, loss, min_points=4)
    E = loss - L_inf
    if np.any(E <= 0):
        # the excess has reached zero (round-off or an overestimated L_inf): that is the floor
        n = int(np.argmax(E <= 0))
        if n < 4:
            raise InvalidParameterError(
                f"`loss` must exceed `L_inf` = {L_inf:g} on the first points to find a "
                f"power-law window; found loss[{n}] = {loss[n]:.3g}"
            )
        t, loss, E = t[:n], loss[:n], E[:n]
    ly = np.log(E)
    span = float(np.log(t[-1]) - np.log(t[0]))
    if n_grid is None:
        n_grid = max(50, int(round(span / GRID_DX)))
    dx = span / n_grid
    smooth = 3 * GRID_DX if smooth is None else smooth
    x, ys, _ = log_grid(t, ly, n_grid, smooth)
    # absolute scatter of the loss about its smoothed curve, per neighbourhood of ±0.25 in ln t
    lt = np.log(t)
    absres = np.abs(loss - (np.exp(np.interp(lt, x, ys)) + L_inf))
    lo_i = np.searchsorted(lt, x - 0.25)
    hi_i = np.searchsorted(lt, x + 0.25)
    scat = np.array(
        [1.4826 * np.median(absres[a:b]) if b - a >= 5 else np.nan for a, b in zip(lo_i, hi_i, strict=True)]
    )
    below = np.nonzero(ys <= ys[0] + np.log(start_fraction))[0]
    if below.size == 0:
        raise NoPowerLawError(
            f"no power-law window: the loss never falls below {start_fraction:g} × its initial "
            f"excess (still on the first plateau?) — pass `window=(t0, t1)`"
        )
    i0 = int(below[0])
    i1 = n_grid - 1
    # (i) noise floor: the smallest local scatter anywhere (an additive floor keeps it fixed; multiplicative
    # noise of relative size σ gives σ L_end, which never ends the window early)
    F = np.nanmin(scat) if np.any(np.isfinite(scat)) else 0.0
    if F > 0:
        fl = np.nonzero(np.exp(ys[i0:]) < floor_factor * F)[0]
        if fl.size:
            i1 = min(i1, i0 + int(fl[0]))
    # (ii) end of the power-law regime: the first place where the local slope (smoothed over 0.5 in ln t)
    # leaves [α̂/r, r α̂] — α̂ fitted from the start to there — and stays out for one unit of ln t (or to the
    # end of the data): the exponential tail only steepens, a floor only flattens, an isolated step returns
    D = gaussian_filter1d(-np.gradient(ys, dx), 0.5 / dx, mode="nearest")
    w = max(int(np.ceil(1.0 / dx)), 1)
    m0 = max(int(np.ceil(0.5 / dx)), 2)
    xs, ysl = x[i0 : i1 + 1], ys[i0 : i1 + 1]
    n = np.arange(1, xs.size + 1)
    sx, sy = np.cumsum(xs), np.cumsum(ysl)
    sxx, sxy = np.cumsum(xs * xs), np.cumsum(xs * ysl)
    with np.errstate(invalid="ignore", divide="ignore"):
        alpha = -(sxy - sx * sy / n) / (sxx - sx * sx / n)
    for j in range(m0, xs.size):
        a = alpha[j]
        if not a > 0:
            continue
        seg = D[i0 + j : min(i0 + j + w, i1) + 1]
        if np.all(seg > max_slope_ratio * a) or np.all(seg < a / max_slope_ratio):
            i1 = i0 + j
            break
    if (i1 - i0) * dx < min_decades * np.log(10.0) or i1 - i0 < 4:
        raise NoPowerLawError(
            f"no power-law window: the straight stretch of ln(L − L_∞) against ln t after the first plateau "
            f"spans {(i1 - i0) * dx / np.log(10.0):.2f} decades of t (t ∈ [{np.exp(x[i0]):.3g}, "
            f"{np.exp(x[i1]):.3g}]), less than `min_decades` = {min_decades:g} — before the exponential tail, a "
            f"floor or the end of the data; pass `window=(t0, t1)` to fit anyway"
        )
    a, b = x[i0], x[i1]
    a, b = a + margin * (b - a), b - margin * (b - a)
    return float(np.exp(a)), float(np.exp(b))


def fit_power_law(
    t,
    loss,
    window=None,
    L_inf=0.0,
    *,
    n_boot: int = 500,
    seed: int | None = 0,
    ci: float = 0.95,
    n_bins: int = 60,
    bootstrap: str = "residuals",
    block: int | None = None,
) -> PowerLawFit:
    r"""Fit ``L(t) − L_∞ = c t^{−α}`` over a window, with a bootstrap confidence interval.

    Times are training times ``t = η · steps`` (positive); ``L = (1/N) Σ ℓ``.
    See the module docstring for the regression, the bootstrap and the
    automatic window.

    Parameters
    ----------
    t, loss : array_like, shape (T,)
        Strictly increasing positive times and finite losses.
    window : (t0, t1) or None
        Fit window (inclusive); ``None`` for the automatic window.
    L_inf : float, 0, "zero" or "fit"
        Final loss: a number (default 0; ``"zero"`` is the same) or ``"fit"`` (profile least
        squares; the residual bootstrap then holds the fitted ``L_∞`` fixed).
    n_boot : int
        Bootstrap replicates (≥ 0; 0 skips the interval).
    seed : int or None
        Seed of the bootstrap generator.
    ci : float
        Interval level in (0, 1).
    n_bins : int
        Log-time cells of the regression (≥ 3).
    bootstrap : {"residuals", "block", "wild", "pairs"}
        Bootstrap scheme (module docstring).
    block : int, optional
        Cells per block of ``bootstrap="block"`` (≥ 1; default ``⌈n^{1/3}⌉`` of the ``n`` cells; at most
        ``n/2`` is used); only with that scheme.

    Returns
    -------
    PowerLawFit
    """
    t, loss = as_curve(t, loss, min_points=3)
    one_of("bootstrap", bootstrap, SCHEMES)
    block = check_block(block, bootstrap)
    ci = unit_fraction("ci", ci, "the interval's level")
    if int(n_boot) != n_boot or n_boot < 0:
        raise InvalidParameterError(f"`n_boot` must be a non-negative integer; found {n_boot!r}")
    if int(n_bins) != n_bins or n_bins < 3:
        raise InvalidParameterError(f"`n_bins` must be an integer ≥ 3; found {n_bins!r}")
    if isinstance(L_inf, str):
        if L_inf not in ("zero", "fit"):
            raise InvalidParameterError(f"`L_inf` must be a number, 'zero' or 'fit'; found {L_inf!r}")
        L_inf = 0.0 if L_inf == "zero" else "fit"
    elif not np.isfinite(L_inf):
        raise InvalidParameterError(f"`L_inf` must be finite; found {L_inf!r}")
    w = _fit_window(t, loss, window, L_inf, n_bins)
    sel = (t >= w[0]) & (t <= w[1])
    if sel.sum() < 3:
        raise ShapeError(
            f"`window` {w} is empty or too small: it holds {int(sel.sum())} points of the curve "
            f"(need ≥ 3; the curve spans t ∈ [{t[0]:.3g}, {t[-1]:.3g}])"
        )
    lt, L = np.log(t[sel]), loss[sel]
    if L_inf != "fit" and np.any(L <= L_inf):
        raise InvalidParameterError(
            f"`loss` must exceed `L_inf` = {L_inf:g} inside the window; found min {L.min():.3g}"
        )
    slope, icpt, res, sxx, linf, bx, by, cnt = _fit_once(lt, L, L_inf, n_bins)
    dof = max(bx.size - 2, 1)
    stderr = float(np.sqrt((res**2).sum() / dof / sxx))
    refit = _refit_L_inf(linf, n_bins) if L_inf == "fit" and bootstrap in ("wild", "pairs") else None
    boot = bootstrap_exponents(
        bx, by, res, cnt, scheme=bootstrap, n_boot=int(n_boot), seed=seed, block=block, refit=refit
    )
    lo, hi = np.quantile(boot, [(1 - ci) / 2, (1 + ci) / 2]) if n_boot > 0 else (np.nan, np.nan)
    ss_tot = float(((by - by.mean()) ** 2).sum())
    r2 = 1.0 - float((res**2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return PowerLawFit(
        exponent=float(-slope),
        prefactor=float(np.exp(icpt)),
        L_inf=float(linf),
        window=(float(w[0]), float(w[1])),
        ci=(float(lo), float(hi)),
        ci_level=float(ci),
        stderr=stderr,
        n_points=int(sel.sum()),
        n_bins=int(bx.size),
        boot=boot,
        r_squared=r2,
        rms_residual=float(np.sqrt((res**2).mean())),
        window_source="automatic" if window is None else "given",
    )


def _fit_window(t: np.ndarray, loss: np.ndarray, window, L_inf, n_bins: int) -> tuple[float, float]:
    """The window of :func:`fit_power_law`: ``window`` checked, or the automatic one (refined once for ``"fit"``)."""
    if window is None:
        w = auto_window(t, loss, 0.0 if L_inf == "fit" else float(L_inf))
        if L_inf == "fit":
            sel = (t >= w[0]) & (t <= w[1])
            if sel.sum() >= 3:
                linf0 = _fit_once(np.log(t[sel]), loss[sel], "fit", n_bins)[4]
                try:
                    w = auto_window(t, loss, linf0)
                except ValueError:
                    pass
    else:
        try:
            t0, t1 = (float(v) for v in window)
        except (TypeError, ValueError) as exc:
            raise InvalidParameterError(f"`window` must be a pair (t0, t1) of numbers; found {window!r}") from exc
        if not (np.isfinite(t0) and np.isfinite(t1) and 0 < t0 < t1):
            raise InvalidParameterError(f"`window` must satisfy 0 < t0 < t1; found {window!r}")
        w = (t0, t1)
    return w


def _refit_L_inf(linf: float, n_bins: int):
    """The exponent of a bootstrap replicate with ``L_∞`` refitted: its cells mapped back to points of the
    window (``L = e^y + L_∞``) and fitted again (:func:`_fit_once`, ``"fit"``)."""

    def refit(xb: np.ndarray, yb: np.ndarray) -> float:
        order = np.argsort(xb)
        return float(-_fit_once(xb[order], (np.exp(yb) + linf)[order], "fit", n_bins + 1)[0])

    return refit
