"""Mixture of experts with a softmax gate: analytic operator vs autodiff, weak ZGZ, truncation order.

Exact truncation order (derived in nqf.structure._moe): 3 — the gate deviation (1/E)(G_e − Ḡ)·x times the
expert's linear part a_e σ'(0) u_e·x is cubic and generically non-zero, even for tanh experts.
"""

import math

import numpy as np
import pytest
import torch
from torch.func import functional_call, hessian

from helpers import loglog_slope
from nqf.errors import NonFiniteError, NormalFormError, ShapeError
from nqf.modules._autodiff import from_module
from nqf.networks._moe import MixtureOfExperts
from nqf.structure._mlp import mlp
from nqf.structure._moe import mixture_of_experts

DT = torch.float64


@pytest.mark.parametrize("act", ["tanh", "sin", "gelu", "softplus-centred", "sigmoid"])
@pytest.mark.parametrize("shape", [(6, 3, 3, 2), (5, 1, 2, 1), (4, 2, 4, 3), (3, 4, 2, 1)])
def test_analytic_equals_autodiff(act, shape):
    N, D, E, C = shape
    X = torch.randn(N, D, dtype=DT)
    net = MixtureOfExperts(D, E, C, act)
    auto = from_module(net, net.units, X)
    op = mixture_of_experts(X, E, act, C)
    assert op.p == auto.p == C + 2 * D
    torch.testing.assert_close(op.dense(), auto.dense(), rtol=0, atol=1e-10)
    torch.testing.assert_close(op.offset, auto.offset, rtol=0, atol=1e-12)
    if act == "sigmoid":  # σ(0) ≠ 0: linear term and cross-unit a–G term
        assert not op.satisfies_zgz and not auto.satisfies_zgz
        torch.testing.assert_close(op.linear, auto.linear, rtol=0, atol=1e-12)
        torch.testing.assert_close(op.cross.dense(), auto.cross.dense(), rtol=0, atol=1e-10)
        assert float(auto.cross.dense().abs().max()) > 1e-3
    else:  # weak zero-gradient condition: gradient and cross-unit Hessian blocks vanish at W = 0
        assert op.satisfies_zgz and auto.satisfies_zgz


@pytest.mark.parametrize("E", [2, 3, 5])
def test_A_is_mlp_over_E_and_gate_rows_do_not_enter(E):
    N, D, C = 7, 3, 2
    X = torch.randn(N, D, dtype=DT)
    A = mixture_of_experts(X, E, "tanh", C).dense()
    A_mlp = mlp(X, "tanh", n_outputs=C).dense()  # p = C + D
    torch.testing.assert_close(A[..., : C + D, : C + D], A_mlp / E, rtol=1e-15, atol=0)
    assert float(A[..., C + D :, :].abs().max()) == 0.0


def test_strong_zgz_fails_but_weak_holds():
    """A gate row at zero gets gradient once another expert is non-zero (docs/theory.md §1)."""
    D, E, C = 3, 3, 1
    net = MixtureOfExperts(D, E, C, "tanh")
    x = torch.randn(1, D, dtype=DT)
    with torch.no_grad():
        net.gate.weight[0].zero_()  # expert 0 fully at zero ...
        net.input.weight[0].zero_()
        net.readout.weight[:, 0].zero_()
    out = net(x).sum()
    g_gate0 = torch.autograd.grad(out, net.gate.weight)[0][0]
    assert float(g_gate0.abs().max()) > 1e-3  # ... yet its gate row gets gradient: strong ZGZ fails
    # weak form: at W = 0 the full Hessian's cross-unit blocks vanish
    lay = net.units
    params = {k: v.detach() for k, v in net.named_parameters()}
    zero = lay.zero_units(params)
    p = lay.p(params)

    def f(w):
        P = lay.resolve(params).place(zero, {i: w[i * p : (i + 1) * p] for i in range(E)})
        return functional_call(net, P, (x,)).sum()

    H = hessian(f)(torch.zeros(E * p, dtype=DT))
    for i in range(E):
        for j in range(E):
            if i != j:
                assert float(H[i * p : (i + 1) * p, j * p : (j + 1) * p].abs().max()) == 0.0
    assert float(H[:p, :p].abs().max()) > 0.1


