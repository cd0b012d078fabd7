"""The verdict on an order-k staircase (the quadratic form silent) is judged against its own order.

When the quadratic form is silent the NQF simulation stays at ``L_0``, so the real network "leaves" it at its
first drop; the verdict must still compare every drop it reaches and must not speak of the quadratic regime.
Planted: the same numbers labelled as a saddle sequence keep the quadratic-regime sentences (the check can fail).
"""

import numpy as np

from nqf.app._study._verdict import judge, validity
from nqf.curves import StaircaseComparison
from nqf.reductions import Staircase

LEVELS, TIMES, REAL_TIMES = (1.5, 1.0, 0.5), (100.0, 200.0), (101.0, 203.0)


def _verdict(method: str, rule: str) -> dict:
    pred = Staircase(
        method, 1e-2, np.array(LEVELS), np.array(TIMES), (rule,) * 2, np.array(TIMES), np.ones(3), np.arange(3),
        np.eye(4)[:, :2], np.arange(2), global_minimum=False,
    )  # fmt: skip
    t = np.linspace(0.0, 300.0, 601)
    Lr = pred.loss_curve(t - np.interp(t, TIMES, np.subtract(REAL_TIMES, TIMES)))
    Ln = np.full_like(t, LEVELS[0])  # the silent quadratic form: the NQF never moves

    def cmp(tm):
        return StaircaseComparison(
            np.array(LEVELS), np.array(LEVELS), np.array(TIMES), np.array(tm, float), np.zeros(3), 0.25
        )

    val = validity(t, Lr, Ln, np.arange(t.size), pred, 0.05)
    assert val["left_step"] is not None  # the real network leaves the flat NQF at its first drop
    return judge(pred, cmp(TIMES), cmp(REAL_TIMES), val, 1e-2, width=4, p=4)


def test_order_k_verdict_compares_every_drop_and_never_names_the_quadratic_regime():
    v = _verdict("dormant-flow", "dormant flow")
    assert v.drops_compared == 2 and v.trust == "high"  # 1.0 % and 1.5 % late, levels exact
    text = " ".join(v.text)
    assert "quadratic regime" not in text and "max gap" not in text
    assert "judged against the order-k staircase alone" in text


def test_planted_a_saddle_sequence_with_the_same_curves_is_cut_at_the_regime_exit():
    v = _verdict("saddle-sequence", "exact offset")
    assert v.drops_compared < 2 and any("left the quadratic regime" in s for s in v.text)
