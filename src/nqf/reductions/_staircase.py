r"""The central output of nqf: :class:`Staircase`, a predicted staircase at one ``ε``.

Every reduction returns one (:meth:`nqf.reductions.lv.LotkaVolterra.staircase`,
:meth:`nqf.reductions.lv.LimitResult.staircase`,
:meth:`nqf.reductions.svd_modes.TwoLayerModes.staircase`,
:meth:`nqf.reductions.saddles.SaddleSequence.staircase`), and
:func:`nqf.reductions.predict` picks the reduction for an operator.  A staircase
is a list of plateau levels ``L_0 > L_1 > … > L_K`` and drop times
``t_1 ≤ … ≤ t_K`` (drop ``k`` goes from ``L_{k−1}`` to ``L_k``), each time with the
rule that produced it; it is judged against a measured curve by
:func:`nqf.curves.compare_staircase` (the one judge of levels, times and
flatness).

Conventions: ``L = (1/N) Σ_n ½‖f_n − y_n‖²``, training time ``t = η · steps``,
``M(0) = εI`` unless the reduction says otherwise; every array is numpy float64
(``ranks`` and ``modes`` int64).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .._validation import one_of
from ..errors import InvalidParameterError, NonFiniteError, ShapeError
from ..results import Result, require_pandas, to_jsonable
from ._timing import TAIL_FRACTION, learning_drops, staircase as _staircase_curve

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Staircase", "PredictionCost", "METHODS", "TIME_RULES"]

#: Reductions that produce a :class:`Staircase` (its ``method``).
METHODS = ("lotka-volterra", "limit", "svd-modes", "saddle-sequence", "dormant-flow", "agf")

#: The rules a drop time can come from (its entry in ``Staircase.time_rules``):
#:
#: * ``"logistic"`` — exact half-saturation time of an isolated logistic mode
#:   (``z = z*/2``; Lotka–Volterra with diagonal ``C``);
#: * ``"exact flow"`` — exact half-saturation time of an SVD mode's strength
#:   (``p_k = λ_k/2``; two-layer network on whitened data);
#: * ``"exact offset"`` — ``ln(1/ε)/(4h_0) + s_mid``: the loss's midpoint crossing of the
#:   first drop of a saddle sequence, exact up to ``o(1)``;
#: * ``"O(1) recursion"`` — the loss's midpoint crossing with the ``O(1)`` offset of the
#:   small-part recursion (later drops of a saddle sequence);
#: * ``"leading order"`` — ``τ_k ln(1/ε)`` only (unknown ``O(1)`` offset);
#: * ``"subspace flow"`` — the loss's midpoint crossing of the NQF restricted to the span of the saddle
#:   sequence's factors and escape directions (:meth:`nqf.reductions.saddles.SaddleSequence.subspace_times`);
#: * ``"ε → 0 limit"`` — ``τ_k ln(1/ε)`` from the saddle-to-saddle limit of
#:   interacting Lotka–Volterra modes;
#: * ``"seeded NQF"`` — the loss's midpoint crossing of the seeded NQF
#:   (:func:`nqf.dynamics.seeded_nqf`): the real network's clock with the next orders' seeds
#:   (:func:`nqf.curves.real_clock`);
#: * ``"dormant flow"`` — the blow-up time of the scaled dormant flow of a term of degree ``k ≥ 3``
#:   (:func:`nqf.reductions.dormant.dormant_staircase`): ``ρ^{2−k} s_k``, a power of the initial scale;
#: * ``"Taylor flow"`` — the loss's midpoint crossing of the gradient flow of the units' Taylor polynomial through
#:   the leading order ``k`` (:func:`nqf.reductions.dormant.dormant_staircase` with ``lower``: orders below ``k``
#:   non-zero on a finite sample); not a power of the initial scale;
#: * ``"AGF"`` — Alternating Gradient Flows at order two (:func:`nqf.reductions.dormant.agf_staircase`): the
#:   dormant strength along a direction reaches its best-fit strength, ``ln(c_u/σ_u)/ζ_u`` per phase.
TIME_RULES = (
    "logistic",
    "exact flow",
    "exact offset",
    "O(1) recursion",
    "leading order",
    "subspace flow",
    "ε → 0 limit",
    "seeded NQF",
    "dormant flow",
    "Taylor flow",
    "AGF",
)


def _f64(name: str, value, ndim: int) -> np.ndarray:
    a = np.array(value, dtype=np.float64, copy=True)
    if a.ndim != ndim:
        raise ShapeError(f"`{name}` must be {ndim}-D; found shape {a.shape}")
    a.setflags(write=False)
    return a


#: Relative rise of one plateau level over the previous one still read as round-off of the level searches.
LEVEL_RISE_TOL = 1e-6


def _check_levels(levels: np.ndarray) -> None:
    """Plateau levels are finite and do not rise: each drop lowers the loss (up to :data:`LEVEL_RISE_TOL` of the
    largest level, the round-off of the reductions' level searches)."""
    if not np.all(np.isfinite(levels)):
        raise NonFiniteError(f"`levels` must be finite; found {levels.tolist()[:6]}")
    rise = np.diff(levels)
    scale = float(np.max(np.abs(levels))) if levels.size else 0.0
    if rise.size and float(rise.max()) > LEVEL_RISE_TOL * scale:
        k = int(np.argmax(rise))
        raise InvalidParameterError(
            f"`levels` must not rise from one plateau to the next (each drop lowers the loss); found L_{k} = "
            f"{levels[k]:.6g} < L_{k + 1} = {levels[k + 1]:.6g}"
        )


#: Time rules that read a time off a run (NaN there: the run never reached that drop); every other rule predicts.
MEASURED_RULES = ("seeded NQF",)


def _check_times(name: str, a: np.ndarray, rules: tuple) -> None:
    """Times are ``≥ 0`` or ``inf`` (a drop that never comes); NaN only where the time was measured on a run that
    did not reach the drop (:data:`MEASURED_RULES`) or for a leading order the rule does not have."""
    measured = np.array([r in MEASURED_RULES for r in rules], dtype=bool) if rules else np.ones(a.size, dtype=bool)
    bad = (np.isnan(a) & ~measured) | (a < 0)
    if name == "times" and np.any(bad):
        k = int(np.argmax(bad))
        raise InvalidParameterError(
            f"`times` must be ≥ 0 (inf: a drop that never comes; NaN only for a time measured on a run that did not "
            f"reach the drop, rule {MEASURED_RULES[0]!r}); found t_{k + 1} = {a[k]} by rule {rules[k]!r}"
        )
    if name != "times" and np.any(a < 0):
        raise InvalidParameterError(f"`{name}` must be ≥ 0 or NaN; found {a.tolist()[:6]}")


def _i64(name: str, value, n: int) -> np.ndarray:
    a = np.array(value, dtype=np.int64, copy=True).reshape(-1)
    if a.shape != (n,):
        raise ShapeError(f"`{name}` must have shape ({n},); found {a.shape}")
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class PredictionCost(Result):
    """Seconds a saddle-sequence prediction took (:attr:`Staircase.cost`; the other reductions take none worth timing).

    Attributes
    ----------
    search : float
        The saddle search with its first orbit.
    clock : float, optional
        The O(1) times of the later drops (the heteroclinic clock); ``None`` when the drops were timed by the subspace
        flow or a chain was given.
    clock_estimate : tuple (low, high), optional
        The clock's estimate made before it ran (:func:`nqf.reductions.saddles.clock_cost`): one later drop's cost
        to all of theirs.
    subspace : float, optional
        The subspace flow that timed the drops (``predict(..., subspace=True)``).
    """

    search: float
    clock: float | None = None
    clock_estimate: tuple[float, float] | None = None
    subspace: float | None = None

    def __repr__(self) -> str:
        parts = [f"search={self.search:.3g} s"]
        parts += [f"{k}={v:.3g} s" for k, v in (("clock", self.clock), ("subspace", self.subspace)) if v is not None]
        return f"PredictionCost({', '.join(parts)})"

    def to_dict(self) -> dict:
        return to_jsonable(dataclasses.asdict(self))


@dataclass(frozen=True)
class Staircase(Result):
    """A predicted staircase: plateau levels and drop times at one ``ε``.

    Attributes
    ----------
    method : str
        The reduction (one of :data:`METHODS`).
    eps : float
        Initial scale the times are for.
    levels : ndarray, shape (K + 1,)
        Plateau levels ``L_0 … L_K``.
    times : ndarray, shape (K,)
        Drop times ``t_1 … t_K`` by the best rule available for each (``time_rules``).
    time_rules : tuple of str, length K
        The rule behind each time (one of :data:`TIME_RULES`).
    times_leading : ndarray, shape (K,)
        Leading order ``ln(1/ε)/ζ_k`` (Lotka–Volterra, SVD modes) or ``τ_k ln(1/ε)``.
    rates : ndarray, shape (K + 1,)
        Growth rate of what escapes each plateau (the last: 0, or the rate of the
        escape beyond the last resolved drop).
    ranks : ndarray of int64, shape (K + 1,)
        Rank of the order parameter on each plateau (number of active modes).
    directions : ndarray, shape (p, K)
        Unit-space direction that grows at drop ``k`` (mode strengths ``qᵀ M(t) q``); for units made of channels
        (:func:`nqf.structure.channel_split`) a channel direction (``p'`` rows, strength ``qᵀ M'(t) q``).
    modes : ndarray of int64, shape (K,)
        Index of the mode that switches at drop ``k`` in the reduction's own list
        (Lotka–Volterra and SVD modes; ``−1`` for the saddle sequence).
    global_minimum : bool
        ``L_K`` is the global minimum of the NQF loss.
    notes : tuple of str
    levels_module : ndarray, shape (K + 1,), optional
        The real module's level on each plateau: its own gradient flow over the plateau's learned directions
        (AGF's cost step, :func:`nqf.dynamics.active_levels`); ``None`` when not computed.
    time_uncertainty : ndarray, shape (K,), optional
        A bound on each time's relative error from a criterion fixed before any comparison (for the seeded
        clock: :func:`nqf.curves.level_time_bounds`); NaN where there is none, ``None`` when not estimated.
    cost : PredictionCost, optional
        What the prediction took (the saddle sequence's search and clock); ``None`` for the other reductions.
    """

    method: str
    eps: float
    levels: np.ndarray = field(repr=False)
    times: np.ndarray = field(repr=False)
    time_rules: tuple = field(repr=False)
    times_leading: np.ndarray = field(repr=False)
    rates: np.ndarray = field(repr=False)
    ranks: np.ndarray = field(repr=False)
    directions: np.ndarray = field(repr=False)
    modes: np.ndarray = field(repr=False)
    global_minimum: bool = False
    notes: tuple = field(default=(), repr=False)
    levels_module: np.ndarray | None = field(default=None, repr=False)
    time_uncertainty: np.ndarray | None = field(default=None, repr=False)
    cost: PredictionCost | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        one_of("method", self.method, METHODS)
        set_ = object.__setattr__
        set_(self, "eps", float(self.eps))
        levels = _f64("levels", self.levels, 1)
        K = levels.size - 1
        if K < 0:
            raise ShapeError("`levels` must hold at least the initial plateau L_0; found an empty array")
        _check_levels(levels)
        set_(self, "levels", levels)
        times = {name: _f64(name, getattr(self, name), 1) for name in ("times", "times_leading")}
        for name, a in times.items():
            if a.size != K:
                raise ShapeError(f"`{name}` must have K = {K} entries (one fewer than `levels`); found {a.size}")
        rules = tuple(str(r) for r in self.time_rules)
        if len(rules) != K or not set(rules) <= set(TIME_RULES):
            raise InvalidParameterError(f"`time_rules` must be {K} entries of {TIME_RULES}; found {rules!r}")
        set_(self, "time_rules", rules)
        for name, a in times.items():
            _check_times(name, a, rules if name == "times" else ())
            set_(self, name, a)
        rates = _f64("rates", self.rates, 1)
        if rates.size != K + 1:
            raise ShapeError(f"`rates` must have K + 1 = {K + 1} entries; found {rates.size}")
        set_(self, "rates", rates)
        set_(self, "ranks", _i64("ranks", self.ranks, K + 1))
        set_(self, "modes", _i64("modes", self.modes, K))
        dirs = _f64("directions", self.directions, 2)
        if dirs.shape[1] != K:
            raise ShapeError(f"`directions` must have shape (p, {K}); found {dirs.shape}")
        set_(self, "directions", dirs)
        set_(self, "global_minimum", bool(self.global_minimum))
        set_(self, "notes", tuple(str(n) for n in self.notes))
        for name, n in (("levels_module", K + 1), ("time_uncertainty", K)):
            if getattr(self, name) is not None:
                a = _f64(name, getattr(self, name), 1)
                if a.size != n:
                    raise ShapeError(f"`{name}` must have {n} entries; found {a.size}")
                set_(self, name, a)

    @property
    def n_drops(self) -> int:
        """``K``, the number of drops."""
        return int(self.times.size)

    def trusted(self, limit: float = 0.05) -> np.ndarray:
        """Drop ``k``'s time is trusted: its :attr:`time_uncertainty` is at most ``limit`` (True where no
        uncertainty was estimated; NaN counts as trusted only when the whole field is absent).  Shape (K,)."""
        if self.time_uncertainty is None:
            return np.ones(self.n_drops, dtype=bool)
        return np.nan_to_num(self.time_uncertainty, nan=np.inf) <= float(limit)

    def carrying(self, fraction: float = TAIL_FRACTION) -> Staircase:
        """The staircase through the drops that carry the learning: cut after the first drop that leaves at most
        ``fraction`` of the fall ``L_0 − L_K``, with a note naming the
        drops left out; itself when there is no such tail."""
        K, k = self.n_drops, learning_drops(self.levels, fraction)
        if k >= K:
            return self
        note = (
            f"tail: drops {k + 1}–{K} (L = {self.levels[k]:.4g} → {self.levels[-1]:.4g}, at most "
            f"{100 * float(fraction):g} % of the fall L_0 − L_K, predicted at t = {self.times[k]:.4g}–"
            f"{self.times[-1]:.4g}) are left out"
        )
        return self._through(k, note)

    def _through(self, k: int, note: str) -> Staircase:
        """The staircase through drop ``k`` (plateaus ``0 … k``), not a global minimum, with ``note`` first: the one
        cut of every per-plateau and per-drop field (the tail, a width that cannot reach the later drops)."""
        cut = {name: getattr(self, name)[: k + 1] for name in ("levels", "rates", "ranks", "levels_module")
               if getattr(self, name) is not None}  # fmt: skip
        cut.update({name: getattr(self, name)[:k] for name in ("times", "times_leading", "modes", "time_uncertainty")
                    if getattr(self, name) is not None})  # fmt: skip
        return dataclasses.replace(
            self, **cut, time_rules=self.time_rules[:k], directions=self.directions[:, :k], global_minimum=False,
            notes=(note, *self.notes),
        )  # fmt: skip

    @property
    def p(self) -> int:
        """Unit dimension of ``directions``."""
        return int(self.directions.shape[0])

    def loss_curve(self, t) -> np.ndarray:
        """The piecewise-constant staircase ``L(t)``: ``L_k`` on ``[t_k, t_{k+1})`` (``timing.staircase``)."""
        return _staircase_curve(t, self.times, self.levels)

    def markers(self) -> list:
        """``[(t_k, L_k)]``, ``k = 0..K`` with ``t_0 = 0``: where each plateau starts, for marking figures."""
        starts = np.concatenate([[0.0], self.times])
        return [(float(a), float(b)) for a, b in zip(starts, self.levels, strict=True)]

    def drops(self) -> list:
        """One dict per drop: ``k``, ``time``, ``rule``, ``leading``, ``from``/``to`` levels, ``rate``."""
        return [
            {
                "k": k + 1,
                "time": float(self.times[k]),
                "rule": self.time_rules[k],
                "leading": float(self.times_leading[k]),
                "from": float(self.levels[k]),
                "to": float(self.levels[k + 1]),
                "rate": float(self.rates[k]),
            }
            for k in range(self.n_drops)
        ]

    def to_frame(self) -> pd.DataFrame:
        """The staircase as a table, one row per plateau ``k = 0 … K`` (needs pandas: ``pip install 'nqf[frames]'``).

        Columns: ``k``; ``level`` (``L_k``), ``rank``, ``rate`` (:attr:`levels`, :attr:`ranks`, :attr:`rates`);
        ``time``, the drop time ``t_k`` that starts plateau ``k`` (``0.0`` for ``k = 0``, then :attr:`times`);
        ``time_rule`` (``None`` for ``k = 0``); ``time_leading`` (``0.0``, then :attr:`times_leading`); then
        ``level_module`` (:attr:`levels_module`) and ``time_uncertainty`` (of the drop that starts the plateau,
        NaN for ``k = 0``) where the staircase has them.  ``df.attrs`` holds ``method``, ``eps`` and
        ``global_minimum``.

        Raises
        ------
        MissingDependencyError
            pandas is not installed.
        """
        pd = require_pandas("Staircase.to_frame()")
        cols = {
            "k": np.arange(self.levels.size, dtype=np.int64),
            "level": np.array(self.levels),  # copies: the frame is the caller's, the staircase stays read-only
            "rank": np.array(self.ranks),
            "rate": np.array(self.rates),
            "time": np.concatenate([[0.0], self.times]),
            "time_rule": pd.Series([None, *self.time_rules], dtype=object),  # object: None stays None
            "time_leading": np.concatenate([[0.0], self.times_leading]),
        }
        if self.levels_module is not None:
            cols["level_module"] = np.array(self.levels_module)
        if self.time_uncertainty is not None:
            cols["time_uncertainty"] = np.concatenate([[math.nan], self.time_uncertainty])
        df = pd.DataFrame(cols)
        df.attrs.update(method=self.method, eps=self.eps, global_minimum=self.global_minimum)
        return df

    def __repr__(self) -> str:
        t1 = float(self.times[0]) if self.n_drops else math.nan
        return (
            f"Staircase({self.method}, drops={self.n_drops}, L={self.levels[0]:.4g}→{self.levels[-1]:.4g}, "
            f"t_1={t1:.4g}, eps={self.eps:g})"
        )

    def to_dict(self) -> dict:
        return to_jsonable(
            {
                "method": self.method,
                "eps": self.eps,
                "levels": self.levels,
                "times": self.times,
                "time_rules": list(self.time_rules),
                "times_leading": self.times_leading,
                "rates": self.rates,
                "ranks": self.ranks,
                "modes": self.modes,
                "global_minimum": self.global_minimum,
                "notes": list(self.notes),
                "levels_module": self.levels_module,
                "time_uncertainty": self.time_uncertainty,
                "cost": None if self.cost is None else self.cost.to_dict(),
            }
        )
