r"""``nqf.forecast``: the staircase of *your* network from *its own* weights, in *your* loop's steps; nothing trained.

What :func:`nqf.analyze` rescales (``M(0) = εI``) and trains, a forecast takes as it is (docs/watch.md):

1. the units are found as :func:`nqf.analyze` finds them, and their actual weights give ``M(0) = W(0) W(0)ᵀ``
   (PyTorch's default initialisation times a small factor, or anything else: the escape times depend on
   ``M(0)``'s projections on the escape directions, which :func:`nqf.predict` reads off);
2. the parameters outside the units that move the output at zero units (a readout bias) fit their part of
   the targets first, so the units see the rest (:mod:`nqf.app._study._output_side`);
3. :func:`nqf.predict` gives the staircase on the NQF's clock (a whole two-layer MLP on its moment rows:
   the digits MLP in about a second);
4. the user's optimiser (:func:`nqf.curves.training_clock`: GD, SGD, momentum, a schedule, the loss's
   scale) places each drop at a step of their loop: its predicted time (a midpoint crossing, the measure
   :func:`nqf.curves.compare_staircase` and :meth:`Forecast.judge` read off a curve) at its own escape rate
   (:meth:`nqf.curves.TrainingClock.step_of`: exact for the escape's linear growth under GD, heavy-ball
   and Nesterov momentum).

A drop is *trusted* when its time has an exact rule (not the leading order ``τ_k ln(1/ε)``, whose O(1) term
is left out) that the reduction trusts (:meth:`nqf.Staircase.trusted`), it does not crowd its neighbours
(closer than their own widths: the crossing mixes their modes), the output-side fit is faster than the
first escape, and the optimiser's times are predicted (not Adam's).
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from ...curves import drop_widths, training_clock
from ...errors import ShapeError
from ...reductions import predict
from ...structure import commutes
from ._forecast_result import Forecast
from ._output_side import centred_mlp_rows, output_side
from ._plan import NQFData

__all__ = ["forecast"]

#: Output-side parameters are "fast" when ``FAST_MARGIN / slowest rate`` is below the first drop's time.
FAST_MARGIN = 5.0
#: Time rules whose error is the O(1) term of ``τ_k ln(1/ε) + O(1)`` (not trusted; uncertainty one e-fold).
LOOSE_RULES = ("leading order", "ε → 0 limit")


def forecast(
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
    log=None,
) -> Forecast:
    r"""The predicted staircase of ``model`` trained on ``(X, Y)`` in your own loop, without training.

    Parameters
    ----------
    model : torch.nn.Module
        Your module as it will start training (not modified: a float64 copy is analysed).
    X : array_like or torch.Tensor, shape (N, ...)
        The inputs your loop trains on, as it sees them (no preprocessing is applied).
    Y : array_like or torch.Tensor, shape (N,) or (N, C)
        The targets of your loss, as given to it (one-hot rows for a classifier trained with MSE).
    optimizer : torch.optim.Optimizer or str, optional
        Your optimiser (its first parameter group's ``lr``, ``momentum``, ``dampening``, ``nesterov``), or
        ``"gd"``, ``"sgd"``, ``"adam"``; default GD (SGD when ``batch_size`` is given).
    lr, momentum, dampening, nesterov
        ``torch.optim.SGD``'s settings when no optimiser object is given (``lr`` also overrides the object's).
    batch_size : int, optional
        Minibatch size (times as full-batch GD at the same step: docs/watch.md for what the noise does).
    schedule : list of float or callable, optional
        The step of every step (a list) or ``schedule(step) -> lr`` (0-based), instead of ``lr``.
    loss : {"mse", "half_mse"} or float
        Your loss: ``torch.nn.MSELoss()`` (mean over samples and outputs; default), nqf's ``(1/N) Σ ½‖f − y‖²``,
        or ``c`` for a loss ``c ×`` nqf's.
    units : str, optional
        The layer of units (default: the first found, as :func:`nqf.analyze`).
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    Forecast

    Raises
    ------
    NQFError
        Bad data (shapes, NaN), a model nqf cannot read as units (the refusal names the blocking layer), an
        optimiser setting it does not model (weight decay; an unknown optimiser), no step given.
    """
    from ._pipeline import prepare_analysis

    say = log or (lambda s: None)
    t0 = time.perf_counter()
    Xt, Yt = _arrays(X, Y)
    clock = training_clock(
        optimizer,
        lr=lr,
        momentum=momentum,
        dampening=dampening,
        nesterov=nesterov,
        batch_size=batch_size,
        schedule=schedule,
        loss=loss,
        n_outputs=Yt.shape[1],
    )
    from .._data import Dataset

    data = Dataset("arrays", Xt.numpy(), Yt.numpy(), "regression")
    prepared = prepare_analysis(_as_module(model), data, units=units)
    module, found, desc = prepared.module, prepared.found, prepared.desc

    W0 = found.layout.get_W(module)
    M0 = W0 @ W0.T
    eps = float(torch.linalg.eigvalsh(M0).max()) if found.n_units >= found.p else float(M0.trace()) / found.n_units
    say(
        f"units: {found.describe()}; start: M(0) = W(0) W(0)ᵀ of the module's own weights, largest eigenvalue {eps:.3g}"
    )
    nqf, side, how = _nqf_problem(module, found, Xt, Yt)
    setup = time.perf_counter() - t0
    st = _predicted(nqf.op, nqf.Y, M0, eps, found.n_units)
    if nqf.shift:
        import dataclasses

        st = dataclasses.replace(st, levels=st.levels + nqf.shift)
    steps = clock.drop_steps(st)
    notes = _notes(side, clock, found, module)
    if not st.n_drops:
        notes.append(
            "no drop: the quadratic form carries no signal to these targets; the first order that does sets a "
            "power-law clock in 1/ε (nqf analyze finds it)"
        )
    timings = {"setup": round(setup, 3), "prediction": round(time.perf_counter() - t0 - setup, 3)}
    say(f"prediction: {st.method}, {st.n_drops} drops in {timings['prediction']:.2f} s ({how})")
    return Forecast(
        model=desc,
        units=found.describe(),
        p=found.p,
        width=found.n_units,
        n_samples=int(Xt.shape[0]),
        n_outputs=int(Yt.shape[1]),
        operator=how,
        staircase=st,
        clock=clock,
        steps=steps,
        uncertainty=_uncertainty(st),
        levels=clock.loss_scale * np.asarray(st.levels, float),
        level_start=clock.loss_scale * _start_loss(module, Xt, Yt),
        doubts=tuple(_doubts(st, side)),
        notes=tuple(notes),
        timings=timings,
    )


def _predicted(op, Y, M0, eps: float, width: int):
    """:func:`nqf.predict` from ``M0``; a start so large that an escape would end before step 0 is refused."""
    from ...errors import InvalidParameterError, NormalFormError

    if not eps > 0:
        raise NormalFormError(
            "`model`: its units are all zero (M(0) = W(0) W(0)ᵀ = 0): nothing escapes from an exact zero; start from "
            "small non-zero weights (PyTorch's initialisation × 1e-3, say)"
        )
    try:
        commuting = commutes(op)  # as nqf.analyze: non-commuting data timed by the saddle-subspace flow
        return predict(op, Y, min(eps, 0.5), commuting=commuting, M0=M0, max_rank=width, subspace=not commuting)
    except InvalidParameterError as exc:
        if not str(exc).startswith("`times`"):
            raise
        raise NormalFormError(
            f"`model`: its units start too large for a plateau (the largest eigenvalue of M(0) = W(0) W(0)ᵀ is "
            f"{eps:.3g}; the first escape would end before step 0): the NQF describes training from a small start; "
            "scale the units' weights down (by 1e-3, say) or pass --start eps"
        ) from None


def _as_module(model):
    if not isinstance(model, torch.nn.Module):
        from ...errors import InvalidTypeError

        raise InvalidTypeError(
            f"`model` must be a torch.nn.Module (your network as it starts); found {type(model).__name__}"
        )
    return copy.deepcopy(model)


def _arrays(X, Y) -> tuple[torch.Tensor, torch.Tensor]:
    """``X`` and ``Y`` (``(N, C)``) as float64 CPU tensors, checked finite and of one length."""
    from ..._validation import as_tensor

    Xt = as_tensor("X", X.detach().cpu() if hasattr(X, "detach") else X, dtype=torch.float64)
    Yt = as_tensor("Y", Y.detach().cpu() if hasattr(Y, "detach") else Y, ndim=(1, 2), dtype=torch.float64)
    if Yt.ndim == 1:
        Yt = Yt[:, None]
    if Xt.ndim < 2 or Xt.shape[0] != Yt.shape[0]:
        raise ShapeError(f"`Y` must have one row per sample of `X`; found X {tuple(Xt.shape)} and Y {tuple(Yt.shape)}")
    for name, t in (("X", Xt), ("Y", Yt)):
        if not bool(torch.isfinite(t).all()):
            raise ShapeError(f"`{name}` must be finite; found NaN or inf entries")
    return Xt, Yt


def _nqf_problem(module, found, Xt, Yt):
    """``(NQF data, output side, label)``: the units' NQF operator, targets and loss offset with the output side
    fitted."""
    from ._discover import output_at_zero
    from ._operators import structure_of

    side = output_side(module, found, Xt)
    f0 = output_at_zero(module, found.layout, Xt)
    R0 = Yt - f0
    rows = centred_mlp_rows(module, found, Xt, R0, side)
    if rows is not None:
        op, Yc, shift = rows
        how = "analytic mlp on moment rows" + (", readout bias fitted" if side.names else "")
        return NQFData(op, Yc, shift), side, how
    op, _, how = structure_of(module, found, Xt)
    target = R0 if how.startswith("analytic") else Yt  # autodiff operators carry f(0) themselves (op.offset)
    if side.names:
        from ...structure import OutputProjection

        op, target = OutputProjection(op, side.basis, ", ".join(side.names)), side.project_out(target)
    return NQFData(op, target), side, how + (f", {', '.join(side.names)} fitted" if side.names else "")


def _doubts(st, side) -> list[str]:
    """What speaks against each drop's time (module docstring), ``""`` where nothing does."""
    K = st.n_drops
    reasons = [""] * K
    ok = st.trusted()
    for k in np.nonzero(~ok)[0]:
        reasons[k] = "the reduction's time is uncertain"
    times = np.asarray(st.times, float)
    for k in np.nonzero(_crowded(st))[0]:
        reasons[k] = reasons[k] or "crowds its neighbour (closer than their widths)"
    if side.names and K and FAST_MARGIN / side.slowest_rate > times[0]:
        reasons[0] = reasons[0] or f"{', '.join(side.names)} fit slower than the first escape"
    for k, rule in enumerate(st.time_rules):
        if rule in LOOSE_RULES:
            reasons[k] = reasons[k] or f"{rule} time (its O(1) term, about one e-fold 1/ζ, is left out)"
        elif rule == "subspace flow" and k > 0:
            reasons[k] = reasons[k] or (
                "the NQF's time; a later drop of the network itself parts from it where the first switch seeds it "
                "(below its seeding floor, which nqf analyze's seeded clock computes and the forecast does not)"
            )
    return reasons