def test_adjoint_dense_take():
    X = torch.randn(9, 4, dtype=DT)
    for act, C in (("tanh", 3), ("sigmoid", 2), ("gelu", 1)):
        op = mixture_of_experts(X, 3, act, C)
        M = torch.randn(op.p, op.p, dtype=DT)
        M = M + M.T
        R = torch.randn(9, C, dtype=DT)
        R = R[:, 0] if C == 1 else R
        y, G = op(M), op.adjoint(R)
        lhs, rhs = float((y * R).sum()), float((M * G).sum())
        assert abs(lhs - rhs) <= 1e-12 * (abs(lhs) + float(y.abs().sum() * R.abs().max()))
        A = op.dense()
        torch.testing.assert_close(y, torch.einsum("...ij,ij->...", A, M), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(G, torch.einsum("n...,n...ij->ij", R, A), rtol=1e-12, atol=1e-12)
        idx = [3, 1]
        sub = op.take(idx)
        torch.testing.assert_close(sub.dense(), A[idx], rtol=0, atol=0)
        if op.linear is not None:
            mu = torch.randn(op.p, dtype=DT)
            torch.testing.assert_close(sub.predict(M, mu), op.predict(M, mu)[idx], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("act,order", [("tanh", 3), ("sin", 3), ("gelu", 3), ("sigmoid", 3)])
def test_truncation_order(act, order):
    D, E, C = 3, 4, 2
    X = torch.randn(8, D, dtype=DT)
    net = MixtureOfExperts(D, E, C, act)
    op = mixture_of_experts(X, E, act, C)
    lay = net.units
    W = torch.randn(op.p, E, dtype=DT) / math.sqrt(E)
    scales = np.geomspace(0.1, 0.01, 5)
    errs = []
    for s in scales:
        lay.set_W(net, s * W)
        with torch.no_grad():
            f = net(X)
        errs.append(float((f - op.predict(s**2 * W @ W.T, s * W.sum(1))).norm()))
    slope = loglog_slope(scales, errs)
    assert abs(slope - order) < 0.3, (slope, errs)


def test_bad_input():
    X = torch.randn(5, 3, dtype=DT)
    with pytest.raises(NormalFormError, match="not three times differentiable"):
        mixture_of_experts(X, 2, "relu")
    with pytest.raises(NormalFormError, match="not three times differentiable"):
        MixtureOfExperts(3, 2, 1, "relu")
    with pytest.raises(NormalFormError, match="not smooth at 0"):
        mixture_of_experts(X, 2, torch.relu)
    with pytest.raises(ShapeError, match="`X` must have 2 dimensions"):
        mixture_of_experts(X[None], 2)
    with pytest.raises(ShapeError, match=r"`X` must have shape \(N, D\)"):
        mixture_of_experts(X[:, :0], 2)
    Xn = X.clone()
    Xn[2, 0] = float("inf")
    with pytest.raises(NonFiniteError, match="`X` must be finite"):
        mixture_of_experts(Xn, 2)
    for bad in (0, -2, 2.0, True):
        with pytest.raises(ValueError, match="`n_experts` must be a positive integer"):
            mixture_of_experts(X, bad)
    with pytest.raises(ValueError, match="`n_outputs` must be a positive integer"):
        mixture_of_experts(X, 2, n_outputs=0)
    with pytest.raises(ValueError, match="`activation` must be one of"):
        mixture_of_experts(X, 2, "swishy")
    with pytest.raises(ShapeError, match=r"`x` must have shape \(B, 3\)"):
        MixtureOfExperts(3, 2)(torch.randn(4, 2, 3, dtype=DT))
