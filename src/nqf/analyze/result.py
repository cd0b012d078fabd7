"""The result of :func:`nqf.analyze`: :class:`Analysis` (frozen, picklable, JSON-ready, plottable)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..analysis.compare import StaircaseComparison
from ..results import Result, summarize
from ..results import to_jsonable as _clean

__all__ = ["Analysis", "Prediction", "CheckRow"]


@dataclass(frozen=True)
class CheckRow(Result):
    """One assumption check: a number, what it is judged against, and the outcome.

    ``status`` is ``"ok"``, ``"warn"`` (the prediction is weaker, reasons in ``note``) or ``"fail"``.
    """

    name: str
    value: str
    criterion: str
    status: str
    note: str = ""

    def __repr__(self) -> str:
        return f"CheckRow({summarize(self.name)}, {summarize(self.value)}, status={self.status!r})"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "value": self.value,
            "criterion": self.criterion,
            "status": self.status,
            "note": self.note,
        }


@dataclass(frozen=True)
class Prediction(Result):
    """Predicted staircase at one ``ε``.

    Attributes
    ----------
    method : str
        ``"saddle-sequence"`` (non-commuting data) or ``"lotka-volterra"`` (commuting data).
    levels : ndarray, shape (K + 1,)
        Plateau levels ``L_0 … L_K``.
    times : ndarray, shape (K,)
        Drop times ``t_k``: the first with its exact ``O(1)`` offset, later ones with the
        ``O(1)`` correction where it applies, else leading order (see ``time_rules``).
    times_leading : ndarray, shape (K,)
        Leading order ``τ_k ln(1/ε)``.
    rates : ndarray, shape (K + 1,)
        Escape rates ``4 λ_max(−P G(M_k) P)`` at each plateau (``ζ`` for Lotka–Volterra).
    ranks : ndarray, shape (K + 1,)
    directions : ndarray, shape (p, K)
        Unit-space direction that grows at drop ``k`` (mode strengths ``qᵀ M(t) q``).
    global_minimum : bool
        The last level is the NQF's global minimum (certified by ``G ⪰ 0``).
    eps : float
    notes : tuple of str
    time_rules : tuple of str
        Rule behind each time: ``"exact offset"``, ``"O(1) recursion"``, ``"leading order"``
        (:func:`nqf.reductions.saddles.clock.predicted_escape_times`) or ``"Lotka–Volterra"``.
    """

    method: str
    levels: np.ndarray = field(repr=False)
    times: np.ndarray = field(repr=False)
    times_leading: np.ndarray = field(repr=False)
    rates: np.ndarray = field(repr=False)
    ranks: np.ndarray = field(repr=False)
    directions: np.ndarray = field(repr=False)
    global_minimum: bool = False
    eps: float = math.nan
    notes: tuple = ()
    time_rules: tuple = ()

    @property
    def n_drops(self) -> int:
        return int(self.times.size)

    def loss_curve(self, t) -> np.ndarray:
        """Staircase ``L(t)``: ``L_k`` on ``[t_k, t_{k+1})``."""
        return self.levels[np.searchsorted(self.times, np.asarray(t, float), side="right")]

    def __repr__(self) -> str:
        return (
            f"Prediction({self.method}, drops={self.n_drops}, L={self.levels[0]:.4g}→{self.levels[-1]:.4g}, "
            f"t_1={self.times[0] if self.n_drops else math.nan:.4g}, eps={self.eps:g})"
        )

    def to_dict(self) -> dict:
        return _clean(
            {
                "method": self.method,
                "levels": self.levels,
                "times": self.times,
                "times_leading": self.times_leading,
                "rates": self.rates,
                "ranks": self.ranks,
                "global_minimum": self.global_minimum,
                "eps": self.eps,
                "notes": list(self.notes),
                "time_rules": list(self.time_rules),
            }
        )


@dataclass(frozen=True)
class Analysis(Result):
    """What :func:`nqf.analyze` found: checks, predictions, NQF and real training, comparison, verdict.

    Attributes
    ----------
    model, data, units : str
        Descriptions of the model, the data and the analysed units.
    operator : str
        ``"analytic"`` or ``"autodiff"``.
    p, width, n_samples, n_outputs : int
    eps, lr : float
    steps : int
    checks : tuple of CheckRow
    prediction : Prediction
    nqf, real : StaircaseComparison
        The NQF simulation and the real network against the prediction.
    validity : dict
        ``max_gap`` (max ``|L_real − L_NQF| / L_NQF``), ``gap_tolerance``,
        ``left_step``/``left_time`` (first step where the gap exceeds the tolerance
        or the real loss falls below the NQF minimum; None if never), ``reason``.
    verdict : dict
        ``trust`` (``"high"``, ``"moderate"``, ``"low"``), ``text`` (sentences), numbers.
    curves : dict of ndarray
        ``t``, ``loss_real``, ``loss_nqf``, ``loss_predicted`` (T,), ``strength_real``,
        ``strength_nqf`` (T, K).
    timings : dict
        Wall seconds of each part.
    """

    model: str
    data: str
    units: str
    operator: str
    p: int
    width: int
    n_samples: int
    n_outputs: int
    eps: float
    lr: float
    steps: int
    checks: tuple = field(repr=False)
    prediction: Prediction = field(repr=False)
    nqf: StaircaseComparison = field(repr=False)
    real: StaircaseComparison = field(repr=False)
    validity: dict = field(repr=False)
    verdict: dict = field(repr=False)
    curves: dict = field(repr=False)
    timings: dict = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return (
            f"Analysis(model={summarize(self.model)}, data={summarize(self.data)}, p={self.p}, width={self.width}, "
            f"eps={self.eps:g}, method={self.prediction.method}, drops={self.prediction.n_drops}, "
            f"max_gap={self.validity.get('max_gap', math.nan):.3g}, trust={self.verdict.get('trust')!r})"
        )

    def to_dict(self) -> dict:
        """JSON-ready summary (curves excluded; see :attr:`curves`)."""
        return _clean(
            {
                "model": self.model,
                "data": self.data,
                "units": self.units,
                "operator": self.operator,
                "p": self.p,
                "width": self.width,
                "n_samples": self.n_samples,
                "n_outputs": self.n_outputs,
                "eps": self.eps,
                "lr": self.lr,
                "steps": self.steps,
                "checks": [c.to_dict() for c in self.checks],
                "prediction": self.prediction.to_dict(),
                "nqf": self.nqf.to_dict(),
                "real": self.real.to_dict(),
                "validity": dict(self.validity),
                "verdict": dict(self.verdict),
                "timings": dict(self.timings),
            }
        )

    def table(self) -> list[list]:
        """Per plateau ``k``: predicted / NQF / real level and drop time with relative errors, flatness."""
        P, S, R = self.prediction, self.nqf, self.real
        rows = []
        for k in range(P.levels.size):
            tk = k - 1
            rows.append(
                [
                    k,
                    int(P.ranks[k]) if k < P.ranks.size else None,
                    P.levels[k],
                    S.levels_measured[k],
                    R.levels_measured[k],
                    S.level_errors[k],
                    R.level_errors[k],
                    P.times[tk] if k else None,
                    (P.time_rules[tk] if tk < len(P.time_rules) else "") if k else "",
                    S.times_measured[tk] if k else None,
                    R.times_measured[tk] if k else None,
                    S.time_errors[tk] if k else None,
                    R.time_errors[tk] if k else None,
                    R.flatness[k],
                    bool(R.flat[k]),
                ]
            )
        return [_clean(r) for r in rows]

    TABLE_COLUMNS = (
        "plateau k",
        "rank",
        "L pred",
        "L NQF",
        "L real",
        "err NQF",
        "err real",
        "t pred",
        "t rule",
        "t NQF",
        "t real",
        "err NQF",
        "err real",
        "flatness (real)",
        "flat",
    )

    def plot(self):
        """Figure: loss curves (real, NQF, prediction; predicted times marked) and per-mode strengths."""
        from .figures import analysis_figure

        return analysis_figure(self)
