"""Results of the saddle sequence: :class:`Saddle` (one plateau) and :class:`SaddleSequence` (the staircase).

Immutable dataclasses with a compact ``repr`` (no arrays), ``to_dict()`` (JSON-ready
numbers and lists) and pickling; times follow docs/theory.md §4.6 (``t = η · steps``,
``M(0) = ε I``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..._validation import eps_value, unit_fraction
from ...results import Result, to_jsonable
from .._staircase import Staircase
from .._timing import TAIL_FRACTION, learning_drops

__all__ = ["Saddle", "SaddleSequence"]


@dataclass(frozen=True, eq=False)
class Saddle(Result):
    """One stationary point of the flow (one plateau of the staircase).

    Attributes
    ----------
    index : int
        ``k`` (``0`` is ``M = 0``).
    M : torch.Tensor, shape (p, p)
        The stationary point ``M_k = V Vᵀ`` (one representative when the loss
        is invariant under a group acting on ``M``, e.g. the MLP balance
        rescaling ``a → c a, u → u / c``; ``loss``, ``G`` and the rates do not
        depend on the representative).
    V : torch.Tensor, shape (p, rank)
        Factor of ``M_k`` with orthogonal columns.
    rank : int
    loss : float
        Plateau level ``L(M_k)``.
    G : torch.Tensor, shape (p, p)
        ``G(M_k) = 𝒜^*(r)/N``.
    stationarity : float
        ``‖G(M_k) M_k‖_F`` (0 at an exact stationary point).
    rates : torch.Tensor, shape (p − rank,)
        Eigenvalues ``h`` of ``−P G(M_k) P`` on the complement of
        ``range(M_k)``, descending.
    escape_rate : float
        ``4 λ_max(−P G(M_k) P)`` = ``4 rates[0]`` (≤ 0 at the global minimiser).
    escape_direction : torch.Tensor of shape (p, m), or None
        Orthonormal directions along which the flow leaves ``M_k`` (``m > 1``
        for a degenerate top eigenvalue); ``None`` for the last saddle.
    escape_mode_rate : float
        ``4 h`` of the direction that actually escapes (equals
        ``escape_rate`` except under the commuting rule, where a slower mode
        that is already larger can escape first).
    tau : float
        Leading-order arrival time in units of ``ln(1/ε)``: the flow from
        ``M(0) = ε I`` reaches this plateau at ``t ≈ tau · ln(1/ε)``.
    """

    index: int
    M: torch.Tensor
    V: torch.Tensor
    rank: int
    loss: float
    G: torch.Tensor
    stationarity: float
    rates: torch.Tensor
    escape_rate: float
    escape_direction: torch.Tensor | None = None
    escape_mode_rate: float = float("nan")
    tau: float = 0.0

    def __repr__(self) -> str:
        m = 0 if self.escape_direction is None else int(self.escape_direction.shape[1])
        return (
            f"Saddle(index={self.index}, p={int(self.M.shape[0])}, rank={self.rank}, loss={self.loss:.6g}, "
            f"escape_rate={self.escape_rate:.4g}, escaping={m}, tau={self.tau:.4g}, "
            f"stationarity={self.stationarity:.2e})"
        )

    def to_dict(self) -> dict:
        """JSON-ready scalars and the rates (``M``, ``V``, ``G`` and the directions are left out)."""
        return to_jsonable(
            {
                "index": self.index,
                "p": int(self.M.shape[0]),
                "rank": self.rank,
                "loss": self.loss,
                "stationarity": self.stationarity,
                "escape_rate": self.escape_rate,
                "escape_mode_rate": self.escape_mode_rate,
                "tau": self.tau,
                "n_escaping": 0 if self.escape_direction is None else int(self.escape_direction.shape[1]),
                "rates": self.rates,
            }
        )


@dataclass(frozen=True, eq=False)
class SaddleSequence(Result):
    """Result of :func:`saddle_sequence`: the predicted staircase.

    Attributes
    ----------
    saddles : tuple of Saddle
        ``saddles[0]`` is ``M = 0``.
    global_minimum : bool
        True when the last saddle satisfies ``λ_max(−G) ≤ tol`` (``G ⪰ 0``,
        ``G M = 0``): it is then the global minimiser of the convex loss over
        the PSD cone.
    certificate : float
        ``λ_max(−G)`` at the last saddle.
    rule : str
        ``"commuting"`` or ``"generic"`` (the log-magnitude bookkeeping used).
    first_offset : float
        ``s_level`` of the first escape (see :meth:`escape_times`), computed
        from the escape trajectory at ``level = first_level``.
    first_level : float
    message : str
        Why the sequence stopped.
    notes : tuple of str
        Caveats met on the way (e.g. a rank drop under the generic rule).
    """

    saddles: tuple
    global_minimum: bool
    certificate: float
    rule: str
    first_offset: float = float("nan")
    first_level: float = 0.5
    message: str = ""
    notes: tuple = ()
    _orbit: Any = None  # Heteroclinic of the first escape (None for a single saddle)
    _problem: Any = None  # LossProblem (for corrected_escape_times)

    def __post_init__(self):
        object.__setattr__(self, "saddles", tuple(self.saddles))
        object.__setattr__(self, "notes", tuple(self.notes))

    def __repr__(self) -> str:
        lv = self.plateau_levels
        return (
            f"SaddleSequence(rule={self.rule!r}, p={int(self.saddles[0].M.shape[0])}, drops={len(self) - 1}, "
            f"L={lv[0]:.6g}→{lv[-1]:.6g}, final_rank={int(self.ranks[-1])}, "
            f"global_minimum={self.global_minimum}, certificate={self.certificate:.2e})"
        )

    # ------------------------------------------------------------------ arrays
    @property
    def plateau_levels(self) -> np.ndarray:
        """``(K+1,)`` losses ``L(M_k)``, ``k = 0..K``."""
        return np.array([s.loss for s in self.saddles])

    @property
    def ranks(self) -> np.ndarray:
        """``(K+1,)`` ranks of ``M_k``."""
        return np.array([s.rank for s in self.saddles])

    @property
    def escape_rates(self) -> np.ndarray:
        """``(K+1,)`` escape rates ``4 λ_max(−P G(M_k) P)``."""
        return np.array([s.escape_rate for s in self.saddles])

    @property
    def taus(self) -> np.ndarray:
        """``(K+1,)`` leading-order arrival times ``τ_k`` (``t ≈ τ_k ln(1/ε)``); ``τ_0 = 0``."""
        return np.array([s.tau for s in self.saddles])

    @property
    def order_parameters(self) -> list:
        """The stationary points ``M_k``, each ``(p, p)``."""
        return [s.M for s in self.saddles]

    def __len__(self) -> int:
        return len(self.saddles)

    # ------------------------------------------------------------------ times
    def escape_times(self, eps: float, *, offset: bool = True) -> np.ndarray:
        """Predicted times of the drops for ``M(0) = ε I``.

        Parameters
        ----------
        eps : float
            Initial scale ``ε`` (``M(0) = ε I``), ``0 < ε < 1``.
        offset : bool
            Add the exact ``O(1)`` offset to the first drop (only the first one
            has a known offset).

        Returns
        -------
        numpy.ndarray, shape (K,)
            ``t_k ≈ τ_k ln(1/ε)`` for ``k = 1..K`` (drop from plateau ``k−1`` to
            ``k``); with ``offset`` the first entry is ``ln(1/ε)/(4λ_1) +
            s_level``, the time at which the loss crosses
            ``L_0 − level (L_0 − L_1)`` (``level = first_level``).
        """
        eps = eps_value(eps)
        t = self.taus[1:] * math.log(1.0 / eps)
        if offset and t.size and np.isfinite(self.first_offset):
            t[0] += self.first_offset
        return t

    def corrected_escape_times(self, eps: float) -> np.ndarray:
        """Drop times with their ``O(1)`` offsets (small-part recursion, :mod:`nqf.reductions.saddles._clock`).

        Time at which the loss crosses ``(L_{k−1} + L_k)/2`` for ``M(0) = ε I``,
        ``k = 1..K``; NaN from the first plateau that is shorter than the
        relaxation into its saddle (no stretch of pure exponential growth).
        Validated against the exact flow for drops 2 and 3 of an MLP example
        (error ≤ 0.006 where the leading order is 0.11–0.15 off); costs one
        heteroclinic integration with a ``p × p`` propagator per drop.

        Returns
        -------
        numpy.ndarray, shape (K,)
        """
        from ._clock import corrected_escape_times

        eps = eps_value(eps)
        return np.asarray(corrected_escape_times(self._problem, self.saddles, eps), dtype=float)

    def subspace_times(self, eps: float, *, M0=None) -> np.ndarray:
        """Drop times of the NQF restricted to the span of the saddles and their escape directions.

        The flow ``Ẇ = −2 G(M) W`` with ``W = Q C``, ``Q`` an orthonormal basis of every ``V_k`` and escape
        direction (:mod:`nqf.reductions.saddles._subspace`): the same plateaus, with the transits between them,
        the growth of the next escape direction during the earlier plateaus and overlapping plateaus, which the
        leading order ``τ_k ln(1/ε)`` leaves out.  Each time is the downward crossing of ``(L_{k−1} + L_k)/2``.

        Parameters
        ----------
        eps : float in (0, 1)
            ``M(0) = εI``.
        M0 : array_like, shape (p, p), optional
            A start other than ``εI`` (e.g. ``W(0) W(0)ᵀ`` of a width below ``p``).

        Returns
        -------
        numpy.ndarray, shape (K,)
            NaN for a drop the reduced flow does not reach (:data:`~nqf.reductions.saddles._subspace.HORIZON`
            times the latest leading-order time).
        """
        return self._subspace(eps_value(eps), M0, None)

    def _subspace(self, eps: float, M0, through: int | None) -> np.ndarray:
        from ._subspace import subspace_times

        M = None if M0 is None else torch.as_tensor(M0, dtype=torch.float64)
        return subspace_times(self._problem, self.saddles, eps, M0=M, through=through)

    def first_escape_time(self, eps: float, level: float | None = None) -> float:
        """Time at which the loss from ``M(0) = ε I`` crosses ``L_0 − level (L_0 − L_1)``.

        ``t = ln(1/ε)/(4 λ_1) + s_level`` with ``s_level`` read off the escape
        trajectory (exact up to ``o(1)`` as ``ε → 0``).
        """
        eps = eps_value(eps)
        if len(self.saddles) < 2:
            return float("inf")
        level = self.first_level if level is None else level
        level = unit_fraction("level", level, "of the first drop")
        L0, L1 = self.saddles[0].loss, self.saddles[1].loss
        s_level = self._orbit.crossing(L0 - level * (L0 - L1))
        return self.saddles[1].tau * math.log(1.0 / eps) + s_level

    def staircase(
        self, eps: float, *, chain: list | None = None, leading: bool = False, M0=None, subspace: bool = False
    ) -> Staircase:
        """The predicted staircase at ``ε`` (:class:`nqf.reductions.Staircase`, method ``"saddle-sequence"``).

        Drop times by the best rule available for each
        (:func:`nqf.reductions.saddles._clock.predicted_escape_times`: the first with its exact
        ``O(1)`` offset, later ones with the small-part recursion where it applies, else leading
        order), or with ``leading`` the first with its offset and the others at leading order
        only (no heteroclinic integration).

        Parameters
        ----------
        eps : float in (0, 1)
            ``M(0) = εI``.
        chain : list, optional
            :func:`nqf.reductions.saddles._clock.heteroclinic_chain` of this sequence (reused).
        leading : bool
            Skip the small-part recursion.
        M0 : array_like, shape (p, p), optional
            A start other than ``εI`` (e.g. ``εΠ`` of a width below ``p``): the first drop is timed from
            ``q_0ᵀ M0 q_0`` and the recursion runs on a factor of ``M0``
            (:func:`nqf.reductions.saddles._clock.corrected_escape_times`).
        subspace : bool
            Time every drop by the saddle-subspace flow (:meth:`subspace_times`, rule ``"subspace flow"``) instead.
        """
        from ._clock import predicted_escape_times

        eps = eps_value(eps)
        K = len(self.saddles) - 1
        if subspace:
            through = learning_drops(self.plateau_levels)
            times, rules = self._subspace(eps, M0, through), ["subspace flow"] * K
            how = "drop times: midpoint crossings of the NQF restricted to the span of the saddles and their escape "
            how += "directions (the saddle-subspace flow; time_rules)"
            if through < K:
                how += (
                    f"; drops {through + 1}–{K} remove at most {100 * TAIL_FRACTION:g} % of the fall: the flow stops "
                    "before them (its cost grows with the last time) and they keep the leading-order rule"
                )
            missed = [k for k in range(through) if not np.isfinite(times[k])]
            if missed or through < K:  # the leading-order rule for drops not reached or not timed, said in a note
                lead, lead_rules = predicted_escape_times(self, eps, M0=M0, recursion=False)
                for k in [*missed, *range(through, K)]:
                    times[k], rules[k] = lead[k], lead_rules[k]
            if missed:
                how += (
                    f"; drop(s) {[k + 1 for k in missed]} not reached by the subspace flow (the flow leaves the span "
                    "or lingers elsewhere): timed by the rule named in time_rules"
                )
        elif leading or K == 0:
            times, rules = predicted_escape_times(self, eps, M0=M0, recursion=False)
        else:
            times, rules = predicted_escape_times(self, eps, chain=chain, M0=M0)
        if not subspace:
            how = (
                "drop times: the first with its exact O(1) offset; later ones with the O(1) correction of the "
                "small-part recursion where it applies, else leading order τ_k ln(1/ε) (rule per drop in "
                "time_rules)"
            )
        dirs = [self.saddles[k].escape_direction[:, 0].numpy() for k in range(K)]
        return Staircase(
            "saddle-sequence",
            eps,
            self.plateau_levels,
            times,
            tuple(rules),
            self.escape_times(eps, offset=False),
            self.escape_rates,
            self.ranks,
            np.stack(dirs, 1) if K else np.zeros((int(self.saddles[0].M.shape[0]), 0)),
            np.full(K, -1),
            bool(self.global_minimum),
            (
                how,
                *_order_warning(times, rules),
                *self.notes,
            ),
        )

    def to_dict(self) -> dict:
        """JSON-ready summary (numbers and lists; NaN/inf as None) with one entry per saddle."""
        return to_jsonable({**self.summary(), "saddles": [s.to_dict() for s in self.saddles]})

    def summary(self) -> dict:
        """JSON-serialisable summary."""
        return {
            "plateau_levels": self.plateau_levels.tolist(),
            "ranks": self.ranks.tolist(),
            "escape_rates": self.escape_rates.tolist(),
            "taus": self.taus.tolist(),
            "first_offset": self.first_offset,
            "first_level": self.first_level,
            "global_minimum": self.global_minimum,
            "certificate": self.certificate,
            "rule": self.rule,
            "message": self.message,
            "notes": list(self.notes),
        }


def _order_warning(times, rules) -> tuple[str, ...]:
    """A warning when the predicted drop times are not increasing (drops ``k`` and ``k+1`` named with their rules)."""
    t = np.asarray(times, dtype=float)
    bad = [k for k in range(t.size - 1) if np.isfinite(t[k]) and np.isfinite(t[k + 1]) and t[k + 1] < t[k]]
    if not bad:
        return ()
    pairs = "; ".join(f"t_{k + 1} = {t[k]:.4g} ({rules[k]}) > t_{k + 2} = {t[k + 1]:.4g} ({rules[k + 1]})" for k in bad)
    return (
        f"warning: predicted drop times are not increasing ({pairs}): the rules disagree by more than the "
        "plateaus between them; treat these times with care",
    )
