"""``nqf.analyze`` when the quadratic form is silent: the first order that carries signal, and its clock.

The quadratic form's signal is its largest utility (the top escape rate), judged against round-off.  When
it is silent, orders 3 and 4 of the units are examined
(:func:`nqf.reductions.dormant.leading_order`) and, when one of them carries signal, the prediction is its
degree-``k`` clock (:func:`nqf.reductions.dormant.dormant_staircase`, from the analysis' own ``W(0)``), the
step comes from the curvature of the first active phase, never from a zero rate, and the horizon from the
last predicted escape.  When no order up to 4 carries signal the analysis stops with one sentence.

When it is not silent, a permutation test (:data:`SHUFFLES` shuffles of the targets, :func:`relation_order`)
asks whether what it learns is a relation in the data or a fit of this sample (the spurious linear
correlation of a sparse parity); in the second case the first higher order whose utility is above the
shuffled targets' is named, with its escape time.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...errors import InvalidParameterError, NormalFormError, SilentError
from ...reductions.dormant import LeadingOrder, active_curvature, dormant_staircase, leading_order, unit_term
from ._plan import Problem

__all__ = ["SHUFFLES", "examine_orders", "relation_order", "dormant_prediction", "dormant_step"]

#: Shuffled copies of the targets in the permutation test of each order (level 1/(B + 1) = 2.5 %).
SHUFFLES = 39


def _higher_terms(problem: Problem, n_outputs: int):
    """Orders 3 and 4 of the units: analytic for a whole two-layer MLP, else by ``torch.func`` on the module."""
    from ...modules import higher_order_terms
    from ...structure import REGISTRY, mlp_higher_order

    module, found, Xt, how = problem.module, problem.found, problem.X, problem.how

    rec = REGISTRY.of_module(found.activation) if found.activation is not None else None
    if how == "analytic mlp" and found.is_whole_mlp and found.pre_scale == 1.0 and rec is not None:
        first = module.get_submodule(found.names[0])
        return mlp_higher_order(Xt, rec.name, bias=first.bias is not None, n_outputs=n_outputs)
    return higher_order_terms(module, Xt, units=found.layout)


def examine_orders(problem: Problem, say, *, seed: int = 0):
    """``(order, higher)``: the :class:`LeadingOrder` of the units when the quadratic form is silent at round-off
    (a progress line says which order leads), with the orders-3-and-4 terms it examined (for
    :func:`dormant_prediction`, which then does not build them again; None where they could not be built);
    ``(None, None)`` when the quadratic form is not silent (the NQF's prediction stands).  On the full data's
    operator and ``y − f(0)`` (not the moment rows)."""
    op, targets = problem.op, problem.residual0
    second = leading_order([unit_term(op, 2)], targets, shuffles=0, starts=4, seed=seed)
    if second.order == 2:
        return None, None
    try:
        higher = _higher_terms(problem, targets.shape[1])
    except NormalFormError as err:
        say(f"order: the quadratic form carries no signal; orders 3 and 4 not examined ({err})")
        return second, None
    third_fourth = leading_order([unit_term(higher, 3), unit_term(higher, 4)], targets, shuffles=SHUFFLES, seed=seed)
    found_order = LeadingOrder(maxima=second.maxima + third_fourth.maxima, order=third_fourth.order)
    say(f"order: {found_order.sentence()}")
    return found_order, higher


def relation_order(problem: Problem, say, *, seed: int = 0):
    """When the quadratic form's utility is not above shuffled targets' (its drops fit this sample, e.g. the
    spurious linear correlation of a parity), the first order whose utility is: ``(sentence, escape time)``
    (the first escape of the units' Taylor polynomial through that order, by gradient flow from ``W0`` on
    ``y − f(0)``: ``dormant_staircase(..., lower=)``), or None when the quadratic form carries a
    relation.  Analytic two-layer MLPs only (the permutation test costs ~40 utility maximisations)."""
    op, targets, W0 = problem.op, problem.residual0, problem.W0
    if not (problem.how == "analytic mlp" and problem.found.is_whole_mlp):
        return None
    m2 = leading_order([unit_term(op, 2)], targets, shuffles=SHUFFLES, starts=4, seed=seed).maxima[0]
    if m2.beyond_shuffled:
        return None
    head = (
        f"The quadratic form's utility (U* = {m2.value:.4g}) is not above shuffled targets' ({m2.null:.4g}): its "
        "drops fit this sample, not a relation between inputs and targets"
    )
    try:
        higher = _higher_terms(problem, targets.shape[1])
    except NormalFormError:
        return f"{head}.", None
    lo = leading_order([unit_term(higher, 3), unit_term(higher, 4)], targets, shuffles=SHUFFLES, seed=seed)
    beyond = [m for m in lo.maxima if m.beyond_shuffled]
    if not beyond:
        say("order: no order up to 4 has a utility above shuffled targets'")
        return f"{head}; no order up to 4 does better: what the network learns here is a fit of this sample.", None
    m = beyond[0]
    lower = [unit_term(op, 2), *([unit_term(higher, 3)] if m.order == 4 else [])]
    pred = dormant_staircase(unit_term(higher, m.order), targets, W0, 1.0, lower=lower)
    when = (
        f"t ≈ {pred.times[0]:.4g} (the loss halfway from {pred.levels[0]:.4g} to the polynomial's fit "
        f"{pred.levels[1]:.4g})"
        if pred.n_drops
        else "no time (no unit escaped)"
    )
    say(f"order: k = {m.order} carries a relation beyond shuffled targets; its first escape at {when}")
    return (
        f"{head}; the first order that carries one is k = {m.order} (U* = {m.value:.4g} against {m.null:.4g}), "
        f"whose first escape from this start comes at {when} (gradient flow of the units' Taylor polynomial "
        f"through order {m.order}: the spurious quadratic rate grows the units first, so the time goes like "
        "ln(1/ε), not a power of ε)."
    ), (float(pred.times[0]) if pred.n_drops else None)


def dormant_prediction(order: LeadingOrder, higher, problem: Problem, eps: float, say):
    """The degree-``k`` staircase of ``order`` from the analysis' ``W0`` on ``y − f(0)``, with the higher-order
    terms :func:`examine_orders` built (``higher``; built here when None); :class:`SilentError` when no order
    carries signal (the sentence names which orders were examined)."""
    if order.order is None or order.order == 2:
        raise SilentError(f"{order.sentence()}: no drop to predict or to train for")
    targets = problem.residual0
    if higher is None:
        higher = _higher_terms(problem, targets.shape[1])
    term = unit_term(higher, order.order)
    pred = dormant_staircase(term, targets, problem.W0, eps)
    say(
        f"prediction: dormant flow of order {order.order}, {pred.n_drops} escapes, levels "
        f"{pred.levels[0]:.4g} → {pred.levels[-1]:.4g}, first at t = {pred.times[0]:.4g}"
        if pred.n_drops
        else f"prediction: dormant flow of order {order.order}, no escape"
    )
    return pred, term


def dormant_step(term, pred, targets, fraction: float) -> float:
    """``fraction / λ``, ``λ`` the curvature of the first active phase along its escape direction
    (:func:`nqf.reductions.dormant.active_curvature`): GD resolves the escape, and the dormant phase (curvature
    near zero) is stable at any such step."""
    if not pred.n_drops:
        raise InvalidParameterError("`lr`: the dormant flow predicts no escape, so no step can be derived; give --lr")
    lam = active_curvature(term, torch.tensor(np.array(pred.directions[:, 0])), targets)
    if not (math.isfinite(lam) and lam > 0):
        raise InvalidParameterError(f"`lr`: the first active phase has curvature {lam!r}; give --lr")
    return fraction / lam
