"""The result of :func:`nqf.forecast` and its judge of a logged curve (:meth:`Forecast.judge`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ...curves import TrainingClock, mode_sum
from ...errors import ShapeError
from ...reductions import Staircase
from ...results import Result, summarize, to_jsonable

__all__ = ["Forecast", "LogJudgement"]


@dataclass(frozen=True, repr=False)
class Forecast(Result):
    """What :func:`nqf.forecast` predicts for your loop (docs/watch.md).

    Attributes
    ----------
    model, units, operator : str
    p, width, n_samples, n_outputs : int
    staircase : nqf.Staircase
        The prediction on the NQF's clock (flow time of ``(1/N) Σ ½‖f − y‖²``, its levels).
    clock : nqf.curves.TrainingClock
        Your optimiser's map from that clock to your steps.
    steps : ndarray, shape (K,)
        Each drop's step in your loop: where the predicted loss crosses the midpoint of the drop's two levels
        (NaN: not predicted, or past a schedule's end).
    uncertainty : ndarray, shape (K,)
        Relative uncertainty of each step (the staircase's own bound; one e-fold ``1/(ζ_k t_k)`` for a
        leading-order time; NaN where none is known).
    levels : ndarray, shape (K + 1,)
        The plateau levels in your loss's units (``clock.loss_scale ×`` the staircase's).
    level_start : float
        Your loss at step 0, before the output-side parameters fit their part.
    doubts : tuple of str
        What speaks against each drop's time whatever the optimiser (``""``: nothing); see :attr:`trusted`.
    notes : tuple of str
    timings : dict
        Seconds of ``setup`` (units, operator) and ``prediction``.
    """

    model: str
    units: str
    p: int
    width: int
    n_samples: int
    n_outputs: int
    operator: str
    staircase: Staircase = field(repr=False)
    clock: TrainingClock = field(repr=False)
    steps: np.ndarray = field(repr=False)
    uncertainty: np.ndarray = field(repr=False)
    levels: np.ndarray = field(repr=False)
    level_start: float = math.nan
    doubts: tuple = field(default=(), repr=False)
    notes: tuple = field(default=(), repr=False)
    timings: dict = field(default_factory=dict, repr=False)

    @property
    def n_drops(self) -> int:
        return int(self.steps.size)

    @property
    def reasons(self) -> tuple:
        """Why each drop is not trusted (``""`` where it is): its :attr:`doubts`, or an optimiser whose times are
        not predicted (:attr:`nqf.curves.TrainingClock.unpredicted_reason`)."""
        if not self.clock.predicts_times:
            return tuple(f"{self.clock.optimizer}: times not predicted" for _ in self.doubts)
        return tuple(self.doubts)

    @property
    def trusted(self) -> np.ndarray:
        """Drops whose step is trusted: no doubt and a predicted optimiser, shape (K,)."""
        return np.array([not r for r in self.reasons], bool)

    def with_clock(self, clock: TrainingClock) -> Forecast:
        """The same prediction for another optimiser setting (a :func:`nqf.curves.training_clock`): the steps
        recomputed, nothing else."""
        if not isinstance(clock, TrainingClock):
            from ...errors import InvalidTypeError

            raise InvalidTypeError(f"`clock` must be a nqf.curves.TrainingClock; found {type(clock).__name__}")
        steps = clock.drop_steps(self.staircase)
        levels = clock.loss_scale / self.clock.loss_scale * self.levels
        start = clock.loss_scale / self.clock.loss_scale * self.level_start
        return dataclasses.replace(self, clock=clock, steps=steps, levels=levels, level_start=start)

    @property
    def predicted_steps(self) -> np.ndarray:
        """Each drop's predicted step (:attr:`steps`)."""
        return self.steps

    def loss_curve(self, steps) -> np.ndarray:
        """The predicted loss of your loop at ``steps`` (your loss's units), for drawing: the staircase's mode sum
        (:func:`nqf.curves.mode_sum`), each mode crossing its midpoint at its drop's predicted step (its half
        saturation ``logit(1/√2)/ζ_k`` later), on the steps' leading-order time axis
        (:meth:`nqf.curves.TrainingClock.time_of`) rescaled so that the drops fall on :attr:`steps`."""
        st = self.staircase
        K = st.n_drops
        s = np.asarray(steps, float)
        if not K or not np.isfinite(self.steps).all():
            return self.clock.loss_scale * mode_sum(np.asarray(self.clock.time_of(s), float), st)
        # the drops at their own steps: a time axis piecewise linear through (0, 0) and each (step_k, t_k)
        order = np.argsort(np.concatenate([[0.0], self.steps]))
        knots_s = np.concatenate([[0.0], self.steps])[order]
        knots_t = np.concatenate([[0.0], st.times])[order]
        slope = knots_t[-1] / knots_s[-1] if knots_s[-1] > 0 else 0.0
        t = np.where(s <= knots_s[-1], np.interp(s, knots_s, knots_t), knots_t[-1] + slope * (s - knots_s[-1]))
        half = float(np.log(1.0 / (np.sqrt(2.0) - 1.0)))  # logit(1/√2): midpoint to half saturation
        shifted = dataclasses.replace(st, times=np.asarray(st.times, float) + half / np.asarray(st.rates[:K], float))
        return self.clock.loss_scale * mode_sum(t, shifted)

    def judge(self, steps, loss, *, tolerance: float = 0.1) -> LogJudgement:
        """A logged curve of your loop (``steps``, ``loss`` in your loss's units) against the forecast.

        Each drop's measured step is the first crossing of the midpoint between its two predicted levels
        (linear between logged points, NaN where the log never crosses it); its error is
        ``(measured − predicted) / predicted`` (positive: late).  ``tolerance`` marks which errors are within.
        """
        s, L = _curve(steps, loss)
        mids = 0.5 * (self.levels[:-1] + self.levels[1:])
        measured = np.array([_crossing(s, L, m) for m in mids]) if mids.size else np.zeros(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            err = (measured - self.steps) / self.steps
        return LogJudgement(
            predicted=self.steps.copy(),
            measured=measured,
            errors=err,
            trusted=self.trusted.copy(),
            tolerance=float(tolerance),
            last_step=float(s[-1]),
        )

    def __repr__(self) -> str:
        first = f"{self.steps[0]:.4g}" if self.n_drops and np.isfinite(self.steps[0]) else "nan"
        return (
            f"Forecast(model={summarize(self.model)}, units={summarize(self.units)}, method={self.staircase.method}, "
            f"drops={self.n_drops}, trusted={int(self.trusted.sum())}, first_step={first}, "
            f"optimizer={self.clock.optimizer})"
        )

    def to_dict(self) -> dict:
        return to_jsonable(
            {
                "model": self.model,
                "units": self.units,
                "p": self.p,
                "width": self.width,
                "n_samples": self.n_samples,
                "n_outputs": self.n_outputs,
                "operator": self.operator,
                "method": self.staircase.method,
                "clock": self.clock.to_dict(),
                "steps": self.steps,
                "uncertainty": self.uncertainty,
                "levels": self.levels,
                "level_start": self.level_start,
                "trusted": self.trusted,
                "reasons": list(self.reasons),
                "doubts": list(self.doubts),
                "notes": list(self.notes),
                "timings": self.timings,
                "staircase": self.staircase.to_dict(),
            }
        )

    def lines(self) -> list[str]:
        """The forecast as text: one line per drop (what ``nqf analyze --predict-only`` prints)."""
        step = "scheduled" if self.clock.lr is None else f"{self.clock.lr:.4g}"
        out = [
            f"{self.staircase.method}: {self.n_drops} drops; loss {self.level_start:.4g} at step 0, plateaus in your "
            f"loss's units ({self.clock.optimizer}, step {step})"
        ]
        out.append(f"  plateau 0: level {self.levels[0]:.4g}")
        for k in range(self.n_drops):
            why = "trusted" if self.trusted[k] else f"not trusted: {self.reasons[k]}"
            out.append(f"  drop {k + 1}: step {self.steps[k]:.5g} → level {self.levels[k + 1]:.4g} ({why})")
        return out + [f"  note: {n}" for n in self.notes]


@dataclass(frozen=True, repr=False)
class LogJudgement(Result):
    """A logged curve against a :class:`Forecast` (:meth:`Forecast.judge`).

    ``predicted``, ``measured`` (NaN: not reached in the log), ``errors`` (relative, positive = late) and
    ``trusted``, one entry per drop; ``tolerance``; ``last_step`` the log's last step."""

    predicted: np.ndarray
    measured: np.ndarray
    errors: np.ndarray
    trusted: np.ndarray
    tolerance: float
    last_step: float

    @property
    def within(self) -> np.ndarray:
        """Reached drops whose error is within the tolerance."""
        return np.abs(np.nan_to_num(self.errors, nan=np.inf)) <= self.tolerance

    @property
    def passed(self) -> bool:
        """Every trusted drop the log reached is within the tolerance (and at least one was reached)."""
        reached = self.trusted & np.isfinite(self.measured)
        return bool(reached.any() and self.within[reached].all())

    def __repr__(self) -> str:
        reached = np.isfinite(self.measured)
        worst = np.nanmax(np.abs(self.errors[self.trusted & reached]), initial=math.nan)
        return (
            f"LogJudgement(drops={self.predicted.size}, reached={int(reached.sum())}, "
            f"trusted_worst_error={worst:.3g}, passed={self.passed})"
        )

    def to_dict(self) -> dict:
        return to_jsonable({**{f: getattr(self, f) for f in self.__dataclass_fields__}, "passed": self.passed})

    def lines(self) -> list[str]:
        out = []
        for k in range(self.predicted.size):
            if not np.isfinite(self.measured[k]):
                what = "not reached in the log"
            else:
                e = self.errors[k]
                what = f"measured {self.measured[k]:.5g} ({'late' if e > 0 else 'early'} by {abs(e):.1%})"
            tag = "" if self.trusted[k] else " [not trusted]"
            out.append(f"drop {k + 1}: predicted step {self.predicted[k]:.5g}, {what}{tag}")
        return out


def _curve(steps, loss) -> tuple[np.ndarray, np.ndarray]:
    s, L = np.asarray(steps, float).reshape(-1), np.asarray(loss, float).reshape(-1)
    if s.size != L.size or s.size < 2:
        raise ShapeError(f"`steps` and `loss` must be curves of one length ≥ 2; found {s.size} and {L.size}")
    ok = np.isfinite(s) & np.isfinite(L)
    if ok.sum() < 2 or np.any(np.diff(s[ok]) <= 0):
        raise ShapeError("`steps` must increase and hold at least two finite points with their losses")
    return s[ok], L[ok]


def _crossing(s: np.ndarray, L: np.ndarray, level: float) -> float:
    below = np.nonzero(L <= level)[0]
    if not below.size:
        return math.nan
    i = int(below[0])
    if i == 0:
        return float(s[0])
    return float(np.interp(level, [L[i], L[i - 1]], [s[i], s[i - 1]]))
