r"""Validity of the quadratic regime, the verdict of an analysis, and how their numbers are printed.

**Validity.**  The NQF is the network's second-order expansion around zero
weights; it describes the real network while the weights stay small.  The
network has *left the quadratic regime* at the first saved step where either

* the gap ``|L_real − L_NQF| / max(L_NQF, 10⁻³ L_0)`` exceeds ``gap_tolerance``
  (default 5 %; the floor :data:`LEVEL_FLOOR` ``· L_0`` keeps a network that fits
  its data exactly from "leaving" on the round-off of a loss of ~0), or
* the real loss falls below the NQF's global minimum (the last level of the
  saddle sequence when it is certified global, ``G ⪰ 0``) by more than 1 %:
  no trajectory of the NQF can get there, so the network uses terms beyond
  second order.

**Verdict.**  ``trust`` is

* ``"high"``: the network stays in the quadratic regime and every drop reached
  by the real network is within 10 % in time and 5 % in level;
* ``"moderate"``: within 25 % in time and 15 % in level (the leading-order
  error of the escape times is ``O(1/ln(1/ε))``: 7 % at ε = 1e-6);
* ``"low"`` otherwise, or when the network left the regime before the last drop.

Trust is never ``"high"`` when the predicted drops remove less than
:data:`LEARNED_FRACTION` (10 %) of the initial loss ``L_0``: at second order
almost nothing is learned, and an accurate prediction of a small drop says
little about how the network learns (sparse parity: one drop from 0.25 to
0.2464).  The trust sentence names why it is not higher.

The text names the reasons: the network leaving the regime (with the step of
``η`` and the time ``t = η·steps`` of the table and the figure), plateaus that
are not flat (modes crowd: ε is too large to separate them), the leading-order
error scale ``1/ln(1/ε)``, and a rank-deficient start.

**Printed numbers** (the verdict, the terminal table, the HTML report and
``results.json`` alike):

* errors are in percent, one decimal, with more decimals where one would put
  the number on the other side of a threshold it is compared with
  (:func:`fmt_pct`, :func:`fmt_pair`): "x > limit" always reads true;
* a level below :data:`LEVEL_FLOOR` ``· L_0`` (0.1 % of the initial loss) is ~0
  on the problem's scale: its error is the absolute difference ``|Δ|``, not a
  relative error (:func:`error_of`); so is any relative error above
  :data:`MAX_RELATIVE` (1000 %): no percentage above 1000 % is printed.  The
  verdict judges a level by ``|Δ| / max(|L_k|, 10⁻³ L_0)``;
* a level within :data:`ROUNDOFF` ``· L_0`` of zero (float64 round-off of a sum
  of up to ~10⁴ terms of size ``L_0``; negative levels such as −1.3·10⁻¹⁵ among
  them) is printed ``0 (round-off)`` (:func:`level_text`).
"""

from __future__ import annotations

import math
from typing import TypeGuard

import numpy as np

from ...curves import regime_exit
from ._parts import Validity, Verdict

__all__ = [
    "validity",
    "judge",
    "MIN_MARGIN",
    "LEVEL_FLOOR",
    "MAX_RELATIVE",
    "ROUNDOFF",
    "LEARNED_FRACTION",
    "error_of",
    "fmt_error",
    "fmt_pct",
    "fmt_pair",
    "fmt_sig",
    "level_text",
]

#: Relative margin below the NQF minimum that counts as leaving the quadratic regime.
MIN_MARGIN = 0.01
#: A reference level below this fraction of the initial loss ``L_0`` is ~0 on the problem's scale: errors to it
#: are absolute differences, and the regime's gap is taken against ``LEVEL_FLOOR · L_0`` where the NQF is below it.
LEVEL_FLOOR = 1e-3
#: Relative errors above this (1000 %) are printed as the absolute difference: the reference is ~0, or the
#: prediction is meaningless there.
MAX_RELATIVE = 10.0
#: A level within this fraction of ``L_0`` of zero is zero up to float64 round-off: printed ``0 (round-off)``.
ROUNDOFF = 1e-12
#: The predicted drops must remove at least this fraction of ``L_0`` for trust to be "high".
LEARNED_FRACTION = 0.10
#: Largest time and level errors of "high" and of "moderate" trust.
HIGH, MODERATE = (0.10, 0.05), (0.25, 0.15)
#: The NQF's own last level this far (relative) from the predicted one: a slow relaxation, judged against the NQF.
SLOW_LAST_LEVEL = 0.05


