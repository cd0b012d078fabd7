r"""Validity of the quadratic regime and the verdict of an analysis.

**Validity.**  The NQF is the network's second-order expansion around zero
weights; it describes the real network while the weights stay small.  The
network has *left the quadratic regime* at the first saved step where either

* the relative gap ``|L_real − L_NQF| / L_NQF`` exceeds ``gap_tolerance``
  (default 5 %), or
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

The text names the reasons: the network leaving the regime (with the step),
plateaus that are not flat (modes crowd: ε is too large to separate them),
the leading-order error scale ``1/ln(1/ε)``, and a rank-deficient start.
"""

from __future__ import annotations

import math

import numpy as np

from ..curves import regime_exit

__all__ = ["validity", "judge", "MIN_MARGIN"]

#: Relative margin below the NQF minimum that counts as leaving the quadratic regime.
MIN_MARGIN = 0.01


def validity(t, loss_real, loss_nqf, steps, prediction, gap_tolerance: float = 0.05) -> dict:
    """Where the real network leaves the NQF: :func:`nqf.curves.regime_exit` with the
    prediction's certified global minimum."""
    Lmin = float(prediction.levels[-1]) if prediction.global_minimum else None
    return regime_exit(t, loss_real, loss_nqf, steps, Lmin, gap_tolerance=gap_tolerance, min_margin=MIN_MARGIN)


#: The NQF's own last level this far (relative) from the predicted one: a slow relaxation, judged against the NQF.
SLOW_LAST_LEVEL = 0.05


def _level_errors(pred, cmp_nqf, cmp_real) -> tuple[np.ndarray, str]:
    """The real network's level errors, the last judged against the level the NQF reaches by the horizon when
    the NQF itself is more than :data:`SLOW_LAST_LEVEL` from the predicted last level (a minimum approached
    slowly: the saddle value is its ε → 0, t → ∞ limit, not the level at the read point); and a sentence."""
    errors = np.array(cmp_real.level_errors, dtype=float, copy=True)
    K = pred.n_drops
    L_pred, L_nqf = float(pred.levels[-1]), float(cmp_nqf.levels_measured[-1])
    if not K or not np.isfinite(L_nqf) or abs(L_nqf / L_pred - 1) <= SLOW_LAST_LEVEL:
        return errors, ""
    L_real = float(cmp_real.levels_measured[-1])
    errors[-1] = abs(L_real / L_nqf - 1)
    kind = "global minimum" if pred.global_minimum else "last saddle"
    text = (
        f"The last level L_{K} = {L_pred:.4g} (the NQF's {kind}) is approached slowly: at the end of the run the NQF "
        f"itself is {_fmt_pct(L_nqf / L_pred - 1)} above it ({L_nqf:.4g}), so that is the level this horizon reaches; "
        f"the real network's last level ({L_real:.4g}) is judged against it ({_fmt_pct(errors[-1])}) — a longer "
        "run, not a smaller ε, brings the NQF to L_K."
    )
    return errors, text


def _fmt_pct(x) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{100 * x:.1f} %"


def judge(pred, cmp_nqf, cmp_real, val: dict, eps: float, found, width: int, p: int) -> dict:
    """Verdict in words and numbers (see the module docstring)."""
    K = pred.n_drops
    reached = np.isfinite(cmp_real.times_measured)
    left_t = val.get("left_time")
    inside = reached & (cmp_real.times_measured < left_t) if left_t is not None else reached
    te = cmp_real.time_errors[inside] if K else np.zeros(0)
    level_errors, slow = _level_errors(pred, cmp_nqf, cmp_real)
    le = level_errors[1:][inside] if K else np.zeros(0)
    max_te = float(te.max()) if te.size else math.nan
    max_le = float(le.max()) if le.size else math.nan
    flat = [int(k) for k in np.nonzero(cmp_real.flat)[0]]
    not_flat = [int(k) for k in range(len(cmp_real.flat)) if not cmp_real.flat[k]]
    lead = 1.0 / math.log(1.0 / eps)
    text = []
    left_early = left_t is not None and K and left_t < float(pred.times[-1])
    if te.size and max_te <= 0.10 and max_le <= 0.05 and not left_early:
        trust = "high"
    elif te.size and max_te <= 0.25 and max_le <= 0.15 and not left_early:
        trust = "moderate"
    else:
        trust = "low"
    text.append(
        f"{pred.method.replace('-', ' ')} predicts {K} drops from L = {pred.levels[0]:.4g} to "
        f"{pred.levels[-1]:.4g}; against the real network the drops it reaches inside the quadratic regime "
        f"({int(inside.sum())} of {K}) are within {_fmt_pct(max_te)} in time and {_fmt_pct(max_le)} in level "
        f"(trust: {trust})."
    )
    text.append(f"Real network vs NQF simulation: max relative gap {_fmt_pct(val['max_gap'])} over the run.")
    if slow:
        text.append(slow)
    if val.get("left_step") is not None:
        text.append(
            f"The network left the quadratic regime at step {val['left_step']} (t = {val['left_time']:.4g}): "
            f"{val['reason']}; predictions after that time do not describe this network"
            + (
                f" (final loss {val['final_real']:.4g} vs NQF minimum {val['nqf_minimum']:.4g})."
                if val.get("nqf_minimum") is not None
                else "."
            )
        )
    if not_flat:
        text.append(
            f"Plateaus {not_flat} are not flat at ε = {eps:g} (the loss moves by more than "
            f"{cmp_real.flat_threshold:g} of the adjacent drop across their middle): neighbouring modes crowd "
            "together and the curve passes through those levels instead of resting on them; a smaller ε "
            "separates them (plateau lengths grow like ln(1/ε))."
        )
    rules = pred.time_rules
    n_lead = sum(r == "leading order" for r in rules)
    if n_lead:
        n_corr = sum(r == "O(1) recursion" for r in rules)
        text.append(
            f"{n_lead} of the {K} escape times are leading order τ_k ln(1/ε) (the O(1) correction "
            f"applies to {n_corr} later drop(s): it stops at the first plateau shorter than the relaxation "
            f"into its saddle); their relative error is O(1/ln(1/ε)) = O({lead:.2g}) at this ε and "
            "shrinks as ε decreases."
        )
    if width < p:
        text.append(f"The width {width} is below p = {p}: the start M(0) = εΠ is rank-deficient.")
    return {
        "trust": trust,
        "text": text,
        "max_time_error": max_te,
        "max_level_error": max_le,
        "drops_compared": int(inside.sum()),
        "flat_plateaus": flat,
        "not_flat_plateaus": not_flat,
        "leading_order_scale": lead,
    }
