"""Factorization, matrix sensing and the two-layer linear network: analytic A vs autodiff of the real modules.

All three modules are exactly quadratic in their units, so besides the Hessian
comparison the normal form must reproduce the real module to round-off at any
weight scale (no truncation error).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nqf.errors import NonFiniteError, ShapeError
from nqf.modules._autodiff import from_module
from nqf.networks._factorization import Factorization, MatrixSensing
from nqf.networks._mlp import TwoLayerMLP
from nqf.structure._bilinear import BilinearStructure
from nqf.structure._factorization import SensingStructure, factorization, linear_network, matrix_sensing

DT = torch.float64


def _assert_matches(op, ref, tol=1e-10):
    """Analytic operator ``op`` equals the autodiff operator ``ref`` (A, offset, no linear/cross term)."""
    A, Ar = op.dense(), ref.dense()
    assert A.shape == Ar.shape
    scale = max(1.0, float(Ar.abs().max()))
    assert float((A - Ar).abs().max()) <= tol * scale
    assert float(ref.offset.abs().max()) <= tol * scale
    assert float(op.offset.abs().max()) == 0.0
    assert ref.satisfies_zgz and op.satisfies_zgz


def _check_adjoint_and_dense(op, gen):
    """⟨𝒜(M), R⟩ = ⟨M, 𝒜*(R)⟩ and both maps agree with the dense matrices."""
    p, N, C = op.p, op.n_samples, op.n_outputs
    for _ in range(3):
        M = torch.randn(p, p, generator=gen, dtype=DT)
        M = M + M.T
        R = torch.randn(N, C, generator=gen, dtype=DT)
        if C == 1:
            R = R[:, 0]
        y = op(M)
        G = op.adjoint(R)
        lhs, rhs = float((y * R).sum()), float((M * G).sum())
        scale = float((y.abs() * R.abs()).sum()) + float((M.abs() * G.abs()).sum())
        assert abs(lhs - rhs) <= 1e-12 * scale
        assert torch.allclose(G, G.T, rtol=0, atol=1e-14 * float(G.abs().max()))
        D = op.dense()
        expect = (N, p, p) if C == 1 else (N, C, p, p)
        assert D.shape == expect
        y_dense = torch.einsum("...ij,ij->...", D, M)
        assert float((y_dense - y).abs().max()) <= 1e-12 * max(1.0, float(y.abs().max()))
        G_dense = torch.einsum("n...,n...ij->ij", R, D)
        assert float((G_dense - G).abs().max()) <= 1e-12 * max(1.0, float(G.abs().max()))


# ------------------------------------------------------------------ shapes swept (seeded)
def _fact_cases():
    rng = np.random.default_rng(11)
    cases = [(1, 1, 1, None), (4, 1, 5, None), (3, 6, 1, 2), (2, 3, 3, 1), (5, 2, 4, 3)]
    for _ in range(4):
        N, d1, d2 = (int(v) for v in rng.integers(1, 6, size=3))
        C = None if rng.random() < 0.5 else int(rng.integers(1, 4))
        cases.append((N, d1, d2, C))
    return cases


@pytest.mark.parametrize("N,d1,d2,C", _fact_cases())
def test_factorization_matches_autodiff(N, d1, d2, C):
    gen = torch.Generator().manual_seed(N * 100 + d1 * 10 + d2)
    shape = (N, d1, d2) if C is None else (N, C, d1, d2)
    X = torch.randn(*shape, generator=gen, dtype=DT)
    torch.manual_seed(0)
    net = Factorization(d1, d2, width=3)
    op = factorization(X)
    assert isinstance(op, BilinearStructure)
    assert op.p == d1 + d2 and op.n_samples == N and op.n_outputs == (1 if C is None else C)
    _assert_matches(op, from_module(net, net.units, X))
    _check_adjoint_and_dense(op, gen)


def _sensing_cases():
    rng = np.random.default_rng(12)
    cases = [(1, 1, None), (3, 1, 2), (4, 5, None), (2, 3, 1), (3, 4, 3)]
    for _ in range(4):
        N, p = (int(v) for v in rng.integers(1, 6, size=2))
        C = None if rng.random() < 0.5 else int(rng.integers(1, 4))
        cases.append((N, p, C))
    return cases


@pytest.mark.parametrize("N,p,C", _sensing_cases())
def test_matrix_sensing_matches_autodiff(N, p, C):
    gen = torch.Generator().manual_seed(N * 10 + p)
    shape = (N, p, p) if C is None else (N, C, p, p)
    X = torch.randn(*shape, generator=gen, dtype=DT)  # not symmetric: only sym(X) may enter A
    torch.manual_seed(1)
    net = MatrixSensing(p, width=3)
    op = matrix_sensing(X)
    assert isinstance(op, SensingStructure)
    assert op.X.data_ptr() == X.data_ptr()  # stores X itself, no symmetrised copy
    _assert_matches(op, from_module(net, net.units, X))
    _check_adjoint_and_dense(op, gen)
    # sym(X) is the closed form, independently of the module
    Xc = X if C is not None else X[:, None]
    want = 0.5 * (Xc + Xc.transpose(-1, -2))
    assert torch.equal(op._dense(), want)


@pytest.mark.parametrize("N,D,C", [(1, 1, 1), (4, 3, 1), (5, 2, 3), (3, 6, 2)])
def test_linear_network_matches_autodiff(N, D, C):
    gen = torch.Generator().manual_seed(N + 7 * D + 31 * C)
    X = torch.randn(N, D, generator=gen, dtype=DT)
    torch.manual_seed(2)
    net = TwoLayerMLP(D, 3, C, activation="linear")
    op = linear_network(X, n_outputs=C)
    assert op.p == C + D
    _assert_matches(op, from_module(net, net.units, X))
    _check_adjoint_and_dense(op, gen)


# ------------------------------------------------------------------ exactly quadratic: no truncation error
def _normal_form_error(net, op, X, s):
    layout = net.units
    W0 = layout.get_W(net)
    layout.set_W(net, s * W0)
    with torch.no_grad():
        f = net(X)
    layout.set_W(net, W0)
    Ws = s * W0
    nf = op.predict(Ws @ Ws.T)
    f = f.reshape(nf.shape)
    return float((f - nf).norm()), float(f.norm())


@pytest.mark.parametrize("family", ["factorization", "factorization-vector", "sensing", "linear"])
def test_exactly_quadratic_at_every_scale(family):
    """The truncation error is at round-off for every s (these modules have no cubic term)."""
    gen = torch.Generator().manual_seed(5)
    torch.manual_seed(5)
    if family == "factorization":
        X = torch.randn(6, 3, 4, generator=gen, dtype=DT)
        net, op = Factorization(3, 4, 5, init_scale=2.0), factorization(X)
    elif family == "factorization-vector":
        X = torch.randn(6, 2, 3, 4, generator=gen, dtype=DT)
        net, op = Factorization(3, 4, 5, init_scale=2.0), factorization(X)
    elif family == "sensing":
        X = torch.randn(6, 4, 4, generator=gen, dtype=DT)
        net, op = MatrixSensing(4, 5, init_scale=2.0), matrix_sensing(X)
    else:
        X = torch.randn(6, 4, generator=gen, dtype=DT)
        net, op = TwoLayerMLP(4, 5, 2, activation="linear"), linear_network(X, 2)
    for s in np.geomspace(10.0, 1e-3, 5):
        err, size = _normal_form_error(net, op, X, float(s))
        assert size > 0
        assert err <= 1e-13 * size, (s, err, size)


def test_sensing_take_and_to():
    gen = torch.Generator().manual_seed(3)
    X = torch.randn(5, 2, 3, 3, generator=gen, dtype=DT)
    op = matrix_sensing(X)
    sub = op.take([4, 1])
    assert torch.equal(sub.dense(), op.dense()[[4, 1]])
    op32 = op.to(torch.float32)
    assert op32.dtype == torch.float32 and op32.dense().dtype == torch.float32
    M = torch.randn(3, 3, generator=gen, dtype=DT)
    M = M + M.T
    assert torch.allclose(op32(M.float()).double(), op(M), rtol=1e-5, atol=1e-5)


def test_dtype_argument_and_integer_input():
    X = np.arange(2 * 3 * 3).reshape(2, 3, 3)  # integer array → float64
    op = matrix_sensing(X)
    assert op.dtype == torch.float64
    assert factorization(X, dtype=torch.float32).dtype == torch.float32


# ------------------------------------------------------------------ bad input
def test_bad_shapes():
    with pytest.raises(ShapeError, match=r"`X` must have 3 or 4 dimensions"):
        factorization(torch.zeros(3, 4, dtype=DT))
    with pytest.raises(ShapeError, match=r"`X` must have 3 or 4 dimensions"):
        matrix_sensing(torch.zeros(2, 1, 3, 3, 3, dtype=DT))
    with pytest.raises(ShapeError, match=r"`X` must hold square matrices"):
        matrix_sensing(torch.zeros(2, 3, 4, dtype=DT))
    with pytest.raises(ShapeError, match=r"every size ≥ 1"):
        factorization(torch.zeros(0, 3, 4, dtype=DT))
    with pytest.raises(ShapeError, match=r"every size ≥ 1"):
        matrix_sensing(torch.zeros(2, 0, 0, dtype=DT))
    with pytest.raises(ShapeError, match=r"`X` must have 2 dimensions"):
        linear_network(torch.zeros(2, 3, 4, dtype=DT))
    with pytest.raises(ShapeError, match=r"`X` must have shape \(B, 3, 4\)"):
        Factorization(3, 4, 2)(torch.zeros(2, 4, 3, dtype=DT))
    with pytest.raises(ShapeError, match=r"`X` must have shape \(B, 3, 3\)"):
        MatrixSensing(3, 2)(torch.zeros(2, 3, 4, dtype=DT))
    with pytest.raises(ValueError, match=r"`width` must be a positive integer"):
        Factorization(3, 4, 0)
    with pytest.raises(ValueError, match=r"`d` must be a positive integer"):
        MatrixSensing(2.5, 3)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_input(bad):
    X = torch.randn(3, 2, 2, dtype=DT)
    X[1, 0, 1] = bad
    with pytest.raises(NonFiniteError, match=r"`X` must be finite; found 1 NaN/inf"):
        factorization(X)
    with pytest.raises(NonFiniteError, match=r"`X` must be finite"):
        matrix_sensing(X)
    with pytest.raises(NonFiniteError, match=r"`X` must be finite"):
        linear_network(X[:, 0])


def test_operator_rejects_wrong_order_parameter():
    op = factorization(torch.randn(3, 2, 4, dtype=DT))
    with pytest.raises(ShapeError, match=r"`M` must have shape \(6, 6\)"):
        op(torch.zeros(5, 5, dtype=DT))
    op = matrix_sensing(torch.randn(3, 2, 4, 4, dtype=DT))
    with pytest.raises(ShapeError, match=r"`R` must have shape \(3, 2\)"):
        op.adjoint(torch.zeros(3, dtype=DT))