def _finite(x) -> TypeGuard[float]:
    return x is not None and math.isfinite(float(x))


def _same_side(printed: float, x: float, limits) -> bool:
    return all(np.sign(printed - L) == np.sign(x - L) for L in limits)


def fmt_pct(x, limits=(), decimals: int = 1) -> str:
    """``x`` (a fraction) in percent, ``decimals`` decimals, more where fewer would put it on the other side of
    (or on) one of ``limits`` (fractions) that it is not equal to; ``—`` for None or NaN."""
    if not _finite(x):
        return "—"
    x = float(x)
    for d in range(decimals, decimals + 14):
        s = f"{100 * x:.{d}f}"
        if _same_side(float(s) / 100, x, limits):
            return f"{s} %"
    return f"{100 * x!r} %"


def fmt_pair(a: float, b: float, digits: int = 4) -> tuple[str, str]:
    """``a`` and ``b`` at ``digits`` significant digits, more where fewer would print them equal or in the wrong
    order: ``f"{x} < {y}"`` reads as true as ``a < b`` is."""
    a, b = float(a), float(b)
    for d in range(digits, 18):
        sa, sb = f"{a:.{d}g}", f"{b:.{d}g}"
        if np.sign(float(sa) - float(sb)) == np.sign(a - b):
            return sa, sb
    return repr(a), repr(b)


def fmt_sig(x, limits=(), digits: int = 4) -> str:
    """``x`` at ``digits`` significant digits, more where fewer would put it on the other side of (or on) one of
    ``limits`` that it is not equal to; ``—`` for None or NaN."""
    if not _finite(x):
        return "—"
    x = float(x)
    for d in range(digits, 18):
        s = f"{x:.{d}g}"
        if _same_side(float(s), x, limits):
            return s
    return repr(x)


def error_of(measured, reference, floor: float = 0.0) -> tuple[str, float | None]:
    """``("relative", |Δ| / |reference|)``; ``("absolute", |Δ|)`` where ``|reference| < floor`` or the relative
    error exceeds :data:`MAX_RELATIVE`; ``("missing", None)`` where either value is missing or not finite."""
    if not (_finite(measured) and _finite(reference)):
        return "missing", None
    diff = abs(float(measured) - float(reference))
    if abs(float(reference)) < floor or abs(float(reference)) == 0:
        return "absolute", diff
    rel = diff / abs(float(reference))
    return ("absolute", diff) if rel > MAX_RELATIVE else ("relative", rel)


def fmt_error(measured, reference, floor: float = 0.0, limits=()) -> str:
    """The error of ``measured`` against ``reference`` as printed: percent, or ``|Δ| = …`` (:func:`error_of`)."""
    kind, v = error_of(measured, reference, floor)
    if kind == "relative":
        return fmt_pct(v, limits)
    return "—" if v is None else f"|Δ| = {v:.3g}"


def level_text(L, L0) -> str:
    """A loss level, 4 significant digits; ``0 (round-off)`` within :data:`ROUNDOFF` ``· L_0`` of zero."""
    if not _finite(L):
        return "—"
    if abs(float(L)) <= ROUNDOFF * abs(float(L0)):
        return "0 (round-off)"
    return f"{float(L):.4g}"


