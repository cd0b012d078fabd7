r"""The user's own optimiser on the NQF's clock: which step of *their* loop a predicted time is.

nqf's times are gradient-flow times of ``L = (1/N) Σ_n ½‖f_n − y_n‖²`` (docs/theory.md §0).  A user's
loop differs in three ways, each handled exactly for the escapes that set the drop times:

* **the loss's scale**: ``torch.nn.MSELoss()`` (mean over samples *and* outputs) is ``(2/C) L``, so one step
  of size ``η`` on it is a step ``c η`` on ``L`` with ``c = 2/C`` (``loss="mse"``; ``"half_mse"``: ``c = 1``;
  or give ``c``);
* **the step's discreteness**: on a plateau the escaping direction of ``W`` grows like ``e^{(ζ/2) t}``
  (``ζ`` the escape rate of ``M = W Wᵀ``, the ``rates`` of :class:`nqf.Staircase`); one step of the user's optimiser
  multiplies it by ``λ``, the dominant root of that step's linear map (GD: ``1 + c η ζ/2``; heavy-ball
  momentum ``β`` with dampening ``d`` and Nesterov's variant, ``torch.optim.SGD``'s conventions: the
  spectral radius of the 2 × 2 map of ``(x, v)``), after a start-up amplitude ``A`` (the velocity starts at
  the first gradient).  A drop predicted at flow time ``t_k`` (escape rate ``ζ_k``) happens at the step
  ``n`` where ``ln A + Σ_{j<n} ln λ_j = (ζ_k/2) t_k``: for small steps ``n ≈ t_k (1 − β)/(c η)``, with the
  corrections of order ``c η ζ`` and the momentum start-up of ``β/(1 − β)`` steps;
* **a schedule**: ``λ_j`` is taken at each step's own ``η_j`` (a list, one entry per step, or a function of
  the 0-based step).

Minibatch SGD has the full batch's mean gradient, so its times are GD's at the same step; its noise
is measured, not modelled (docs/watch.md).  Adam's steps are not a function of the gradient's size near
the saddle (``η m̂/√v̂``): its times are not predicted (:data:`UNPREDICTED`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._validation import ParameterError, float_param, int_param, positive_float
from ..results import Result

__all__ = ["TrainingClock", "training_clock", "loss_scale", "UNPREDICTED"]

#: Optimisers whose drop times nqf does not predict, and why.
UNPREDICTED = {
    "adam": "Adam's step η m̂/√v̂ does not shrink with the gradient near a saddle, so its escapes are not the NQF's "
    "exponential ones: neither the drop times nor the plateaus are predicted (measured on digits: the loss passes all "
    "nine predicted midpoints within 50 steps, without plateaus; docs/watch.md)",
}
#: Steps a schedule given as a function is evaluated over at most (a drop later than this is not found).
MAX_SCHEDULE_STEPS = 10**8
_CHUNK = 1 << 16


def loss_scale(loss, n_outputs: int) -> float:
    """``c`` with the user's loss ``= c · L`` (``L = (1/N) Σ ½‖f − y‖²``): ``"mse"`` (``torch.nn.MSELoss()``,
    the mean over samples and outputs) ``2/C``; ``"half_mse"`` 1; a positive number as given."""
    if isinstance(loss, str):
        if loss == "mse":
            return 2.0 / int_param("n_outputs", n_outputs, minimum=1)
        if loss == "half_mse":
            return 1.0
        raise ParameterError(
            "`loss` must be 'mse' (torch.nn.MSELoss: mean over samples and outputs), 'half_mse' "
            f"((1/N) Σ ½‖f − y‖²) or a positive number c (your loss = c · that); found {loss!r}"
        )
    return positive_float("loss", loss)


@dataclass(frozen=True, repr=False)
class TrainingClock(Result):
    """A user's optimiser settings and their map from the NQF's flow time to the loop's steps (module docstring).

    Attributes
    ----------
    optimizer : str
        ``"gd"``, ``"sgd"`` (minibatches of ``batch_size``) or ``"adam"`` (times not predicted).
    lr : float or None
        The step ``η`` (None when a ``schedule`` gives every step's).
    momentum, dampening : float
        ``torch.optim.SGD``'s ``β`` and ``d``.
    nesterov : bool
    loss_scale : float
        ``c``: the user's loss is ``c · L`` (:func:`loss_scale`).
    batch_size : int or None
    schedule : tuple of float or None
        Step of each step (a list given by the user); past its end no drop is placed.
    schedule_fn : callable or None
        Step as a function of the 0-based step (evaluated as far as needed, at most
        :data:`MAX_SCHEDULE_STEPS`).
    """

    optimizer: str
    lr: float | None
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    loss_scale: float = 1.0
    batch_size: int | None = None
    schedule: tuple | None = field(default=None, repr=False)
    schedule_fn: Callable | None = field(default=None, repr=False, compare=False)

    @property
    def predicts_times(self) -> bool:
        """Whether drop times are predicted for this optimiser (not for Adam: :attr:`unpredicted_reason`)."""
        return self.optimizer not in UNPREDICTED

    @property
    def unpredicted_reason(self) -> str | None:
        """Why this optimiser's drop times are not predicted (Adam: its step does not shrink with the gradient
        near a saddle), or None where they are."""
        return UNPREDICTED.get(self.optimizer)

    def effective_lr(self, step: int = 0) -> float:
        """``c η/(1 − β)``: flow time per step on a plateau, to leading order (the slow-mode step)."""
        if self.lr is None:
            lrs = self._lrs(step, step + 1)
            eta = float(lrs[0]) if lrs.size else math.nan  # past a list's end: no step
        else:
            eta = self.lr
        return float(self.loss_scale * eta * (1.0 - self.dampening) / (1.0 - self.momentum))

    def growth(self, rate: float, lr: float | None = None) -> tuple[float, float]:
        """``(λ, A)``: per-step factor and start-up amplitude of a direction of ``W`` growing at ``rate/2`` per
        unit flow time (``rate`` = ``ζ`` of ``M``), at step ``lr`` (default: :attr:`lr`)."""
        eta = self.lr if lr is None else lr
        if eta is None:
            raise ParameterError("`lr`: a clock with a schedule needs the step at which to evaluate the growth")
        g = self.loss_scale * float(eta) * float(rate) / 2.0  # −η × the gradient's coefficient on x
        beta, d = self.momentum, self.dampening
        if beta == 0.0:
            return 1.0 + g, 1.0
        k = 1.0 - d
        # state (x, v) → (x', v'): v' = β v + k g x (g here already times η); x' = x + v' (+ β v' Nesterov, on g)
        if self.nesterov:
            T = np.array([[1.0 + g * k + beta * g * k, beta * beta], [g * k, beta]])
        else:
            T = np.array([[1.0 + g * k, beta], [g * k, beta]])
        vals, vecs = np.linalg.eig(T)
        i = int(np.argmax(np.abs(vals)))
        lam = float(np.real(vals[i]))
        # first step: torch's buffer starts at the first gradient itself (no dampening): v1 = g x0
        v1 = g
        x1 = 1.0 + (g + beta * v1 if self.nesterov else v1)
        coef = np.linalg.solve(np.real(vecs), np.array([x1, v1]))  # the state after step 1 in the eigenbasis
        amp = float(np.real(coef[i] * np.real(vecs[0, i]))) / lam
        return lam, amp if amp > 0 else 1.0

    def step_of(self, t: float, rate: float) -> float:
        """The step (fractional, counted from 0) at which a direction growing at ``rate`` has grown as much as
        in flow time ``t``; NaN when the times are not predicted or a schedule ends first (module docstring)."""
        if not self.predicts_times or not (math.isfinite(t) and t >= 0):
            return float("nan")
        if not (math.isfinite(rate) and rate > 0):  # no growth to correct: the leading-order step
            return self._steps_at_leading_order(t)
        need = rate * t / 2.0
        if self.lr is not None:
            lam, amp = self.growth(rate)
            return max(0.0, (need - math.log(amp)) / math.log(lam))
        return self._scheduled_step(need, rate)

    def drop_steps(self, staircase) -> np.ndarray:
        """Each drop of a :class:`nqf.Staircase` at its step: :meth:`step_of` its time at its own escape rate, (K,)."""
        K = staircase.n_drops
        return np.array(
            [self.step_of(float(t), float(r)) for t, r in zip(staircase.times, staircase.rates[:K], strict=True)]
        )

    def time_of(self, step) -> np.ndarray:
        """Flow time reached after ``step`` steps, to leading order (``Σ_{j<step} c η_j (1 − d)/(1 − β)``):
        the axis on which a logged curve is drawn against the prediction."""
        s = np.asarray(step, float)
        if self.lr is not None:
            return self.effective_lr() * s
        n = int(min(MAX_SCHEDULE_STEPS, math.ceil(float(np.nanmax(s, initial=0.0)))))
        lrs = self._lrs(0, n)
        cum = np.concatenate([[0.0], np.cumsum(lrs)]) * self.loss_scale * (1 - self.dampening) / (1 - self.momentum)
        return np.interp(s, np.arange(cum.size), cum, right=np.nan)

    def _steps_at_leading_order(self, t: float) -> float:
        if self.lr is not None:
            return t / self.effective_lr()
        cum = self.time_of(np.arange(0, self._horizon() + 1))
        return float(np.interp(t, cum, np.arange(cum.size), right=np.nan))

    def _horizon(self) -> int:
        return len(self.schedule) if self.schedule is not None else MAX_SCHEDULE_STEPS

    def _lrs(self, start: int, stop: int) -> np.ndarray:
        if self.schedule is not None:
            return np.asarray(self.schedule[start:stop], float)
        assert self.schedule_fn is not None
        out = np.array([float(self.schedule_fn(j)) for j in range(start, stop)])
        if out.size and not (np.all(np.isfinite(out)) and np.all(out >= 0)):
            raise ParameterError(
                f"`schedule`: steps must be finite and ≥ 0; found {out[~(np.isfinite(out) & (out >= 0))][0]!r} "
                f"between steps {start} and {stop}"
            )
        return out

    def _scheduled_step(self, need: float, rate: float) -> float:
        """First step where the scheduled log-growth reaches ``need`` (linear within a step)."""
        first = self._lrs(0, 1)
        if not first.size:
            return float("nan")
        _, amp = self.growth(rate, float(first[0]) or 1e-300)
        total, start = math.log(amp), 0
        while start < self._horizon():
            lrs = self._lrs(start, min(start + _CHUNK, self._horizon()))
            if not lrs.size:
                break
            logs = np.log([self.growth(rate, float(e))[0] if e > 0 else 1.0 for e in lrs])
            cum = total + np.cumsum(logs)
            hit = int(np.searchsorted(cum, need))
            if hit < cum.size:
                before = total if hit == 0 else cum[hit - 1]
                return start + hit + (need - before) / max(logs[hit], 1e-300)
            total, start = float(cum[-1]), start + lrs.size
        return float("nan")

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("optimizer", "lr", "momentum", "dampening", "nesterov", "loss_scale")}
        d["batch_size"] = self.batch_size
        d["schedule"] = (
            None
            if self.schedule is None and self.schedule_fn is None
            else f"list of {len(self.schedule)} steps"
            if self.schedule is not None
            else f"function {getattr(self.schedule_fn, '__name__', type(self.schedule_fn).__name__)}"
        )
        return d


def training_clock(
    optimizer=None,
    *,
    lr=None,
    momentum=0.0,
    dampening=0.0,
    nesterov: bool = False,
    batch_size=None,
    schedule=None,
    loss="mse",
    n_outputs: int = 1,
) -> TrainingClock:
    """The :class:`TrainingClock` of a user's optimiser: a ``torch.optim`` object (``SGD``, ``Adam``; its first
    parameter group's settings), a name (``"gd"``, ``"sgd"``, ``"adam"``), or ``None`` with the keywords
    (GD, or SGD when ``batch_size`` is given).

    Raises
    ------
    ParameterError
        No step (neither ``lr`` nor ``schedule``), both, a bad setting, an optimiser nqf does not model, or
        weight decay (not predicted: it shifts the escape rates and the levels).
    """
    name, settings = _settings(optimizer, lr, momentum, dampening, nesterov)
    lr, momentum, dampening, nesterov = settings
    batch = None if batch_size is None else int_param("batch_size", batch_size, minimum=1)
    if name == "gd" and batch is not None:
        name = "sgd"
    seq, fn = _schedule(schedule)
    if (lr is None) == (seq is None and fn is None):
        raise ParameterError(
            "`lr`: give the step (lr=…, or the optimiser's) or a `schedule` (a list or a function of the step), "
            f"not {'both' if lr is not None else 'neither'}"
        )
    return TrainingClock(
        optimizer=name,
        lr=None if lr is None else positive_float("lr", lr),
        momentum=momentum,
        dampening=dampening,
        nesterov=nesterov,
        loss_scale=loss_scale(loss, n_outputs),
        batch_size=batch,
        schedule=seq,
        schedule_fn=fn,
    )


def _settings(optimizer, lr, momentum, dampening, nesterov):
    """``(name, (lr, β, d, nesterov))`` from a torch optimiser, a name or the keywords."""
    if optimizer is not None and not isinstance(optimizer, str):
        return _from_torch(optimizer, lr)
    name = "gd" if optimizer is None else optimizer
    if name not in ("gd", "sgd", "adam"):
        raise ParameterError(f"`optimizer` must be 'gd', 'sgd', 'adam' or a torch.optim optimiser; found {name!r}")
    beta = float_param("momentum", momentum)
    if not 0.0 <= beta < 1.0:
        raise ParameterError(f"`momentum` must lie in [0, 1); found {momentum!r}")
    d = float_param("dampening", dampening)
    if not 0.0 <= d < 1.0:
        raise ParameterError(f"`dampening` must lie in [0, 1); found {dampening!r}")
    if nesterov and (beta == 0.0 or d != 0.0):
        raise ParameterError("`nesterov` needs momentum > 0 and dampening 0 (torch.optim.SGD's rule)")
    return name, (lr, beta, d, bool(nesterov))


def _from_torch(opt, lr):
    """Settings of a ``torch.optim`` optimiser's first parameter group (its ``lr`` unless ``lr`` is given)."""
    groups = getattr(opt, "param_groups", None)
    if not groups:
        raise ParameterError(
            f"`optimizer` must be a name or a torch.optim optimiser with param_groups; found {type(opt).__name__}"
        )
    g = groups[0]
    kind = type(opt).__name__.lower()
    if kind in ("adam", "adamw"):
        return "adam", (g["lr"] if lr is None else lr, 0.0, 0.0, False)
    if kind != "sgd":
        raise ParameterError(
            f"`optimizer`: {type(opt).__name__} is not modelled (torch.optim.SGD with or without momentum, "
            "or Adam, whose times are not predicted); pass lr= and momentum= for an equivalent SGD"
        )
    if float(g.get("weight_decay", 0.0)):
        raise ParameterError(
            f"`optimizer`: weight_decay = {g['weight_decay']} is not predicted (it lowers every escape rate and "
            "moves the levels); found it in the optimiser's first parameter group"
        )
    return _settings(
        "gd", g["lr"] if lr is None else lr, g.get("momentum", 0.0), g.get("dampening", 0.0), g.get("nesterov", False)
    )


def _schedule(schedule) -> tuple[tuple | None, Callable | None]:
    if schedule is None:
        return None, None
    if callable(schedule):
        return None, schedule
    if isinstance(schedule, (Sequence, np.ndarray)) and not isinstance(schedule, str):
        arr = np.asarray(schedule, float).reshape(-1)
        if not arr.size or not (np.all(np.isfinite(arr)) and np.all(arr >= 0)):
            raise ParameterError(f"`schedule` must be a non-empty list of finite steps ≥ 0; found {schedule!r:.80}")
        return tuple(arr.tolist()), None
    raise ParameterError(
        f"`schedule` must be a list of steps or a function of the step; found {type(schedule).__name__}"
    )
