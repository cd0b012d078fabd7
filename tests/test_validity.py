"""Validity of the quadratic approximation along real trajectories (docs/theory.md §6)."""

import math

import pytest
import torch

from nqf.curves._validity import ValidityReport, remainder_ratio, validity_report, validity_sweep
from nqf.dynamics import GD, Save, Trajectory, simulate, train_network
from nqf.networks._mlp import TwoLayerMLP
from nqf.structure._mlp import mlp

F64 = torch.float64


@pytest.fixture
def setup():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(15, 3, generator=g, dtype=F64)
    y = torch.tanh(X[:, 0] - X[:, 1])
    return X, y, g


def test_remainder_ratio_is_the_exact_tanh_remainder(setup):
    X, y, g = setup
    net = TwoLayerMLP(3, 5, 1, "tanh")
    op = mlp(X, "tanh")
    W = 0.7 * torch.randn(2, op.p, 5, generator=g, dtype=F64)
    rho = remainder_ratio(net, net.units, X, op, W)
    for k in range(2):
        a, U = W[k, 0], W[k, 1:]  # readout a_i, input weights u_i (columns)
        z = X @ U  # (N, m)
        quad = z @ a
        rem = (torch.tanh(z) - z) @ a
        assert math.isclose(float(rho[k]), float(rem.norm() / quad.norm()), rel_tol=1e-12)
    lin = TwoLayerMLP(3, 5, 1, "linear")
    assert float(remainder_ratio(lin, lin.units, X, mlp(X, "linear"), W[0])) < 1e-14


def _traj(t, loss, W=None):
    t = torch.as_tensor(t, dtype=F64)
    return Trajectory(t=t, loss=torch.as_tensor(loss, dtype=F64), W=W)


def test_report_times_and_gaps(setup):
    X, y, g = setup
    net = TwoLayerMLP(3, 2, 1, "tanh")
    op = mlp(X, "tanh")
    K = 6
    W = 0.01 * torch.randn(K, op.p, 2, generator=g, dtype=F64)
    t = torch.arange(K, dtype=F64)
    nqf_loss = [1.0, 0.9, 0.5, 0.2, 0.2, 0.2]  # drop 0.8; half-drop reached at t = 2
    net_loss = [1.0, 0.9, 0.55, 0.4, 0.35, 0.3]  # gaps 0, 0, .05, .2, .15, .1
    rep = validity_report(net, net.units, X, op, _traj(t, net_loss, W), _traj(t, nqf_loss), fraction=0.1)
    assert isinstance(rep, ValidityReport)
    assert math.isclose(rep.loss_drop, 0.8)
    assert rep.switch_time == 2.0 and math.isclose(rep.gap_at_switch, 0.05)
    assert math.isclose(rep.normalised_gap_at_switch, 0.05 / 0.8)
    assert rep.separation_time == 3.0  # first gap > 0.08
    assert math.isclose(rep.gap_at(4.1), 0.15)
    never = validity_report(net, net.units, X, op, _traj(t, net_loss, W), _traj(t, nqf_loss), fraction=0.5)
    assert never.separation_time is None
    with pytest.raises(ValueError, match="same time grid"):
        validity_report(net, net.units, X, op, _traj(2 * t, net_loss, W), _traj(t, nqf_loss))
    with pytest.raises(ValueError, match="`fraction` must be > 0"):
        validity_report(net, net.units, X, op, _traj(t, net_loss, W), _traj(t, nqf_loss), fraction=0)
    with pytest.raises(ValueError, match="must carry the saved weights"):
        validity_report(net, net.units, X, op, _traj(t, net_loss), _traj(t, nqf_loss))


def test_real_run_report_and_sweep(setup):
    X, y, g = setup
    net = TwoLayerMLP(3, 4, 1, "tanh")
    op = mlp(X, "tanh")
    Wd = torch.randn(op.p, 4, generator=g, dtype=F64) / 2
    W0 = math.sqrt(1e-3) * Wd
    q = simulate(op, y, W0=W0, optimizer=GD(0.1), save=Save(every=4), steps=120)
    n = train_network(net, net.units, X, y, W0=W0, optimizer=GD(0.1), save=Save(every=4), steps=120)
    rep = validity_report(net, net.units, X, op, n, q)
    assert rep.t.shape == rep.gap.shape == rep.remainder_ratio.shape == (31,)
    assert float(rep.gap[0]) < 1e-5  # same start: only the O(ε²) quartic remainder
    # the remainder is small at the start and grows as the weights grow
    assert float(rep.remainder_ratio[0]) < 1e-2 < float(rep.remainder_ratio[-1])
    sw = validity_sweep(
        net, net.units, X, y, op, Wd, [1e-3, 1e-2, 1e-1], lr=0.1, steps=120, save_every=4, early_time=0.4
    )
    assert sw.normalised_gap_at_switch.shape == (3,)
    # early gap relative to the loss drop grows with ε
    assert sw.early_normalised_gap[0] < sw.early_normalised_gap[1] < sw.early_normalised_gap[2]
    with pytest.raises(ValueError, match=r"`eps` must lie in \(0, 1\)"):
        validity_sweep(net, net.units, X, y, op, Wd, [0.0], lr=0.1, steps=10)