def validity(t, loss_real, loss_nqf, steps, prediction, gap_tolerance: float = 0.05) -> Validity:
    """Where the real network leaves the NQF: :func:`nqf.curves.regime_exit` with the prediction's certified
    global minimum and the gap floor ``LEVEL_FLOOR · L_0``; its reason printed at the precision that shows the
    comparison; also ``max_abs_gap`` (largest ``|L_real − L_NQF|``) and ``gap_floor``."""
    Lmin = float(prediction.levels[-1]) if prediction.global_minimum else None
    floor = LEVEL_FLOOR * abs(float(prediction.levels[0]))
    out = regime_exit(
        t, loss_real, loss_nqf, steps, Lmin, gap_tolerance=gap_tolerance, min_margin=MIN_MARGIN, gap_floor=floor
    )
    Lr, Ln = np.asarray(loss_real, float), np.asarray(loss_nqf, float)
    out["max_abs_gap"] = float(np.abs(Lr - Ln).max()) if Lr.size else math.nan
    out["gap_floor"] = floor
    if out["left_step"] is not None:
        i = int(np.flatnonzero(np.asarray(steps) == out["left_step"])[0])
        if Lmin is not None and Lr[i] < (1 - MIN_MARGIN) * Lmin:
            bound = (1 - MIN_MARGIN) * Lmin
            x, y = fmt_pair(Lr[i], bound)
            out["reason"] = f"real loss below the NQF global minimum: L_real = {x} < (1 − {MIN_MARGIN:g}) · L_min = {y}"
        else:
            gap = abs(Lr[i] - Ln[i]) / max(abs(Ln[i]), floor, 1e-300)
            ref = "L_NQF" if abs(Ln[i]) >= floor else f"{LEVEL_FLOOR:g} L_0 (L_NQF is below it)"
            out["reason"] = f"|L_real − L_NQF| / {ref} = {fmt_pct(gap, [gap_tolerance])} > {100 * gap_tolerance:g} %"
    return Validity(**out)


def _level_errors(pred, cmp_nqf, cmp_real) -> tuple[np.ndarray, str]:
    """The real network's level errors ``|Δ| / max(|L_k|, LEVEL_FLOOR · L_0)``, the last judged against the level
    the NQF reaches by the horizon when the NQF itself is more than :data:`SLOW_LAST_LEVEL` from the predicted last
    level (a minimum approached slowly: the saddle value is its ε → 0, t → ∞ limit, not the level at the read
    point); and a sentence."""
    levels = np.asarray(pred.levels, float)
    L0 = float(levels[0])
    floor = LEVEL_FLOOR * abs(L0)
    measured = np.asarray(cmp_real.levels_measured, float)
    errors = np.abs(measured - levels) / np.maximum(np.abs(levels), max(floor, 1e-300))
    K = pred.n_drops
    L_pred, L_nqf = float(levels[-1]), float(cmp_nqf.levels_measured[-1])
    if not K or not np.isfinite(L_nqf) or abs(L_nqf - L_pred) / max(abs(L_pred), floor) <= SLOW_LAST_LEVEL:
        return errors, ""
    L_real = float(measured[-1])
    errors[-1] = abs(L_real - L_nqf) / max(abs(L_nqf), floor)
    kind = "global minimum" if pred.global_minimum else "last saddle"
    text = (
        f"The last level L_{K} = {level_text(L_pred, L0)} (the NQF's {kind}) is approached slowly: at the end of "
        f"the run the NQF itself is {fmt_error(L_nqf, L_pred, floor, [SLOW_LAST_LEVEL])} above it ({L_nqf:.4g}), "
        "so that is the level this horizon reaches; the real network's last level "
        f"({L_real:.4g}) is judged against it ({fmt_error(L_real, L_nqf, floor)}) — a longer run, not a smaller ε, "
        "brings the NQF to L_K."
    )
    return errors, text


def _worst(errors: np.ndarray, diffs: np.ndarray, limits) -> tuple[float, str]:
    """The largest error (NaN when one is missing) and its text: percent, or ``|Δ| = …`` above
    :data:`MAX_RELATIVE`."""
    if not errors.size:
        return math.nan, "—"
    e = float(errors.max())
    if not math.isfinite(e):
        return e, "—"
    if e > MAX_RELATIVE:
        return e, f"|Δ| = {float(diffs[int(np.argmax(errors))]):.3g} (above {100 * MAX_RELATIVE:g} %)"
    return e, fmt_pct(e, limits)


