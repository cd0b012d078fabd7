"""The model zoo's ``conv2d_rgb`` row (issue 32): one drop to a level 0 that the NQF approaches slowly.

The target is linear in the images' channel means, which the centre tap of a 3×3 kernel reads exactly, so
the saddle search goes from ``L_0`` to 0 in one drop.  ``nqf analyze`` runs to ``1.5 t_1 + 5``; there its NQF is
still ~3 % of ``L_0`` above 0 and the zoo's level error (against a floor of 1 % of ``L_0``) is ~300 %.
Independent truth here: the gradient flow of the units' order parameter (the module's autodiff operator,
DOP853) from ``W(0)``, run past the analysis horizon: the drop on time, the 1 % floor crossed only well after
the horizon, and the loss still falling — the predicted level is the limit, the horizon too short to show it.
"""

from __future__ import annotations

import numpy as np
import torch

from helpers import load_zoo
from nqf.app._study import choose_units
from nqf.curves import compare_staircase
from nqf.dynamics import gradient_flow
from nqf.modules import from_module
from nqf.reductions import predict

DT = torch.float64
EPS = 1e-6


def test_the_last_level_is_the_flows_limit_reached_long_after_the_analysis_horizon():
    """Measured: drop within 3.8 % of its time; at the horizon (t ≈ 69) the flow is at 3.0 % of ``L_0``; it
    crosses 1 % at t ≈ 257 and is at 0.45 % at t = 400, still falling.  Planted: a level read off the flow at
    the horizon (what a too-short run shows) is passed by the flow by more than half of itself."""
    zoo = load_zoo("nqf_test_zoo_slow")
    X, Y = (torch.as_tensor(a, dtype=DT) for a in zoo.images_data())
    torch.manual_seed(0)
    net = zoo.conv2d_rgb(X[0].numel(), 1).to(DT).eval()
    found = choose_units(net)
    op = from_module(net, found.layout, X)
    g = torch.Generator().manual_seed(0)
    W0 = torch.randn(op.p, found.n_units, generator=g, dtype=DT) * (EPS / op.p) ** 0.5
    st = predict(op, Y - op.offset, EPS, M0=W0 @ W0.T, max_rank=found.n_units, subspace=True)
    L0 = float(st.levels[0])
    assert st.n_drops == 1 and float(st.levels[-1]) < 1e-12 * L0
    T = 400.0
    flow = gradient_flow(op, Y - op.offset, W0=W0, t_span=(0, T), t_eval=np.linspace(0, T, 401), method="DOP853")
    t, loss = flow.t.numpy(), flow.loss.numpy()
    cmp = compare_staircase(t, loss, st)
    assert abs(float(cmp.time_errors[0])) < 0.05
    horizon = 1.5 * float(st.times[-1]) + 5
    at_horizon = float(np.interp(horizon, t, loss))
    assert at_horizon > 0.01 * L0  # the analysis horizon does not reach the floor
    crossed = float(t[np.argmax(loss <= 0.01 * L0)])
    assert loss[-1] <= 0.01 * L0 and crossed > 2 * horizon  # the flow does, much later
    assert loss[-1] < loss[-50]  # still falling towards the predicted limit
    assert loss[-1] < 0.5 * at_horizon  # planted: the horizon's reading as the level is passed
