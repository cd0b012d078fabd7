r"""Comparing a measured loss curve with a predicted staircase (saddle sequence or Lotka–Volterra).

A prediction is a list of plateau levels ``L_0 > L_1 > … > L_K`` and drop times
``t_1 < … < t_K`` (drop ``k`` goes from ``L_{k−1}`` to ``L_k``).  On a curve
``(t, loss)`` (training time ``t = η · steps``, ``L = (1/N) Σ ℓ``) this module measures

* **escape time** of drop ``k``: the first *downward* crossing of the midpoint
  ``(L_{k−1} + L_k)/2`` (linear interpolation between saved points; NaN if the
  curve never gets there) — the same level at which
  :meth:`nqf.reductions.saddles.SaddleSequence.first_escape_time` places the first drop;
* **plateau level** ``k``: the loss at the middle of the predicted plateau,
  ``(t_k + t_{k+1})/2`` (``t_0 = 0``; the last plateau: the end of the curve);
* **flatness** of plateau ``k``: the change of the loss across the middle third
  of ``[t_k, t_{k+1}]`` (the last plateau: of ``[t_K, t_end]``), divided by the
  *adjacent drop* — the smaller of ``L_{k−1} − L_k`` and ``L_k − L_{k+1}`` that
  exist.  A plateau is *flat* when this ratio is at most ``flat_threshold``
  (default 0.25: the curve moves by less than a quarter of a step while it is
  supposed to rest).  Judging the change against the loss itself instead would
  call every plateau flat whenever the steps are small compared with the loss
  (on digits each step is ~10 % of the loss and the loss falls 33–76 % of the
  adjacent step across a "plateau").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import ShapeError
from ..reductions import Staircase, crossing_times, midpoint_levels
from ..results import Result, to_jsonable
from ._curves import _as_1d

__all__ = [
    "StaircaseComparison",
    "compare_staircase",
    "downward_crossings",
    "plateau_flatness",
    "regime_exit",
    "level_read_times",
    "FLAT_THRESHOLD",
]

#: Default largest ratio (loss change across the middle of a plateau) / (adjacent drop) of a flat plateau.
FLAT_THRESHOLD = 0.25


def _curve(t, loss):
    t, loss = _as_1d("t", t), _as_1d("loss", loss)
    if t.shape != loss.shape or t.size < 2:
        raise ShapeError(f"`t` and `loss` must be 1-D of the same length ≥ 2; found {t.shape} and {loss.shape}")
    if np.any(np.diff(t) <= 0):
        raise ShapeError("`t` must be strictly increasing")
    return t, loss


def downward_crossings(t, loss, levels) -> np.ndarray:
    """First time the curve falls to each level (``loss ≤ level``), linear interpolation; NaN if never.

    :func:`nqf.reductions.crossing_times` downward, on a validated curve.

    Parameters
    ----------
    t, loss : array_like, shape (T,)
        The curve; ``t`` may start at 0.
    levels : array_like, shape (K,)

    Returns
    -------
    numpy.ndarray, shape (K,)
    """
    t, loss = _curve(t, loss)
    return crossing_times(t, loss, np.atleast_1d(np.asarray(levels, float)), direction="down")


def _bounds(t_end: float, times: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], times, [max(t_end, times[-1] if times.size else 0.0)]])


def level_read_times(t_end: float, times) -> np.ndarray:
    """Where :func:`compare_staircase` reads each plateau level: the middle of the predicted plateau
    ``(t_k + t_{k+1})/2`` (``t_0 = 0``), the last one at ``t_end``.  Shape (K + 1,)."""
    times = np.asarray(times, float).reshape(-1)
    b = _bounds(float(t_end), times)
    where = 0.5 * (b[:-1] + b[1:])
    where[-1] = float(t_end)
    return where


def adjacent_drops(levels) -> np.ndarray:
    """Shape (K + 1,): the smaller predicted drop next to each plateau (the scale flatness is judged on).

    ``min(|L_{k−1} − L_k|, |L_k − L_{k+1}|)`` over the drops that exist; NaN for a staircase without drops.
    """
    lev = np.asarray(levels, float).reshape(-1)
    d = np.abs(lev[:-1] - lev[1:])
    out = np.minimum(np.concatenate([[np.inf], d]), np.concatenate([d, [np.inf]]))
    return np.where(np.isfinite(out), out, np.nan)


def plateau_flatness(t, loss, levels, times) -> np.ndarray:
    """Loss change across the middle third of each predicted plateau over the adjacent drop (see module doc).

    Returns
    -------
    numpy.ndarray, shape (K + 1,)
        NaN where the plateau lies beyond the curve or has no adjacent drop.
    """
    t, loss = _curve(t, loss)
    levels, times = np.asarray(levels, float), np.asarray(times, float)
    b = _bounds(float(t[-1]), times)
    adjacent = adjacent_drops(levels)
    out = []
    for k in range(len(levels)):
        a0, a1 = b[k], b[k + 1]
        lo, hi = a0 + (a1 - a0) / 3, a0 + 2 * (a1 - a0) / 3
        if np.isnan(adjacent[k]) or not np.isfinite(lo) or hi > t[-1] or hi <= lo:
            out.append(math.nan)
            continue
        la, lb = np.interp([lo, hi], t, loss)
        out.append(abs(la - lb) / max(float(adjacent[k]), 1e-300))
    return np.array(out)


@dataclass(frozen=True)
class StaircaseComparison(Result):
    """A measured curve against a predicted staircase.

    Attributes
    ----------
    levels_predicted : ndarray, shape (K + 1,)
    levels_measured : ndarray, shape (K + 1,)
    times_predicted : ndarray, shape (K,)
    times_measured : ndarray, shape (K,)
        Downward crossings of the midpoints ``(L_{k−1} + L_k)/2`` (NaN: never reached).
    flatness : ndarray, shape (K + 1,)
        Loss change across the middle of plateau ``k`` over the adjacent drop.
    flat_threshold : float
    """

    levels_predicted: np.ndarray = field(repr=False)
    levels_measured: np.ndarray = field(repr=False)
    times_predicted: np.ndarray = field(repr=False)
    times_measured: np.ndarray = field(repr=False)
    flatness: np.ndarray = field(repr=False)
    flat_threshold: float = FLAT_THRESHOLD

    @property
    def level_errors(self) -> np.ndarray:
        """``|measured − predicted| / predicted`` per plateau, shape (K + 1,)."""
        return np.abs(self.levels_measured - self.levels_predicted) / np.maximum(np.abs(self.levels_predicted), 1e-300)

    @property
    def time_errors(self) -> np.ndarray:
        """``|measured − predicted| / predicted`` per drop, shape (K,) (NaN where never reached)."""
        return np.abs(self.times_measured - self.times_predicted) / np.maximum(np.abs(self.times_predicted), 1e-300)

    @property
    def adjacent_drops(self) -> np.ndarray:
        """Shape (K + 1,): :func:`adjacent_drops` of the predicted levels (the scale of ``flatness``)."""
        return adjacent_drops(self.levels_predicted)

    @property
    def flat(self) -> np.ndarray:
        """Boolean (K + 1,): plateau flat enough to be called a plateau (NaN flatness → False)."""
        with np.errstate(invalid="ignore"):
            return np.nan_to_num(self.flatness, nan=np.inf) <= self.flat_threshold

    def __repr__(self) -> str:
        te, le = self.time_errors, self.level_errors
        mt = float(np.nanmax(te)) if te.size and np.isfinite(te).any() else math.nan
        return (
            f"StaircaseComparison(drops={len(self.times_predicted)}, max_time_error={mt:.3g}, "
            f"max_level_error={float(np.nanmax(le)) if le.size else math.nan:.3g}, "
            f"flat={int(self.flat.sum())}/{len(self.flatness)})"
        )

    def to_dict(self) -> dict:
        def clean(a):
            return to_jsonable(np.asarray(a, float))

        return {
            "levels_predicted": clean(self.levels_predicted),
            "levels_measured": clean(self.levels_measured),
            "level_errors": clean(self.level_errors),
            "times_predicted": clean(self.times_predicted),
            "times_measured": clean(self.times_measured),
            "time_errors": clean(self.time_errors),
            "flatness": clean(self.flatness),
            "flat": to_jsonable(self.flat),
            "flat_threshold": to_jsonable(self.flat_threshold),
        }


def compare_staircase(t, loss, staircase, times=None, *, flat_threshold: float = FLAT_THRESHOLD) -> StaircaseComparison:
    """Measure levels, escape times and flatness of a curve against a predicted staircase.

    The one judge of a staircase in nqf: :func:`nqf.analyze` and every experiment
    measure levels, drop times and flatness through it (module docstring for the rules).

    Parameters
    ----------
    t, loss : array_like, shape (T,)
        Measured curve (``t = η · steps``, may start at 0).
    staircase : nqf.Staircase or array_like, shape (K + 1,)
        The prediction (:func:`nqf.predict`), or its plateau levels ``L_0 … L_K`` with
        ``times`` given separately.
    times : array_like, shape (K,), optional
        Predicted drop times ``t_1 … t_K`` when ``staircase`` is an array of levels.
    flat_threshold : float
        See the module docstring.

    Returns
    -------
    StaircaseComparison
    """
    t, loss = _curve(t, loss)
    if isinstance(staircase, Staircase):
        if times is not None:
            raise ShapeError("`times` must be omitted when `staircase` is a Staircase (it holds its own times)")
        levels, times = staircase.levels, staircase.times
    elif times is None:
        raise ShapeError(
            "`staircase` must be a nqf.Staircase, or levels with `times`; "
            f"found {type(staircase).__name__} and no times"
        )
    else:
        levels = staircase
    levels, times = np.asarray(levels, float).reshape(-1), np.asarray(times, float).reshape(-1)
    if levels.size != times.size + 1:
        raise ShapeError(f"`levels` must have one entry more than `times`; found {levels.size} and {times.size}")
    if not flat_threshold > 0:
        raise ShapeError(f"`flat_threshold` must be positive; found {flat_threshold}")
    mids = midpoint_levels(levels)
    t_meas = downward_crossings(t, loss, mids)
    where = level_read_times(float(t[-1]), times)
    lv_meas = np.where(where <= t[-1], np.interp(where, t, loss), np.nan)
    return StaircaseComparison(
        levels, lv_meas, times, t_meas, plateau_flatness(t, loss, levels, times), float(flat_threshold)
    )


def regime_exit(
    t,
    loss_real,
    loss_nqf,
    steps,
    nqf_minimum: float | None,
    *,
    gap_tolerance: float = 0.05,
    min_margin: float = 0.01,
    gap_floor: float = 0.0,
) -> dict:
    """First saved step where a real network leaves its NQF (the quadratic regime).

    It has left when ``|L_real − L_NQF| / max(L_NQF, gap_floor) > gap_tolerance`` or when
    ``L_real < (1 − min_margin) · nqf_minimum`` (below the NQF's global minimum,
    which no NQF trajectory can reach).  ``gap_floor`` (default 0: the plain relative gap) is the loss
    below which the NQF's loss counts as zero on the problem's scale: a relative gap to a loss of ~0
    (a network that fits its data exactly) measures round-off, not the network leaving the regime.

    Parameters
    ----------
    t, loss_real, loss_nqf, steps : array_like, shape (T,)
        Common saved points of both runs.
    nqf_minimum : float or None
        Certified global minimum of the NQF loss (None: only the gap is judged).

    Returns
    -------
    dict
        ``max_gap``, ``gap_tolerance``, ``nqf_minimum``, ``final_real``, ``final_nqf``,
        ``left_step``, ``left_time``, ``reason`` (None when it never left) and
        ``below_minimum_step``.
    """
    t, Lr, Ln = (np.asarray(a, float) for a in (t, loss_real, loss_nqf))
    gap = np.abs(Lr - Ln) / np.maximum(np.abs(Ln), max(float(gap_floor), 1e-300))
    bad_gap = gap > gap_tolerance
    below = Lr < (1 - min_margin) * nqf_minimum if nqf_minimum is not None else np.zeros_like(bad_gap)
    bad = bad_gap | below
    out = {
        "max_gap": float(gap.max()) if gap.size else math.nan,
        "gap_tolerance": float(gap_tolerance),
        "nqf_minimum": nqf_minimum,
        "final_real": float(Lr[-1]),
        "final_nqf": float(Ln[-1]),
        "left_step": None,
        "left_time": None,
        "reason": None,
        "below_minimum_step": None,
    }
    if below.any():
        out["below_minimum_step"] = int(steps[int(np.argmax(below))])
    if bad.any():
        i = int(np.argmax(bad))
        out.update(
            left_step=int(steps[i]),
            left_time=float(t[i]),
            reason=(
                "real loss below the NQF global minimum"
                if below[i]
                else f"|L_real − L_NQF| / L_NQF = {gap[i]:.3g} > {gap_tolerance:g}"
            ),
        )
    return out
