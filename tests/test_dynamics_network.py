"""The real network beside the NQF run: same conventions, and the early-time gap vs ε."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from nqf.curves._validity import validity_sweep
from nqf.dynamics import GD, SGD, Save, simulate, train_network
from nqf.modules._layouts import mlp_units
from nqf.networks._mlp import TwoLayerMLP
from nqf.structure._mlp import mlp

F64 = torch.float64


def _data(N=20, D=3, C=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, generator=g, dtype=F64)
    y = torch.stack([torch.sin(2 * X[:, 0]) + 0.5 * X[:, 1], X[:, 2] * X[:, 0]][:C], 1)
    return X, (y[:, 0] if C == 1 else y), g


@pytest.mark.parametrize("opt", [GD(0.05), SGD(0.05, batch_size=6, momentum=0.6, weight_decay=0.03)])
def test_linear_network_equals_nqf_exactly(opt):
    """A linear-activation two-layer net is exactly quadratic: network run == NQF weight form to round-off."""
    X, y, g = _data(C=2)
    net = TwoLayerMLP(3, 6, 2, "linear")
    op = mlp(X, "linear", n_outputs=2)
    W0 = 0.3 * torch.randn(op.p, 6, generator=g, dtype=F64)
    tr = train_network(net, net.units, X, y, W0=W0, optimizer=opt, save=Save(every=1), steps=300)
    q = simulate(op, y, W0=W0, optimizer=opt, save=Save(every=1), steps=300, form="weights")
    assert tr.success and torch.equal(tr.t, q.t) and torch.equal(tr.step, q.step)
    assert torch.allclose(tr.W, q.W, rtol=1e-11, atol=1e-13)
    assert torch.allclose(tr.loss, q.loss, rtol=1e-11, atol=1e-15)
    assert torch.allclose(tr.M, q.M, rtol=1e-11, atol=1e-13)
    assert torch.allclose(net.units.get_W(net), tr.W[-1])  # final weights written back


def test_only_units_are_trained_and_loss_is_autograd():
    X, y, g = _data()
    net = nn.Sequential(nn.Linear(3, 5, bias=False), nn.Tanh(), nn.Linear(5, 1, bias=True)).to(F64)
    units = mlp_units(net)
    bias0 = net[2].bias.detach().clone()
    W0 = 0.2 * torch.randn(units.get_W(net).shape, generator=g, dtype=F64)
    tr = train_network(net, units, X, y, W0=W0, optimizer=GD(0.1), save=Save(every=1), steps=5)
    assert torch.equal(net[2].bias.detach(), bias0)
    # first saved loss is the network's loss at W0 with the NQF normalisation (1/N) Σ ½ (f − y)²
    units.set_W(net, W0)
    with torch.no_grad():
        L0 = 0.5 * ((net(X)[:, 0] - y) ** 2).mean()
    assert math.isclose(float(tr.loss[0]), float(L0), rel_tol=1e-13)
    # one manual autograd GD step on the unit weights only
    Wm = units.get_W(net)
    assert torch.allclose(Wm, W0)
    net.zero_grad()
    out = net(X)[:, 0]
    L = 0.5 * ((out - y) ** 2).mean()
    L.backward()
    gW = torch.cat([net[2].weight.grad, net[0].weight.grad.T], 0)  # layout (readout, input weights)
    assert torch.allclose(tr.W[1], W0 - 0.1 * gW, rtol=1e-12, atol=1e-14)


def test_network_divergence_keeps_trajectory():
    X, y, g = _data()
    net = TwoLayerMLP(3, 4, 1, "linear")
    W0 = 0.5 * torch.randn(4, 4, generator=g, dtype=F64)
    tr = train_network(net, net.units, X, y, W0=W0, optimizer=GD(30.0), save=Save(every=1), steps=200)
    assert tr.status == -1 and "diverged at step" in tr.message and len(tr) >= 1


def _gap_sweep(net, op, X, y, Wd, lr, save_every):
    eps = [1e-5, 1e-4, 1e-3, 1e-2]
    return eps, validity_sweep(
        net, net.units, X, y, op, Wd, eps, lr=lr, steps=lambda e: int(10 / lr), early_time=0.5, save_every=save_every
    )


def test_tanh_mlp_early_gap_shrinks_with_eps():
    r"""Early-time (t = 0.5, before any switch-on) loss gap between the tanh MLP and its NQF.

    Derivation of the band: with ``W = √ε W̃`` the network is
    ``f = Tr[WWᵀA] + R₄(W)`` with ``R₄ = −⅓ Σ_i a_i (u_i·x)³ = O(ε²)`` — tanh has
    ``σ''(0) = 0``, so there is no cubic term and the remainder relative to the
    quadratic part is ``O(ε)`` (it would be ``O(ε^{1/2})`` for ``σ''(0) ≠ 0``).
    The trajectories then differ by ``δW/W = O(ε)`` over a fixed time, so
    ``|L_net − L_NQF| = O(ε²)`` while the loss drop up to that time is ``O(ε)``:
    raw gap slope 2, normalised gap slope 1 on log–log.  Bands ±0.15 allow for
    the ``O(ε)`` relative corrections at ε = 1e-2.
    """
    X, y, g = _data()
    net = TwoLayerMLP(3, 8, 1, "tanh")
    op = mlp(X, "tanh")
    Wd = torch.randn(op.p, 8, generator=g, dtype=F64) / math.sqrt(8)
    eps, sw = _gap_sweep(net, op, X, y, Wd, lr=0.05, save_every=10)
    raw = np.polyfit(np.log(eps), np.log(sw.early_gap), 1)[0]
    assert 1.85 < raw < 2.15
    assert 0.85 < sw.early_slope < 1.15
    # remainder ratio at the first saved step ∝ ε as well
    rho = [float(r.remainder_ratio[1]) for r in sw.reports]
    assert 0.9 < np.polyfit(np.log(eps), np.log(rho), 1)[0] < 1.1
    # the report shows where they separate at larger ε: a separation time exists for every ε
    assert np.all(np.isfinite(sw.separation_time))
    assert np.all(np.isfinite(sw.switch_time))


def test_qk_attention_early_gap_shrinks_with_eps():
    """Same test for query–key-only attention (its truncation error is O(‖W‖⁴) as well: same bands)."""
    attn = pytest.importorskip("nqf.networks._attention")
    sattn = pytest.importorskip("nqf.structure._attention")
    if not hasattr(attn, "QKAttention") or not hasattr(sattn, "qk_attention"):
        pytest.skip("QKAttention / qk_attention not available yet")
    g = torch.Generator().manual_seed(0)
    N, T, D, dk, H = 16, 4, 3, 2, 2
    X = torch.randn(N, T, D, generator=g, dtype=F64)
    V = torch.randn(1, D, generator=g, dtype=F64)
    y = torch.randn(N, generator=g, dtype=F64)
    net = attn.QKAttention(D, H, dk, V)
    op = sattn.qk_attention(X, V, dk, H)
    Wd = torch.randn(op.p, H, generator=g, dtype=F64)
    eps = [1e-5, 1e-4, 1e-3, 1e-2]
    sw = validity_sweep(net, net.units, X, y, op, Wd, eps, lr=0.1, steps=lambda e: 60, early_time=0.5, save_every=5)
    raw = np.polyfit(np.log(eps), np.log(sw.early_gap), 1)[0]
    assert 1.85 < raw < 2.15
    assert 0.85 < sw.early_slope < 1.15