def _trust(max_te: float, max_le: float, compared: bool, left_early: bool, learned: float) -> tuple[str, list]:
    """Trust and why it is not higher (see the module docstring)."""
    why = []
    if not compared:
        why.append("no predicted drop is reached inside the quadratic regime")
    if left_early:
        why.append("the network left the regime before the last predicted drop")
    for name, e, hi, mid in (("time", max_te, HIGH[0], MODERATE[0]), ("level", max_le, HIGH[1], MODERATE[1])):
        if compared and not e <= hi:
            why.append(f"a {name} error above {100 * (mid if e > mid else hi):g} %" if e == e else f"a {name} not read")
    inside = compared and not left_early
    if inside and max_te <= HIGH[0] and max_le <= HIGH[1]:
        trust = "high"
    elif inside and max_te <= MODERATE[0] and max_le <= MODERATE[1]:
        trust = "moderate"
    else:
        trust = "low"
    if learned < LEARNED_FRACTION:
        why.append(f"the predicted drops remove less than {100 * LEARNED_FRACTION:g} % of L_0")
        trust = "moderate" if trust == "high" else trust
    return trust, why


def judge(pred, cmp_nqf, cmp_real, val: Validity, eps: float, *, width: int, p: int, real_lr=None) -> Verdict:
    """Verdict in words and numbers (see the module docstring).  ``real_lr``: the real network's GD step where it
    differs from the table's ``η`` (named in the sentence on leaving the regime)."""
    K = pred.n_drops
    levels = np.asarray(pred.levels, float)
    L0 = float(levels[0])
    reached = np.isfinite(cmp_real.times_measured)
    order_k = pred.method == "dormant-flow"  # judged against its own order, not the NQF's regime
    left_t = None if order_k else val.get("left_time")
    inside = reached & (cmp_real.times_measured < left_t) if left_t is not None else reached
    t_diff = np.abs(np.asarray(cmp_real.times_measured, float) - np.asarray(pred.times, float))
    te = cmp_real.time_errors[inside] if K else np.zeros(0)
    level_errors, slow = _level_errors(pred, cmp_nqf, cmp_real)
    l_diff = np.abs(np.asarray(cmp_real.levels_measured, float) - levels)
    le = level_errors[1:][inside] if K else np.zeros(0)
    max_te, te_text = _worst(np.asarray(te, float), t_diff[inside] if K else te, (HIGH[0], MODERATE[0]))
    max_le, le_text = _worst(le, l_diff[1:][inside] if K else le, (HIGH[1], MODERATE[1]))
    flat = [int(k) for k in np.nonzero(cmp_real.flat)[0]]
    not_flat = [int(k) for k in range(len(cmp_real.flat)) if not cmp_real.flat[k]]
    lead = 1.0 / math.log(1.0 / eps)
    learned = (L0 - float(levels[-1])) / L0 if L0 > 0 else 0.0
    left_early = bool(left_t is not None and K and left_t < float(pred.times[-1]))
    trust, why = _trust(max_te, max_le, bool(te.size), left_early, learned)
    where = "the drops it reaches" if order_k else "the drops it reaches inside the quadratic regime"
    text = [
        f"{pred.method.replace('-', ' ')} predicts {K} drop{'s' if K != 1 else ''} from L = {L0:.4g} to "
        f"{level_text(levels[-1], L0)}; against the real network {where} "
        f"({int(inside.sum())} of {K}) are within {te_text} in time and {le_text} in level (trust: {trust}"
        + (f"; not higher: {', '.join(why)}" if why else "")
        + ")."
    ]
    if learned < LEARNED_FRACTION and not order_k:
        text.append(
            f"The predicted drops remove {fmt_pct(learned, [LEARNED_FRACTION])} of the initial loss (L_0 = {L0:.4g}"
            f" → L_{K} = {level_text(levels[-1], L0)}), less than {100 * LEARNED_FRACTION:g} %: at this (second) "
            "order almost nothing is learned, so an accurate prediction says little about how this network learns "
            "(what it learns later comes from higher orders, which the NQF leaves out); trust is at most moderate."
        )
    text += _regime_sentences(val, L0, real_lr, order_k, slow)
    if not_flat:
        text.append(
            f"Plateaus {not_flat} are not flat at ε = {eps:g} (the loss moves by more than "
            f"{cmp_real.flat_threshold:g} of the adjacent drop across their middle): neighbouring modes crowd "
            "together and the curve passes through those levels instead of resting on them; a smaller ε "
            "separates them (plateau lengths grow like "
            + ("a power of 1/ε at this order)." if order_k else "ln(1/ε)).")
        )
    rules = pred.time_rules
    n_lead = sum(r == "leading order" for r in rules)
    if n_lead:
        n_corr = sum(r == "O(1) recursion" for r in rules)
        text.append(
            f"{n_lead} of the {K} escape times are leading order τ_k ln(1/ε) (the O(1) correction "
            f"applies to {n_corr} later drop(s): it stops at the first plateau shorter than the relaxation "
            f"into its saddle); their relative error is O(1/ln(1/ε)) = O({100 * lead:.2g} %) at this ε and "
            "shrinks as ε decreases."
        )
    if width < p:
        text.append(f"The width {width} is below p = {p}: the start M(0) = εΠ is rank-deficient.")
    return Verdict(
        trust=trust,
        text=tuple(text),
        max_time_error=max_te,
        max_level_error=max_le,
        drops_compared=int(inside.sum()),
        flat_plateaus=tuple(flat),
        not_flat_plateaus=tuple(not_flat),
        leading_order_scale=lead,
        learned_fraction=learned,
    )


