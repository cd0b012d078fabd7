"""``nqf analyze --predict-only``: the staircase and each drop's step, from analyze's start or the factory's own
weights, without training (:func:`nqf.forecast` on the data as ``nqf analyze`` prepares it)."""

from __future__ import annotations

import json
import time

from ..._text import terminal_echo

__all__ = ["predict_only", "predict_only_cmd"]

#: ``nqf analyze``'s step as a fraction of the largest escape rate (its ``lr_fraction``'s default).
LR_FRACTION = 0.02


def predict_only(
    params,
    *,
    seed: int = 0,
    start: str = "eps",
    momentum: float = 0.0,
    batch_size=None,
    loss: str = "half_mse",
    log=None,
):
    """The :class:`nqf.app.Forecast` of ``nqf analyze --predict-only`` (``params``: its validated flags).

    ``start="eps"``: the units at ``M(0) = εI`` exactly as :func:`nqf.analyze` starts them (same ``W(0)`` for the
    same ``seed``), so the staircase is analyze's; ``"weights"``: the model as its factory built it.  Without
    ``params.lr`` the steps are GD's at analyze's own step ``0.02 /`` the largest escape rate.

    Raises
    ------
    NQFError
        A bad ``start``, optimiser setting, data or model.
    """
    from ..._validation import one_of
    from ...curves import stable_learning_rate, training_clock
    from ...dynamics import initial_weights
    from ._forecast import forecast
    from ._output import load_data
    from ._pipeline import prepare_analysis

    one_of("start", start, ("eps", "weights"))
    ds = load_data(params, seed)
    prepared = prepare_analysis(params.model, ds, units=params.units, seed=seed)
    module, found = prepared.module, prepared.found
    if start == "eps":
        found.layout.set_W(module, initial_weights(found.p, found.n_units, params.eps, seed=seed))
    lr = 1.0 if params.lr is None else params.lr

    def clock(step: float):
        return training_clock(lr=step, momentum=momentum, batch_size=batch_size, loss=loss, n_outputs=ds.n_outputs)

    clock(lr)  # refuse bad settings before the prediction
    units = found.name if params.units else None
    fc = forecast(module, ds.X, ds.Y, lr=lr, momentum=momentum, batch_size=batch_size, loss=loss, units=units, log=log)
    if params.lr is None:  # analyze's step, on analyze's loss
        fc = fc.with_clock(clock(stable_learning_rate(fc.staircase.rates, LR_FRACTION)))
    return fc


def predict_only_cmd(params, *, seed: int, start: str, momentum: float, batch_size, loss: str, as_json: bool, fail):
    """Run :func:`predict_only` and print it (``--json``: one object); bad input ends in ``fail`` (exit 2)."""
    from ...errors import NQFError

    t0 = time.perf_counter()
    log = (lambda s: None) if as_json else (lambda s: terminal_echo(s, err=True))
    try:
        fc = predict_only(params, seed=seed, start=start, momentum=momentum, batch_size=batch_size, loss=loss, log=log)
    except NQFError as exc:
        fail(str(exc))
    wall = round(time.perf_counter() - t0, 3)
    if as_json:
        terminal_echo(json.dumps({"forecast": fc.to_dict(), "wall_seconds": wall}, indent=2))
        return
    for line in fc.lines():
        terminal_echo(line)
    terminal_echo(f"(prediction only: nothing trained; {wall} s)")
