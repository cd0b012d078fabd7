"""The result of :func:`nqf.analyze`: :class:`Analysis` (frozen, picklable, JSON-ready, plottable)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...curves import RealClock, StaircaseComparison
from ...reductions import Staircase
from ...results import Result, require_pandas, summarize, to_jsonable as _clean
from ._parts import Curves, Memory, Timings, Validity, Verdict
from ._table import plateau_rows

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Analysis", "CheckRow"]


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
class Analysis(Result):
    """What :func:`nqf.analyze` found: checks, predictions, NQF and real training, comparison, verdict.

    Attributes
    ----------
    model, data, units : str
        Descriptions of the model, the data and the analysed units.
    operator : str
        Which structure operator: ``"analytic mlp"``, ``"analytic conv1d"``, ``"analytic conv2d"``,
        ``"analytic attention"`` (each possibly ``" + readout"``), ``"autodiff (dense)"`` or
        ``"autodiff (matrix-free)"``.
    p, width, n_samples, n_outputs : int
    eps, lr : float
    steps : int
    checks : tuple of CheckRow
    prediction : nqf.Staircase
    nqf, real : StaircaseComparison
        The NQF simulation and the real network against the prediction.
    validity : Validity
        ``max_gap`` (max ``|L_real − L_NQF| / L_NQF``), ``gap_tolerance``,
        ``left_step``/``left_time`` (first step where the gap exceeds the tolerance
        or the real loss falls below the NQF minimum; None if never), ``reason``, …
    verdict : Verdict
        ``trust`` (``"high"``, ``"moderate"``, ``"low"``), ``text`` (sentences), numbers.
    curves : Curves
        ``t``, ``loss_real``, ``loss_nqf``, ``loss_predicted`` (T,), ``strength_real``,
        ``strength_nqf`` (T, K) (arrays; ``a.curves.loss_real`` or ``a.curves["loss_real"]``).
    timings : Timings
        Wall seconds of each part.
    task : str
        ``"classification"`` or ``"regression"`` (how the targets were read; empty for raw arrays).
    classes : tuple
        Class names (or labels) in the order of the one-hot outputs; empty for regression.
    notes : tuple of str
        What the analysis changed in the model (training-only layers switched to eval mode).
    clock : nqf.curves.RealClock or None
        The real network's clock (the seeded NQF's drop times, seeds and seeding floors,
        docs/theory.md §7); None when fewer than two drops are predicted or it was not asked for.
    memory : Memory
        MiB: ``estimate_peak_mib``, the process's peak resident memory estimated before the long runs
        (printed with the estimate), and ``peak_mib``, the peak measured at the end.
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
    prediction: Staircase = field(repr=False)
    nqf: StaircaseComparison = field(repr=False)
    real: StaircaseComparison = field(repr=False)
    validity: Validity = field(repr=False)
    verdict: Verdict = field(repr=False)
    curves: Curves = field(repr=False)
    timings: Timings = field(default_factory=Timings, repr=False)
    task: str = ""
    classes: tuple = field(default=(), repr=False)
    notes: tuple = field(default=(), repr=False)
    clock: RealClock | None = field(default=None, repr=False)
    memory: Memory = field(default_factory=Memory, repr=False)

    def __repr__(self) -> str:
        return (
            f"Analysis(model={summarize(self.model)}, data={summarize(self.data)}, p={self.p}, width={self.width}, "
            f"eps={self.eps:g}, method={self.prediction.method}, drops={self.prediction.n_drops}, "
            f"max_gap={self.validity.get('max_gap', math.nan):.3g}, trust={self.verdict.trust!r})"
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
                "validity": self.validity.to_dict(),
                "verdict": self.verdict.to_dict(),
                "timings": self.timings.to_dict(),
                "task": self.task,
                "classes": [c if isinstance(c, (int, float, str)) else str(c) for c in self.classes],
                "notes": list(self.notes),
                "clock": None if self.clock is None else self.clock.to_dict(),
                "memory": self.memory.to_dict(),
            }
        )

    def table(self) -> list[list]:
        """Per plateau ``k``: predicted / NQF / real level and drop time with relative errors (fractions, full
        precision), flatness; :meth:`report_table` is the printed table, :meth:`to_frame` this one as a DataFrame."""
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
                    self.clock.times[tk] if k and self.clock is not None else None,
                    abs(R.times_measured[tk] / self.clock.times[tk] - 1) if k and self.clock is not None else None,
                ]
            )
        return [_clean(r) for r in rows]

    def to_frame(self) -> pd.DataFrame:
        """:meth:`table` as a pandas DataFrame, one row per plateau ``k = 0 … K``, at full precision (needs pandas:
        ``pip install 'nqf[frames]'``).

        Columns: ``k``, ``rank``; ``level_predicted``, ``level_nqf``, ``level_real`` and ``level_error_nqf``,
        ``level_error_real`` (``|L − L_pred| / L_pred``, fractions); ``time_predicted``, ``time_rule``,
        ``time_nqf``, ``time_real``, the drop time that starts plateau ``k`` (``0.0`` and rule ``None`` for
        ``k = 0``; NaN: never reached) and ``time_error_nqf``, ``time_error_real`` (fractions of the predicted
        time, NaN for ``k = 0``); ``flatness`` (real) and ``flat``; where the analysis has the seeded clock
        (:attr:`clock`), ``time_seeded`` and ``time_error_seeded`` (the real time against it).  ``df.attrs``
        holds ``model``, ``data``, ``method``, ``eps``, ``lr``, ``steps``, ``p``, ``width`` and ``trust``.

        Raises
        ------
        MissingDependencyError
            pandas is not installed.
        """
        pd = require_pandas("Analysis.to_frame()")
        P, S, R, C = self.prediction, self.nqf, self.real, self.clock

        def starts(t) -> np.ndarray:  # drop times t_1 … t_K → the time each plateau starts (t_0 = 0)
            return np.concatenate([[0.0], np.asarray(t, dtype=np.float64)])

        def drop_errors(e) -> np.ndarray:  # per drop → per plateau (no drop starts plateau 0)
            return np.concatenate([[math.nan], np.asarray(e, dtype=np.float64)])

        cols = {
            "k": np.arange(P.levels.size, dtype=np.int64),
            "rank": np.array(P.ranks),
            "level_predicted": np.array(P.levels),
            "level_nqf": np.array(S.levels_measured, dtype=np.float64),
            "level_real": np.array(R.levels_measured, dtype=np.float64),
            "level_error_nqf": S.level_errors,
            "level_error_real": R.level_errors,
            "time_predicted": starts(P.times),
            "time_rule": pd.Series([None, *P.time_rules], dtype=object),  # object: None stays None
            "time_nqf": starts(S.times_measured),
            "time_real": starts(R.times_measured),
            "time_error_nqf": drop_errors(S.time_errors),
            "time_error_real": drop_errors(R.time_errors),
            "flatness": np.array(R.flatness, dtype=np.float64),
            "flat": np.array(R.flat, dtype=bool),
        }
        if C is not None:
            cols["time_seeded"] = starts(C.times)
            with np.errstate(divide="ignore", invalid="ignore"):
                cols["time_error_seeded"] = drop_errors(np.abs(R.times_measured / C.times - 1))
        df = pd.DataFrame(cols)
        df.attrs.update(
            model=self.model,
            data=self.data,
            method=P.method,
            eps=self.eps,
            lr=self.lr,
            steps=self.steps,
            p=self.p,
            width=self.width,
            trust=self.verdict.trust,
        )
        return df

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
        "t seeded",
        "err seeded",
    )

    #: Columns of :meth:`report_table`: the per-plateau table of the terminal, the report and ``results.json``.
    REPORT_COLUMNS = (
        "k",
        "rank",
        "L pred",
        "L NQF",
        "L real",
        "err L NQF %",
        "err L real %",
        "t pred",
        "t rule",
        "t NQF",
        "t real",
        "err t NQF %",
        "err t real %",
        "flat (real)",
        "t seeded",
        "err t seeded %",
    )

    def report_table(self) -> list[list]:
        """:meth:`table` as printed, columns :attr:`REPORT_COLUMNS` (the same cells in the terminal, the report and
        ``results.json``): levels and times at 4 significant digits; errors in percent to one decimal, or
        ``"|Δ| …"`` (the absolute difference) where the reference level is below 10⁻³ L_0 or the relative error
        is above 1000 %; ``"0 (round-off)"`` for a level within 10⁻¹² L_0 of zero; flat as ``"yes (ratio)"``."""
        return plateau_rows(self.prediction, self.nqf, self.real, self.clock)

    def plot(self):
        """Figure: loss curves (real, NQF, prediction; predicted times marked) and per-mode strengths."""
        from ._figures import analysis_figure

        return analysis_figure(self)
