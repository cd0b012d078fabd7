"""StructureOperator: dense vs structured, adjoint identity, validation."""

import math

import pytest
import torch

from nqf.errors import NonFiniteError, ShapeError
from nqf.structure import BilinearStructure, DenseStructure, OneHotKronKernel, mlp
from nqf.structure._bilinear import DenseKernel

DT = torch.float64


def _sym(p, g=None):
    M = torch.randn(p, p, dtype=DT, generator=g)
    return M + M.T


def _operators():
    g = torch.Generator().manual_seed(1)
    ops = []
    for N, D, C, bias in [(5, 3, 1, False), (7, 1, 2, True), (4, 6, 3, False), (1, 2, 1, True)]:
        X = torch.randn(N, D, dtype=DT, generator=g)
        ops.append(mlp(X, "tanh", bias=bias, n_outputs=C))
    A = torch.randn(6, 2, 5, 5, dtype=DT, generator=g)
    ops.append(DenseStructure(A + A.transpose(-1, -2)))
    K = torch.randn(4, 3, 2, dtype=DT, generator=g)
    ops.append(BilinearStructure(6, slice(3, 6), slice(0, 2), DenseKernel(K)))
    F = torch.randn(5, 3, 4, dtype=DT, generator=g)
    ops.append(BilinearStructure(2 * 3 + 5, slice(0, 6), slice(6, 11), OneHotKronKernel(F, 2, 0.7, True)))
    return ops


@pytest.mark.parametrize("op", _operators(), ids=lambda o: repr(o))
def test_adjoint_identity_and_dense(op):
    g = torch.Generator().manual_seed(2)
    M = _sym(op.p, g)
    shape = (op.n_samples,) if op.n_outputs == 1 else (op.n_samples, op.n_outputs)
    R = torch.randn(*shape, dtype=DT, generator=g)
    lhs = float((op(M) * R).sum())
    Astar = op.adjoint(R)
    rhs = float((M * Astar).sum())
    assert abs(lhs - rhs) <= 1e-13 * (abs(lhs) + float(M.abs().sum() * Astar.abs().max()))
    assert torch.allclose(Astar, Astar.T, atol=0, rtol=0)
    A = op.dense()
    eq = "nij,ij->n" if op.n_outputs == 1 else "ncij,ij->nc"
    torch.testing.assert_close(op(M), torch.einsum(eq, A, M), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(A, A.transpose(-1, -2), rtol=0, atol=0)


def test_only_symmetric_part_of_M_matters():
    op = _operators()[2]
    M = torch.randn(op.p, op.p, dtype=DT)
    torch.testing.assert_close(op(M), op(0.5 * (M + M.T)))
    torch.testing.assert_close(op(M), op(M.T))


def test_take_selects_samples():
    for op in _operators():
        idx = torch.tensor([0, op.n_samples - 1])
        sub = op.take(idx)
        M = _sym(op.p)
        torch.testing.assert_close(sub(M), op(M)[idx])
        assert sub.n_samples == 2


def test_float32_matches_float64():
    op = _operators()[1]
    M = _sym(op.p)
    o32 = op.to(torch.float32)
    assert o32.dtype == torch.float32
    torch.testing.assert_close(o32(M.float()).double(), op(M), rtol=1e-5, atol=1e-5)


def test_linear_term_in_predict():
    X = torch.randn(6, 3, dtype=DT)
    op = mlp(X, "sigmoid", n_outputs=2)
    assert not op.satisfies_zgz
    W = 0.1 * torch.randn(op.p, 4, dtype=DT)
    mu = W.sum(1)
    # sigmoid(0) = 1/2: the linear term adds (1/2) Σ_i a_ic
    expect = op(W @ W.T) + 0.5 * mu[:2][None, :]
    torch.testing.assert_close(op.predict(W @ W.T, mu), expect)
    with pytest.raises(ValueError, match="`mu`"):
        op.predict(W @ W.T)


def test_bad_inputs():
    op = _operators()[0]
    assert op.p == 4
    with pytest.raises(ShapeError, match=r"`M` must have shape \(4, 4\); found \(5, 5\)"):
        op(torch.zeros(5, 5, dtype=DT))
    with pytest.raises(ShapeError, match="`M` must have 2 dimensions"):
        op(torch.zeros(5, dtype=DT))
    M = torch.zeros(op.p, op.p, dtype=DT)
    M[0, 1] = math.nan
    with pytest.raises(NonFiniteError, match="`M` must be finite"):
        op(M)
    with pytest.raises(ShapeError, match="`R` must have shape"):
        op.adjoint(torch.zeros(op.n_samples + 1, dtype=DT))
    vec = _operators()[1]
    with pytest.raises(ShapeError, match="`R` must have shape"):
        vec.adjoint(torch.zeros(vec.n_samples, dtype=DT))
    with pytest.raises(NonFiniteError, match="`R` must be finite"):
        op.adjoint(torch.full((op.n_samples,), math.inf, dtype=DT))
    with pytest.raises(ValueError, match="`A` must be symmetric"):
        DenseStructure(torch.randn(3, 4, 4, dtype=DT))
    with pytest.raises(ShapeError, match="`A` must have"):
        DenseStructure(torch.randn(3, 4, 5, dtype=DT))
    with pytest.raises(TypeError, match="`A` must be a real floating array"):
        DenseStructure(torch.ones(2, 3, 3, dtype=torch.bool))
    with pytest.raises(ShapeError, match="`index` must lie in"):
        op.take([0, op.n_samples])
    with pytest.raises(ShapeError, match="`X` must have 2 dimensions"):
        mlp(torch.zeros(3, dtype=DT))
    with pytest.raises(NonFiniteError, match="`X` must be finite"):
        mlp(torch.tensor([[1.0, math.nan]], dtype=DT))
    with pytest.raises(ValueError, match="`n_outputs` must be a positive integer"):
        mlp(torch.zeros(3, 2, dtype=DT), n_outputs=0)