def _regime_sentences(val: Validity, L0: float, real_lr, order_k: bool, slow: str) -> list[str]:
    """The real network against the NQF simulation and where it left the quadratic regime; for an order-``k``
    staircase (the quadratic form silent) one sentence instead: the NQF cannot follow these data."""
    if order_k:
        return [
            "The quadratic form is silent on these data, so the NQF simulation stays at L_0 and says nothing: the "
            "real network is judged against the order-k staircase alone, at every drop it reaches."
        ] + ([slow] if slow else [])
    out = [f"Real network vs NQF simulation: max gap {_gap_text(val)} over the run."]
    if slow:
        out.append(slow)
    if val.get("left_step") is not None:
        out.append(_left_sentence(val, L0, real_lr))
    return out


def _gap_text(val: Validity) -> str:
    """The largest gap real vs NQF: percent of ``max(L_NQF, LEVEL_FLOOR · L_0)``, or ``|Δ|`` above 1000 %."""
    g = val.get("max_gap")
    if _finite(g) and float(g) > MAX_RELATIVE:
        a = val.get("max_abs_gap")
        return f"|L_real − L_NQF| = {float(a):.3g} (above {100 * MAX_RELATIVE:g} %)" if _finite(a) else "above 1000 %"
    ref = "max(L_NQF, 10⁻³ L_0)" if val.get("gap_floor") else "L_NQF"
    return f"|L_real − L_NQF| / {ref} = " + fmt_pct(g, [val["gap_tolerance"]] if "gap_tolerance" in val else [])


def _left_sentence(val: Validity, L0: float, real_lr) -> str:
    """The network left the regime: the step of ``η`` (the table's clock), the time, the reason and the end."""
    n, t = int(val["left_step"]), val.get("left_time")
    eta = f" of η = {t / n:.4g}" if n > 0 and _finite(t) else ""
    when = f" (t = η·steps = {t:.4g}, the time axis of the table and the figure" if _finite(t) else " ("
    if real_lr is not None and n > 0 and _finite(t) and not math.isclose(float(real_lr), t / n, rel_tol=1e-9):
        when += f"; the real network trains at a step of {float(real_lr):.4g} = {float(real_lr) * n / t:.3g} η"
        when += " and is read on this clock"
    end = ""
    if val.get("nqf_minimum") is not None:
        end = f" (final loss {val['final_real']:.4g} vs NQF minimum {level_text(val['nqf_minimum'], L0)})"
    return (
        f"The network left the quadratic regime at step {n}{eta}{when}): {val.get('reason')}; "
        f"predictions after that time do not describe this network{end}."
    )