def _crowded(st) -> np.ndarray:
    """Drops closer to a neighbour than the mean of their widths (:func:`nqf.curves.drop_widths`), shape (K,)."""
    K = st.n_drops
    w, times = drop_widths(st), np.asarray(st.times, float)
    out = np.zeros(K, bool)
    close = np.diff(times) < 0.5 * (w[:-1] + w[1:]) if K > 1 else np.zeros(0, bool)
    out[:-1] |= close
    out[1:] |= close
    return out


def _uncertainty(st) -> np.ndarray:
    """Relative uncertainty of each drop's time: the staircase's own bound where it has one, else one e-fold of
    the escaping mode ``1/(ζ_k t_k)`` for a leading-order time; for a crowded drop at least its width over its
    time ``w_k/t_k`` (its midpoint crossing mixes its neighbours' modes); NaN for an exact rule without a bound."""
    K = st.n_drops
    own = np.full(K, np.nan) if st.time_uncertainty is None else np.asarray(st.time_uncertainty, float)
    times = np.asarray(st.times, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        efold = 1.0 / (np.asarray(st.rates[:K], float) * times)
        width = drop_widths(st) / times
    loose = np.array([r in LOOSE_RULES for r in st.time_rules], bool)
    base = np.where(np.isfinite(own), own, np.where(loose, efold, np.nan))
    return np.where(_crowded(st), np.fmax(base, width), base)


def _notes(side, clock, found, module) -> list[str]:
    notes = []
    if side.names:
        notes.append(
            f"{', '.join(side.names)} move the output at zero units: they fit their part of the targets first "
            f"(slowest rate {side.slowest_rate:.3g} per unit time), the units the rest"
        )
    unit_params = {sl.param for sl in found.layout.slices}
    held = [n for n, p in module.named_parameters() if p.requires_grad and n not in unit_params and n not in side.names]
    if held:
        notes.append(
            f"{', '.join(held)} act only through the units: held at their values (their drift is not predicted)"
        )
    if clock.batch_size is not None:
        notes.append(
            f"minibatches of {clock.batch_size}: times as full-batch GD at the same step (noise: docs/watch.md)"
        )
    if clock.unpredicted_reason is not None:
        notes.append(clock.unpredicted_reason)
    return notes


def _start_loss(module, Xt, Yt) -> float:
    """nqf's loss ``(1/N) Σ ½‖f − y‖²`` of the module as it starts."""
    with torch.no_grad():
        f = module(Xt).reshape(Xt.shape[0], -1)
    return float(0.5 * ((f - Yt) ** 2).sum() / Xt.shape[0])
