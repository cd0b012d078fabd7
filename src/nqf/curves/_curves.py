"""Validation and log-time resampling of loss curves, shared by the analysis tools.

All analysis functions take a curve ``(t, loss)`` of training times
(``t = η · steps``, docs/theory.md §0) and losses ``L = (1/N) Σ ℓ``, and
work in log time ``x = ln t`` where a staircase's steps are evenly resolved
and a power law is a straight line.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import gaussian_filter1d

from ..errors import InvalidParameterError, InvalidTypeError, NonFiniteError, ShapeError

__all__ = ["as_curve", "log_grid"]


def _as_1d(name: str, value) -> np.ndarray:
    try:
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(
            f"`{name}` must be a 1-D array of numbers; found {type(value).__name__} ({exc})"
        ) from exc
    if a.ndim != 1:
        raise ShapeError(f"`{name}` must be 1-D; found shape {a.shape}")
    return a


def as_curve(t, loss, *, min_points: int = 3, name_t: str = "t", name_loss: str = "loss"):
    """Validate a loss curve.

    Parameters
    ----------
    t : array_like, shape (T,)
        Training times, strictly increasing and positive.
    loss : array_like, shape (T,)
        Losses, finite.
    min_points : int
        Fewest points accepted.

    Returns
    -------
    t, loss : numpy.ndarray, shape (T,), float64

    Raises
    ------
    ShapeError
        Not 1-D, mismatched lengths, or fewer than ``min_points`` points.
    NonFiniteError
        NaN or infinite entries.
    ValueError
        Non-positive or non-increasing times.
    """
    t, loss = _as_1d(name_t, t), _as_1d(name_loss, loss)
    if t.shape != loss.shape:
        raise ShapeError(f"`{name_t}` and `{name_loss}` must have the same length; found {t.size} and {loss.size}")
    if t.size < min_points:
        raise ShapeError(f"a loss curve needs at least {min_points} points; found {t.size}")
    for name, a in ((name_t, t), (name_loss, loss)):
        bad = ~np.isfinite(a)
        if bad.any():
            raise NonFiniteError(
                f"`{name}` must be finite; found {int(bad.sum())} NaN/inf entries "
                f"(first at index {int(np.argmax(bad))}) out of {a.size}"
            )
    if t.min() <= 0:
        raise InvalidParameterError(
            f"`{name_t}` must be positive (the analysis works in log time); found min "
            f"{t.min():.3g} at index {int(np.argmin(t))} — drop t = 0 or shift the clock"
        )
    if np.any(np.diff(t) <= 0):
        i = int(np.argmax(np.diff(t) <= 0))
        raise InvalidParameterError(
            f"`{name_t}` must be strictly increasing; found t[{i}] = {t[i]:.6g} ≥ t[{i + 1}] = {t[i + 1]:.6g}"
        )
    return t, loss


def log_grid(t: np.ndarray, y: np.ndarray, n_grid: int, smooth: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bin-average ``y`` on a uniform grid in ``x = ln t`` and smooth it.

    Each grid cell takes the mean of the points that fall in it (so dense late
    points do not outweigh sparse early ones, and averaging reduces noise);
    empty cells are filled by linear interpolation in ``x``; the result is
    smoothed with a Gaussian of standard deviation ``smooth`` (in units of
    ``ln t``; 0 for none).

    Returns
    -------
    x : numpy.ndarray, shape (n_grid,)
        Cell centres in ``ln t``.
    ys : numpy.ndarray, shape (n_grid,)
        Smoothed cell means.
    counts : numpy.ndarray of int, shape (n_grid,)
        Points per cell.
    """
    lx = np.log(t)
    edges = np.linspace(lx[0], lx[-1], n_grid + 1)
    x = 0.5 * (edges[1:] + edges[:-1])
    idx = np.clip(np.searchsorted(edges, lx, side="right") - 1, 0, n_grid - 1)
    cnt = np.bincount(idx, minlength=n_grid)
    tot = np.bincount(idx, weights=y, minlength=n_grid)
    have = cnt > 0
    ym = np.empty(n_grid)
    ym[have] = tot[have] / cnt[have]
    if not have.all():
        ym[~have] = np.interp(x[~have], x[have], ym[have])
    dx = x[1] - x[0] if n_grid > 1 else 1.0
    if smooth > 0:
        ym = gaussian_filter1d(ym, smooth / dx, mode="nearest")
    return x, ym, cnt
