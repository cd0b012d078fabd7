"""Two-layer MLP structure operator: analytic vs autodiff, truncation order, scale."""

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from helpers import loglog_slope
from nqf.errors import NormalFormError
from nqf.modules import from_module, mlp_units
from nqf.networks import TwoLayerMLP
from nqf.structure import get_activation, mlp

DT = torch.float64
ACTS = ["tanh", "sin", "erf", "gelu", "softplus-centred", "sigmoid", "linear"]
# Exact truncation order of f(sW) − f_NF(sW): the first term beyond the normal form is
# Σ_i a_i σ''(0)/2 (u_i·x)², cubic in s, unless σ''(0) = 0, then the quartic σ'''(0) term leads.
ORDER = {"tanh": 4, "sin": 4, "erf": 4, "gelu": 3, "softplus-centred": 3, "sigmoid": 4}


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("shape", [(6, 1, 1, False), (5, 4, 3, True), (3, 2, 1, True), (8, 3, 2, False)])
def test_analytic_equals_autodiff(act, shape):
    N, D, C, bias = shape
    X = torch.randn(N, D, dtype=DT)
    op = mlp(X, act, bias=bias, n_outputs=C)
    net = TwoLayerMLP(D, 3, C, act, bias)
    auto = from_module(net, net.units, X)
    assert op.p == auto.p == C + D + int(bias)
    torch.testing.assert_close(op.dense(), auto.dense(), rtol=0, atol=1e-10)
    torch.testing.assert_close(op.offset, auto.offset, rtol=0, atol=1e-12)
    assert op.satisfies_zgz == auto.satisfies_zgz == (act != "sigmoid")
    if act == "sigmoid":
        torch.testing.assert_close(op.linear, auto.linear, rtol=0, atol=1e-12)
        assert auto.cross is None  # additive over units: B = 0


def test_sequential_layout_matches_analytic():
    D, m, C = 4, 6, 2
    seq = torch.nn.Sequential(torch.nn.Linear(D, m, dtype=DT), torch.nn.Tanh(), torch.nn.Linear(m, C, dtype=DT))
    X = torch.randn(9, D, dtype=DT)
    auto = from_module(seq, mlp_units(seq), X)  # readout bias fixed: enters f(0) only
    op = mlp(X, "tanh", bias=True, n_outputs=C)
    torch.testing.assert_close(op.dense(), auto.dense(), rtol=0, atol=1e-10)
    torch.testing.assert_close(auto.offset, seq[2].bias.detach().expand(9, C), rtol=0, atol=1e-12)


def test_callable_activation():
    X = torch.randn(5, 3, dtype=DT)
    a = get_activation(lambda z: torch.sin(2 * z))
    assert a.s0 == 0 and math.isclose(a.s1, 2.0) and abs(a.s2) < 1e-12
    torch.testing.assert_close(mlp(X, lambda z: torch.sin(2 * z)).dense(), 2 * mlp(X, "sin").dense())
    with pytest.raises(NormalFormError, match="not smooth at 0"):
        mlp(X, torch.relu)
    with pytest.raises(NormalFormError, match="needs a C³ activation"):
        mlp(X, "relu")
    with pytest.raises(ValueError, match="`activation` must be one of"):
        mlp(X, "swishy")


@pytest.mark.parametrize("act", sorted(ORDER))
def test_truncation_order(act):
    """|f(sW) − f_NF(sW)| ~ s^order, with the order derived from σ''(0)."""
    D, C, m = 3, 2, 5
    X = torch.randn(10, D, dtype=DT)
    op = mlp(X, act, bias=True, n_outputs=C)
    net = TwoLayerMLP(D, m, C, act, bias=True)
    W = torch.randn(op.p, m, dtype=DT)
    s_grid = np.geomspace(3e-2, 3e-3, 5)
    errs = []
    for s in s_grid:
        net.units.set_W(net, s * W)
        with torch.no_grad():
            f = net(X)
        errs.append(float((f - op.predict(s * s * W @ W.T, s * W.sum(1))).norm()))
    slope = loglog_slope(s_grid, errs)
    assert abs(slope - ORDER[act]) < 0.3, (act, slope, errs)


def test_linear_network_is_exactly_quadratic():
    X = torch.randn(7, 3, dtype=DT)
    op = mlp(X, "linear", n_outputs=2)
    net = TwoLayerMLP(3, 4, 2, "linear")
    W = torch.randn(op.p, 4, dtype=DT)
    net.units.set_W(net, W)
    with torch.no_grad():
        torch.testing.assert_close(net(X), op(W @ W.T), rtol=1e-13, atol=1e-13)


def test_set_get_W_roundtrip():
    net = TwoLayerMLP(3, 4, 2, "tanh", bias=True)
    W = torch.randn(2 + 3 + 1, 4, dtype=DT)
    net.units.set_W(net, W)
    torch.testing.assert_close(net.units.get_W(net), W)
    torch.testing.assert_close(net.readout.weight.detach(), W[:2])
    torch.testing.assert_close(net.input.bias.detach(), W[5])


def test_never_materialises_dense_at_scale():
    """N = 200 000, D = 512: op(M) and op.adjoint(R) in seconds and under 2 GB peak memory.

    A dense (N, p, p) float64 array would need 200000 · 513² · 8 B ≈ 421 GB.  The
    input itself is 0.82 GB; run in a fresh process and read its peak RSS.
    """
    code = textwrap.dedent("""
        import resource, time, torch
        from nqf.structure import mlp
        torch.manual_seed(0)
        N, D = 200_000, 512
        X = torch.randn(N, D, dtype=torch.float64)
        op = mlp(X, "tanh")
        M = torch.randn(op.p, op.p, dtype=torch.float64)
        t0 = time.perf_counter()
        f = op(M)
        G = op.adjoint(f)
        dt = time.perf_counter() - t0
        # spot check against the definition Tr[M A(x_n)] = σ'(0) · Σ_j sym(M)[0, 1+j] x_nj
        Ms = 0.5 * (M + M.T)
        assert torch.allclose(f[:3], X[:3] @ Ms[0, 1:]), "wrong values"
        assert torch.allclose(G[0, 1:], 0.5 * (f @ X)), "wrong adjoint"
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"{dt:.3f} {peak:.3f}")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seconds, peak_gb = map(float, out.stdout.split())
    assert seconds < 10.0, seconds
    assert peak_gb < 2.0, peak_gb
