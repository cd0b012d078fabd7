"""The prediction phase of :func:`nqf.analyze`: the first order that carries signal sets the staircase
(:mod:`._orders`); where it is the quadratic form, :func:`nqf.predict` on the NQF's operator and targets."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from ..._memory import release_free_memory
from ...reductions import Staircase, predict
from ._orders import dormant_prediction, dormant_step, examine_orders, relation_order
from ._plan import Problem

__all__ = ["OrderedPrediction", "ordered_prediction"]


@dataclass(frozen=True)
class OrderedPrediction:
    """What the prediction phase made: the staircase, the sentence that opens the verdict when an order other than
    the quadratic form's speaks (None otherwise), a higher order's escape time when the quadratic form's drops fit
    the sample only (``later``; the runs cover it), the order-k clock's GD step when the quadratic form is silent
    (``lr``; None otherwise) and the seconds of the prediction's phases."""

    staircase: Staircase
    sentence: str | None = None
    later: float | None = None
    lr: float | None = None
    timings: dict[str, float] = field(default_factory=dict)


def _predicted(problem: Problem, eps: float, commuting: bool, say) -> tuple[Staircase, dict[str, float]]:
    """:func:`nqf.predict` on the NQF's operator and targets from the actual start (``M0 = W0 W0ᵀ`` when the
    width is below ``p``), bounded by the width (``max_rank`` = the number of units), on non-commuting data timed
    by the saddle-subspace flow, its levels moved by the moment rows' offset, through the drops that carry the
    learning (:meth:`Staircase.carrying`); with the seconds of its phases (and their estimates)."""
    t0 = time.perf_counter()
    W0, nqf = problem.W0, problem.nqf
    p, m = W0.shape
    M0 = W0 @ W0.T if m < p else None
    pred = predict(nqf.op, nqf.Y, eps, commuting=commuting, M0=M0, max_rank=m, subspace=not commuting, log=say)
    if nqf.shift:
        pred = dataclasses.replace(pred, levels=pred.levels + nqf.shift)
    if (cut := pred.carrying()) is not pred:  # a tail of tiny drops would set the runs' horizon: not analysed
        pred = cut
        say(f"prediction: {pred.notes[0]} of the runs and the comparison")
    cost = pred.cost  # the saddle sequence's search and O(1) clock, each with its estimate
    timings = {"prediction": time.perf_counter() - t0 if cost is None else cost.search}
    if cost is not None and cost.subspace is not None:  # the subspace flow: seconds (no estimate: the short part)
        timings["prediction_subspace"] = cost.subspace
    elif cost is not None and cost.clock is not None:  # its estimate: printed after the search, one drop to all
        timings["prediction_clock"] = cost.clock
        low, high = cost.clock_estimate if cost.clock_estimate is not None else (0.0, 0.0)
        timings["estimate_prediction_clock"], timings["estimate_prediction_clock_low"] = high, low
    release_free_memory()  # the search's transient arrays: not resident during the runs
    say(f"prediction: {pred.method}, {pred.n_drops} drops, levels {pred.levels[0]:.4g} → {pred.levels[-1]:.4g}")
    return pred, timings


def ordered_prediction(problem: Problem, eps: float, commuting: bool, lr_fraction: float, say, *, seed: int):
    """The prediction by the first order that carries signal (:mod:`nqf.app._study._orders`)."""
    order, higher = examine_orders(problem, say, seed=seed)
    if order is None:  # the quadratic form is not silent: its prediction, and whether it learns a relation
        pred, timings = _predicted(problem, eps, commuting, say)
        relation = relation_order(problem, say, seed=seed)
        if relation is None:
            return OrderedPrediction(pred, timings=timings)
        return OrderedPrediction(pred, sentence=relation[0], later=relation[1], timings=timings)
    pred, term = dormant_prediction(order, higher, problem, eps, say)
    sentence = order.sentence()[0].upper() + order.sentence()[1:] + "."
    return OrderedPrediction(pred, sentence=sentence, lr=dormant_step(term, pred, problem.residual0, lr_fraction))
