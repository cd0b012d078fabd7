r"""``nqf.watch``: a monitor inside any training loop — which plateau, when the next drop comes, how the last
one went, and whether the run is still where the prediction holds (docs/watch.md).

The monitor holds a :class:`nqf.app.Forecast` (made once, before training) and reads the loss you give it:

* **plateau**: the number of predicted drops passed, a drop being passed when the loss (smoothed, below) first
  falls below the midpoint of its two predicted levels — the same crossing :meth:`Forecast.judge` and
  :func:`nqf.curves.compare_staircase` measure; its step is interpolated between your two updates around it;
* **next drop**: its predicted step, with the forecast's uncertainty (one e-fold of its escape for a
  leading-order time, the forecast's ``uncertainty``), or the tolerance where none is known;
* **last drop**: its measured step and how early or late it came (``(measured − predicted)/predicted``);
* **regime**: the run has *left* the regime of the prediction when its loss is not finite, rises above where it
  started, or falls below the last predicted level by more than ``gap_tolerance`` of that level (the network fits
  what its NQF cannot: the quadratic regime is over); nothing later is predicted after that.

A minibatch's loss is noisy: ``smoothing = w`` averages the updates exponentially (weight ``2/(w + 1)``) and
moves each crossing back by the average's lag of ``(w − 1)/2`` updates (exact for a loss that changes linearly
over the window).  Each update is a few float comparisons: no tensor is touched (benchmarks/bench_watch.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...results import Result, to_jsonable

__all__ = ["watch", "Monitor", "WatchStatus"]


@dataclass(frozen=True, repr=False)
class WatchStatus(Result):
    """What :meth:`Monitor.update` says about the run at one step.

    Attributes
    ----------
    step : float
    loss : float
        The (smoothed) loss read.
    phase : str
        ``"plateau"`` (waiting for the next drop), ``"overdue"`` (the next drop is later than its predicted step by
        more than its uncertainty), ``"done"`` (every predicted drop passed) or ``"left"`` (out of the regime).
    plateau : int
        Drops passed so far (the run is on plateau ``plateau``).
    next_drop : int or None
        The next drop's number (1-based), None when done or left.
    next_step, next_uncertainty : float
        Its predicted step and that step's uncertainty (steps); NaN when there is none.
    last_drop : int or None
    last_step, last_error : float
        The last passed drop's measured step and relative error (positive: late).
    left_at : float or None
        The step at which the run left the regime.
    context : tuple
        What :attr:`text` reads besides the fields: the predicted levels, why the run left (or ``""``).
    """

    step: float
    loss: float
    phase: str
    plateau: int
    next_drop: int | None
    next_step: float
    next_uncertainty: float
    last_drop: int | None
    last_step: float
    last_error: float
    left_at: float | None
    context: tuple = field(default=((), ""), repr=False, compare=False)

    @property
    def text(self) -> str:
        """The status as one line (formatted when read: an update stays a few microseconds)."""
        return _text(self)

    def __repr__(self) -> str:
        return (
            f"WatchStatus(step={self.step:g}, phase={self.phase!r}, plateau={self.plateau}, "
            f"next_step={self.next_step:.5g})"
        )

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "context"}
        return to_jsonable({**d, "text": self.text})


class Monitor:
    """A running comparison of your loop with its :class:`nqf.app.Forecast` (module docstring); made by :func:`watch`.

    Attributes
    ----------
    forecast : nqf.app.Forecast
    measured_steps : ndarray
        Each passed drop's measured step (NaN: not yet).
    """

    def __init__(self, forecast, *, smoothing: int = 1, tolerance: float = 0.1, gap_tolerance: float = 0.05):
        from ..._validation import float_param, int_param

        self.forecast = forecast
        self.smoothing = int_param("smoothing", smoothing, minimum=1)
        self.tolerance = float_param("tolerance", tolerance, positive=True)
        self.gap_tolerance = float_param("gap_tolerance", gap_tolerance, positive=True)
        lv = [float(v) for v in forecast.levels]
        self._levels, self._why = tuple(lv), ""
        self._mids = [0.5 * (a + b) for a, b in zip(lv[:-1], lv[1:], strict=True)]
        self._floor = lv[-1] * (1.0 - self.gap_tolerance)
        self._ceiling = max(float(forecast.level_start), lv[0]) * (1.0 + self.gap_tolerance)
        self._pred = [float(s) for s in forecast.steps]
        unc = np.asarray(forecast.uncertainty, float)
        self._unc = [
            float(u) * s if math.isfinite(u) else self.tolerance * s for u, s in zip(unc, self._pred, strict=True)
        ]
        self._alpha = 2.0 / (self.smoothing + 1.0)
        self._lag = 0.5 * (self.smoothing - 1)
        self.measured_steps = np.full(len(self._pred), np.nan)
        self._passed, self._left = 0, None
        self._ema = self._prev_step = self._prev_loss = None
        self._spacing = 0.0
        self.history: list[tuple[float, float]] = []

    @property
    def predicted_steps(self) -> np.ndarray:
        """Each drop's predicted step (the ``steps`` of :class:`nqf.app.Forecast`)."""
        return self.forecast.steps

    @property
    def last_step(self) -> float | None:
        """The step of the latest update (None before the first)."""
        return self._prev_step

    def lightning_callback(self, *, echo=print):
        """This monitor as a ``lightning.pytorch.Callback`` (:func:`nqf.app._study._adapters.lightning_callback`)."""
        from ._adapters import lightning_callback

        return lightning_callback(self, echo=echo)

    def hf_callback(self, *, echo=print):
        """This monitor as a ``transformers.TrainerCallback`` (:func:`nqf.app._study._adapters.hf_callback`)."""
        from ._adapters import hf_callback

        return hf_callback(self, echo=echo)

    def update(self, step, loss) -> WatchStatus:
        """Read the loss at ``step`` (after that step, or any steps since the last update) and say where the run is.

        Raises
        ------
        InvalidParameterError
            A step that does not increase.
        """
        s, raw = float(step), float(loss)
        if self._prev_step is not None and not s > self._prev_step:
            from ...errors import InvalidParameterError

            raise InvalidParameterError(
                f"`step` must increase from update to update; found {s:g} after {self._prev_step:g}"
            )
        value = raw if self._ema is None or self.smoothing == 1 else self._ema + self._alpha * (raw - self._ema)
        if self._prev_step is not None:
            self._spacing = s - self._prev_step
        self.history.append((s, raw))
        if self._left is None:
            self._advance(s, value)
        self._ema, self._prev_step, self._prev_loss = value, s, value
        return self._status(s, value)

    def _advance(self, s: float, L: float) -> None:
        """Drops passed between the last update and this one; the regime's exit."""
        if not math.isfinite(L) or L > self._ceiling:
            self._left, self._why = s, "the loss is not finite or rose above its start"
            return
        while self._passed < len(self._mids) and L <= self._mids[self._passed]:
            m = self._mids[self._passed]
            if self._prev_loss is not None and self._prev_loss > m and self._prev_step is not None:
                at = self._prev_step + (s - self._prev_step) * (self._prev_loss - m) / (self._prev_loss - L)
            else:
                at = s
            self.measured_steps[self._passed] = at - self._lag * self._spacing
            self._passed += 1
        if L < self._floor:
            self._left = s
            self._why = (
                f"the loss {L:.4g} fell below the last predicted level {self._levels[-1]:.4g} by more than "
                f"{self.gap_tolerance:.0%}"
            )

    def _status(self, s: float, L: float) -> WatchStatus:
        K, k = len(self._pred), self._passed
        last = k if k else None
        last_step = float(self.measured_steps[k - 1]) if k else math.nan
        last_err = (last_step - self._pred[k - 1]) / self._pred[k - 1] if k and self._pred[k - 1] > 0 else math.nan
        nxt = k + 1 if (k < K and self._left is None) else None
        n_step = self._pred[k] if nxt else math.nan
        n_unc = self._unc[k] if nxt else math.nan
        if self._left is not None:
            phase = "left"
        elif nxt is None:
            phase = "done"
        elif math.isfinite(n_step) and s > n_step + max(n_unc, self.tolerance * n_step):
            phase = "overdue"
        else:
            phase = "plateau"
        context = (self._levels, self._why)
        return WatchStatus(s, L, phase, k, nxt, n_step, n_unc, last, last_step, last_err, self._left, context)


