"""Alternating Gradient Flows at order two (``nqf.reductions.dormant.agf_staircase``).

Independent truths: the closed-form levels of a two-layer *linear* network on exactly whitened inputs and a
linear teacher with singular values ``s_k`` (after ``k`` modes, ``L_k = ½ Σ_{j>k} s_j²``), and the real network
trained by plain GD from the same ``W(0)`` (autograd of the module).  AGF activates a direction when its
strength reaches the best fit, the half-saturation point of a logistic mode; the loss crosses its midpoint
``ln(1 + √2)/ζ_k`` earlier, so AGF is late by between 0 and that.  Planted: the cost step skipped.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nqf.app._experiments import teacher_task
from nqf.curves import compare_staircase
from nqf.dynamics import GD, Save, initial_weights, train_network
from nqf.errors import InvalidParameterError, InvalidTypeError
from nqf.networks import TwoLayerMLP
from nqf.reductions.dormant import agf_staircase
from nqf.structure import mlp

S = (2.0, 1.0, 0.5)
WIDTH = 36


@pytest.fixture(scope="module")
def task():
    X, Y, _ = teacher_task(300, 6, list(S), 0)
    return X, Y, mlp(X, "linear", n_outputs=len(S))


def _net():
    return TwoLayerMLP(6, WIDTH, len(S), activation="linear", dtype=torch.float64)


def _closed_levels():
    return np.array([0.5 * sum(s * s for s in S[k:]) for k in range(len(S) + 1)])


def _level_error(st) -> float:
    want = _closed_levels()
    if st.levels.shape != want.shape:
        return math.inf
    return float(np.max(np.abs(st.levels - want)) / want[0])


def test_levels_are_the_closed_form(task):
    X, Y, op = task
    net = _net()
    st = agf_staircase(op, net, net.units, X, Y, initial_weights(op.p, WIDTH, 1e-12, seed=0), eps=1e-12)
    assert st.method == "agf" and st.time_rules == ("AGF",) * 3
    assert _level_error(st) < 1e-8
    np.testing.assert_allclose(st.rates[:-1], 2.0 * np.array(S), rtol=1e-9)  # ζ_k = 2 s_k


@pytest.mark.parametrize("cost_step", [True, False], ids=["tanh", "planted-no-cost-step"])
def test_tanh_cost_step_reaches_the_linear_level(task, cost_step):
    """The tanh module fits the linear teacher's first mode in its cost step (small input weights, large output
    weights: the first level within 10⁻⁵ of L_0 of the closed form; L-BFGS stops at about 10⁻⁸).  Planted: with
    the cost step skipped the units stay where the dormant flow put them and tanh's compression leaves the level
    1.7 % of L_0 too high."""
    X, Y, op_lin = task
    op = mlp(X, "tanh", n_outputs=len(S))
    net = TwoLayerMLP(6, WIDTH, len(S), activation="tanh", dtype=torch.float64)
    W0 = initial_weights(op.p, WIDTH, 1e-12, seed=0)
    st = agf_staircase(op, net, net.units, X, Y, W0, eps=1e-12, max_drops=1, cost_step=cost_step)
    err = abs(st.levels[1] - _closed_levels()[1]) / _closed_levels()[0]
    assert (err < 1e-5) == cost_step, err


@pytest.mark.parametrize("eps", [1e-8, 1e-12])
def test_times_are_late_by_at_most_the_logistic_midpoint_offset(task, eps):
    """Against GD of the real linear network from the same W(0): ``0 ≤ (t_AGF − t_real) ζ_k ≤ ln(1 + √2)`` for
    every drop, at both ε (an O(1)/ζ_k offset, not one growing with ln(1/ε))."""
    X, Y, op = task
    net = _net()
    W0 = initial_weights(op.p, WIDTH, eps, seed=0)
    st = agf_staircase(op, net, net.units, X, Y, W0, eps=eps)
    lr = 0.02 / float(st.rates.max())
    steps = int((st.times[-1] + 3.0) / lr)
    gd = train_network(net, net.units, X, Y, W0=W0, optimizer=GD(lr), save=Save(every=1, M=False, W=False), steps=steps)
    t_real = compare_staircase(gd.t.numpy(), gd.loss.numpy(), st).times_measured
    late = (st.times - t_real) * st.rates[:-1]
    assert np.all(late >= 0.0) and np.all(late <= math.log(1.0 + math.sqrt(2.0))), late


def test_bad_arguments(task):
    X, Y, op = task
    net = _net()
    W0 = initial_weights(op.p, WIDTH, 1e-6, seed=0)
    with pytest.raises(InvalidTypeError, match="`module`"):
        agf_staircase(op, "net", net.units, X, Y, W0, eps=1e-6)
    with pytest.raises(InvalidParameterError, match="`max_drops`"):
        agf_staircase(op, net, net.units, X, Y, W0, eps=1e-6, max_drops=0)
