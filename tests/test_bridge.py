"""The seeded NQF's plateaus bridged in closed form (``seeded_nqf(..., bridge=True)``).

Independent truth: the same GD stepped one step at a time.  The closed form is GD's own multiplier
``(1 − 2hg)ⁿ``; a planted bridge with gradient flow's ``e^{−2hgn}`` instead fails the comparison.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nqf
from nqf.curves import compare_staircase
from nqf.dynamics import Save, Seeding, initial_weights, seeded_nqf
from nqf.dynamics._bridge import Bridge, plan_bridge
from nqf.dynamics._factored import apply_G
from nqf.errors import InvalidTypeError
from nqf.networks import TwoLayerMLP

WIDTH = 64


@pytest.fixture(scope="module")
def iris(iris_tanh):
    X, Y, op = iris_tanh
    st = nqf.predict(op, Y, 1e-12)
    lr = 0.02 / float(st.rates.max())
    return X, Y, op, st, lr


def _steps(op, Y, W, h, n):
    """``n`` GD steps of the NQF (no source), one at a time."""
    for _ in range(n):
        r = op.forward_factor(W).reshape(Y.shape) - Y
        W = W - h * 2.0 * apply_G(op, r, W, Y.shape[0])
    return W


class _FlowBridge(Bridge):
    """Planted: gradient flow's multiplier e^{−2hgn} in place of GD's (1 − 2hg)ⁿ."""

    __slots__ = ()

    def block(self, n):
        bn = torch.exp(-2.0 * self.h * self.g * n)
        return self.basis @ (bn[:, None] * self.a0)


def _first_plateau_bridge(iris, cls=Bridge):
    X, Y, op, st, lr = iris
    h = 20 * lr
    W = initial_weights(op.p, WIDTH, 1e-12, seed=0)
    r = op.forward_factor(W).reshape(Y.shape) - Y
    g = 2.0 * apply_G(op, r, W, Y.shape[0])
    plan = plan_bridge(op, W, r, g, torch.zeros_like(W), h=h, n_samples=Y.shape[0], remaining=10_000, min_steps=2)
    assert plan is not None, "the isotropic start at ε = 1e-12 is a plateau: a bridge must be taken"
    bridge, n = plan
    planted = cls(bridge.W_frozen, bridge.basis, bridge.a0, bridge.c, bridge.g, bridge.h)
    return planted.state(n), _steps(op, Y, W, h, n), n


def test_the_closed_form_is_gd_stepped_one_step_at_a_time(iris):
    """Over the first plateau (the whole W small) the bridge is GD's linear map: the stepped weights agree to
    the order of what the bridge leaves out (outputs 10⁻³ of the residual ⇒ relative 10⁻³ of the step's effect)."""
    bridged, stepped, n = _first_plateau_bridge(iris)
    assert n > 20
    err = float((bridged - stepped).norm() / stepped.norm())
    assert err < 2e-3, err


def test_planted_flow_multiplier_fails(iris):
    bridged, stepped, n = _first_plateau_bridge(iris, _FlowBridge)
    err = float((bridged - stepped).norm() / stepped.norm())
    assert err > 2e-3, err


def test_bridged_seeded_nqf_keeps_the_stepped_drop_times(iris):
    """Iris, width 64, ε = 1e-12, at 20 η: the bridged run's drops equal the stepped run's (0.00 % measured);
    the first plateau is bridged."""
    X, Y, op, st, lr = iris
    W0 = initial_weights(op.p, WIDTH, 1e-12, seed=0)
    steps = int((1.5 * st.times[-1] + 5) / (20 * lr))
    net = TwoLayerMLP(X.shape[1], WIDTH, Y.shape[1], activation="tanh", dtype=torch.float64)
    times = []
    for bridge in (False, True):
        tr = seeded_nqf(op, net, net.units, X, Y, W0=W0, lr=20 * lr, steps=steps, seeding=Seeding(bridge=bridge),
                        save=Save(every=1, W=False, M=False))  # fmt: skip
        times.append(compare_staircase(tr.t.numpy(), tr.loss.numpy(), st).times_measured)
        if bridge:
            assert tr.info["bridges"] and tr.info["bridges"][0][0] == 10 and tr.info["bridges"][0][1] >= 20
    np.testing.assert_allclose(times[1], times[0], rtol=1e-3)


def test_bridge_must_be_a_bool():
    with pytest.raises(InvalidTypeError, match="`bridge`"):
        Seeding(bridge="yes")  # type: ignore[arg-type]