def _text(st: WatchStatus) -> str:
    """The status line of each phase."""
    lv, why = st.context
    K, k, s = len(lv) - 1, st.plateau, st.step
    err = st.last_error
    done = f"drop {k} came at step {st.last_step:.5g} ({abs(err):.1%} {'late' if err > 0 else 'early'})" if k else ""
    if st.phase == "left":
        return (
            f"step {s:g}: left the regime of the prediction at step {st.left_at:g} ({why}); nothing later is predicted"
        )
    if st.phase == "done":
        return f"step {s:g}: on the last predicted plateau (level {lv[-1]:.4g}); all {K} drops passed" + (
            f"; {done}" if done else ""
        )
    n_step, n_unc = st.next_step, st.next_uncertainty
    when = "not predicted" if not math.isfinite(n_step) else f"predicted at step {n_step:.5g} ± {n_unc:.2g}"
    head = f"step {s:g}: plateau {k} of {K} (level {lv[k]:.4g}, loss {st.loss:.4g})"
    if st.phase == "overdue":
        return f"{head}; drop {k + 1} overdue: {when}" + (f"; {done}" if done else "")
    soon = f" (in {n_step - s:.4g} steps)" if math.isfinite(n_step) else ""
    return f"{head}; drop {k + 1} {when}{soon}" + (f"; {done}" if done else "")


def watch(
    model,
    X,
    Y,
    *,
    optimizer=None,
    lr=None,
    momentum: float = 0.0,
    dampening: float = 0.0,
    nesterov: bool = False,
    batch_size: int | None = None,
    schedule=None,
    loss="mse",
    units: str | None = None,
    smoothing: int = 1,
    tolerance: float = 0.1,
    gap_tolerance: float = 0.05,
    log=None,
) -> Monitor:
    """A :class:`Monitor` for your loop: call it before training, then ``monitor.update(step, loss)``.

    The arguments up to ``log`` are :func:`nqf.forecast`'s (made here, from the model's weights as they are
    now: call it before the first step).  ``smoothing``: the exponential average's window in updates (for
    minibatch losses); ``tolerance``: the relative error that still counts as on time where the forecast has no
    uncertainty; ``gap_tolerance``: how far below the last predicted level the loss may fall before the run has
    left the regime.

    Example
    -------
    ``monitor = nqf.watch(model, X, Y, optimizer=opt)``, then in the loop ``status = monitor.update(step,
    loss.item())`` and ``print(status.text)`` when ``status.phase`` changes.
    """
    from ._forecast import forecast

    fc = forecast(
        model,
        X,
        Y,
        optimizer=optimizer,
        lr=lr,
        momentum=momentum,
        dampening=dampening,
        nesterov=nesterov,
        batch_size=batch_size,
        schedule=schedule,
        loss=loss,
        units=units,
        log=log,
    )
    return Monitor(fc, smoothing=smoothing, tolerance=tolerance, gap_tolerance=gap_tolerance)
