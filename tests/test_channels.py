"""Channels inside a unit (``nqf.structure.channel_split``): an attention head is ``d_h`` value–output channels
at second order, and ``nqf.predict`` predicts the channels' NQF.

Independent truth: the operator of the heads themselves (their own kernel, and the dense structure matrices),
and the gradient flow of the heads' order parameter ``M = W Wᵀ`` (``p × p``, ``m = 2`` heads) from ``W(0)``
(``nqf.dynamics.gradient_flow``, DOP853 at rtol 1e-10), against which the channels' prediction is timed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nqf
from nqf.curves import compare_staircase
from nqf.dynamics import gradient_flow
from nqf.errors import NormalFormError, ShapeError
from nqf.reductions import predict
from nqf.structure import (
    ChannelStructure,
    DenseStructure,
    ReadoutStructure,
    channel_split,
    mlp,
    multi_head_attention,
    qk_attention,
)

DT = torch.float64
EPS = 1e-6


def _tokens(seed=0, N=200, T=4, D=6):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, T, D, generator=g, dtype=DT) @ (torch.eye(D) + 0.3 * torch.ones(D, D)).to(DT)
    return X / X.mean(1).std(0), g


@pytest.mark.parametrize("bias", [False, True])
def test_the_heads_operator_equals_the_channels_on_the_reduced_order_parameter(bias):
    """``Tr[M A] = Tr[M' A']`` and ``𝒜*`` on channel ``i``'s block is ``𝒜'*``, for any symmetric ``M`` (not only
    ``W Wᵀ``): the heads' own kernel and their dense structure matrices against the channel operator."""
    X, g = _tokens()
    op = multi_head_attention(X, 3, d_key=2, n_outputs=4, bias=bias)
    split = channel_split(op)
    assert split.k == 3 and split.op.p == 4 + 6 + (1 if bias else 0)
    M = torch.randn(op.p, op.p, generator=g, dtype=DT)
    M = M + M.T
    want = torch.einsum("ncij,ij->nc", op.dense(), M)
    torch.testing.assert_close(split.op(split.reduce(M)), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(op(M), want, rtol=1e-12, atol=1e-12)
    R = torch.randn(X.shape[0], 4, generator=g, dtype=DT)
    G, Gc = op.adjoint(R), split.op.adjoint(R)
    for i in range(split.k):
        torch.testing.assert_close(G[split.index[i]][:, split.index[i]], Gc, rtol=1e-12, atol=1e-12)
    W = torch.randn(op.p, 2, generator=g, dtype=DT)
    Wc = split.units(W)
    assert Wc.shape == (split.op.p, 6)
    torch.testing.assert_close(Wc @ Wc.T, split.reduce(W @ W.T), rtol=1e-12, atol=1e-12)


def test_query_key_channels_and_a_readout_split_too_and_an_mlp_does_not():
    X, g = _tokens(1, N=40, T=3, D=4)
    V = torch.randn(2, 4, generator=g, dtype=DT)
    op = qk_attention(X, V, d_key=3, n_heads=2)
    J = torch.randn(40, 5, 2, generator=g, dtype=DT)
    for o in (op, ReadoutStructure(op, J)):
        split = channel_split(o)
        assert split.k == 3 and split.op.p == 8
        M = torch.randn(o.p, o.p, generator=g, dtype=DT)
        M = M + M.T
        torch.testing.assert_close(split.op(split.reduce(M)), torch.einsum("ncij,ij->nc", o.dense(), M))
    assert channel_split(mlp(X[:, 0], "tanh", n_outputs=2)) is None
    assert channel_split(DenseStructure(op.dense())) is None


@pytest.fixture(scope="module")
def heads():
    """Two heads of dimension 4 on correlated tokens, a rank-3 linear teacher of the token mean: the channels'
    NQF (8 channels, p' = 9) has three drops; with the heads as units the search sees one."""
    X, g = _tokens()
    V = torch.linalg.qr(torch.randn(6, 3, generator=g, dtype=DT))[0]
    Y = X.mean(1) @ V @ torch.diag(torch.tensor([2.0, 1.0, 0.5], dtype=DT))
    op = multi_head_attention(X, 4, n_outputs=3)
    W0 = torch.randn(op.p, 2, generator=g, dtype=DT) * (EPS / op.p) ** 0.5
    st = predict(op, Y, EPS, M0=W0 @ W0.T, max_rank=2, subspace=True)
    T = 1.3 * float(st.times[-1])
    flow = gradient_flow(op, Y, W0=W0, t_span=(0, T), t_eval=np.linspace(0, T, 20001), method="DOP853", rtol=1e-10)
    return op, Y, W0, st, flow


def test_the_channels_prediction_times_the_heads_flow(heads):
    """Every drop of the heads' own flow within 0.1 % (measured ≤ 1e-7: the channels' span is the whole p' = 9,
    so the subspace flow is the exact channel flow; 0.1 % is the reference grid's resolution at drop 1)."""
    op, Y, W0, st, flow = heads
    assert st.n_drops == 3 and any(n.startswith("channels:") for n in st.notes) and st.p == 9
    cmp = compare_staircase(flow.t.numpy(), flow.loss.numpy(), st)
    assert np.all(np.isfinite(cmp.times_measured))
    assert float(np.max(np.abs(cmp.time_errors))) < 1e-3
    assert float(np.max(np.abs(cmp.level_errors[:-1]))) < 0.05  # the plateaus' levels (the last is ~0)


def test_planted_errors_fail_the_check(heads):
    """The heads as units (the dense operator, no split: the old prediction) see one drop straight to the bottom
    where the flow has three; a start 10× too large moves every drop by more than 1 %."""
    op, Y, W0, st, flow = heads
    old = predict(DenseStructure(op.dense()), Y, EPS, M0=W0 @ W0.T, max_rank=2, subspace=True)
    assert old.n_drops == 1
    cmp_old = compare_staircase(flow.t.numpy(), flow.loss.numpy(), old)
    assert float(np.max(np.abs(cmp_old.level_errors[1:]))) > 1.0  # lands far below the first plateau
    wrong = predict(op, Y, EPS, M0=10 * W0 @ W0.T, max_rank=2, subspace=True)
    cmp = compare_staircase(flow.t.numpy(), flow.loss.numpy(), wrong)
    assert float(np.min(np.abs(cmp.time_errors))) > 0.01


def test_channel_structure_products_agree_with_its_dense_matrices():
    """Every product of a ChannelStructure (forward, adjoint, the factored paths) against the contraction of its
    structure matrices, assembled independently here from the channel's dense matrices block by block."""
    g = torch.Generator().manual_seed(5)
    X = torch.randn(30, 4, generator=g, dtype=DT)
    ch = mlp(X, "tanh", n_outputs=2)  # p' = 6
    perm = torch.randperm(20, generator=g)
    index = perm[:18].reshape(3, 6)  # 3 channels in a unit of 20 coordinates, 2 in none
    op = ChannelStructure(ch, index, 20)
    A = torch.zeros(30, 2, 20, 20, dtype=DT)
    for i in range(3):
        A[:, :, index[i][:, None], index[i][None, :]] = ch.dense()
    M = torch.randn(20, 20, generator=g, dtype=DT)
    M = M + M.T
    L = torch.randn(20, 3, generator=g, dtype=DT)
    R = torch.randn(30, 2, generator=g, dtype=DT)
    torch.testing.assert_close(op.dense(), A)
    torch.testing.assert_close(op(M), torch.einsum("ncij,ij->nc", A, M))
    torch.testing.assert_close(op.forward_factor(L), torch.einsum("ncij,ij->nc", A, L @ L.T))
    G = torch.einsum("nc,ncij->ij", R, A)
    torch.testing.assert_close(op.adjoint(R), G)
    torch.testing.assert_close(op.adjoint_apply(R, L), G @ L)
    assert channel_split(op).k == 3 and channel_split(op.take(torch.arange(5))).op.n_samples == 5
    with pytest.raises(ShapeError, match="disjoint"):
        ChannelStructure(ch, torch.zeros(2, 6, dtype=torch.int64), 20)
    with pytest.raises(NormalFormError, match="zero-gradient condition"):
        ChannelStructure(mlp(torch.randn(7, 3, dtype=DT), "sigmoid"), torch.arange(4)[None], 20)  # σ(0) ≠ 0


def test_experts_get_the_analytic_channel_operator_equal_to_their_autodiff_operator():
    """A hand-written mixture of experts (softmax gate, tanh experts with hidden biases): ``nqf analyze``'s
    operator is the experts' hidden neurons as channels, equal to the module's own autodiff operator (dense
    second derivatives, ``nqf.modules.from_module``); a gate that weights expert e by e + 1 is not that module
    is refused by the analysis's symmetry check, whatever the operator."""
    import sys
    from pathlib import Path

    from nqf.app._study._discover import analysed_module, choose_units
    from nqf.app._study._operators import structure_of
    from nqf.modules import from_module

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "zoo"))
    import models as zoo

    torch.manual_seed(2)
    net = zoo.HandMoE(5, 2, n_experts=3, hidden=3).to(DT)
    found = choose_units(net)
    module = analysed_module(net, found)
    X = torch.randn(12, 5, dtype=DT)
    op, f0, how = structure_of(module, found, X)
    assert how == "analytic experts" and channel_split(op).k == 3 and channel_split(op).op.p == 2 + 5 + 1
    auto = from_module(module, found.layout, X, matrix_free=False)
    torch.testing.assert_close(op.dense(), auto.dense(), rtol=1e-10, atol=1e-12)

    class Weighted(zoo.HandMoE):
        def forward(self, x):
            g = torch.softmax(self.gate(x), dim=-1)
            return sum((e + 1) * g[:, e : e + 1] * ex(x) for e, ex in enumerate(self.experts))

    torch.manual_seed(2)
    odd = Weighted(5, 2, n_experts=3, hidden=3).to(DT)
    with pytest.raises(NormalFormError, match="not interchangeable"):  # the analysis's symmetry check refuses it
        nqf.analyze(odd, X.numpy(), torch.randn(12, 2, dtype=DT).numpy(), eps=1e-6)


def test_one_head_of_dimension_two_stops_at_the_rank_its_channels_reach():
    """Width-aware on channels: one head of dimension 2 has 2 value–output channels, so on the rank-3 teacher its
    staircase stops after 2 drops (channel rank ≤ k·m = 2), at the level the head's own flow settles on (the heads'
    order parameter from W(0) to 3 t_2: the flow approaches the level from above, the gap left below 1 % of
    what it fell in its last third, as an exponential approach at rate · T/3 ≥ ln 100 leaves).  Planted: with
    the rank bound left out the staircase goes on to a third drop below what the head reaches."""
    X, g = _tokens(seed=1)
    V = torch.linalg.qr(torch.randn(6, 3, generator=g, dtype=DT))[0]
    Y = X.mean(1) @ V @ torch.diag(torch.tensor([2.0, 1.0, 0.5], dtype=DT))
    op = multi_head_attention(X, 2, n_outputs=3)
    W0 = torch.randn(op.p, 1, generator=g, dtype=DT) * (EPS / op.p) ** 0.5
    st = predict(op, Y, EPS, M0=W0 @ W0.T, max_rank=1)
    assert st.n_drops == 2 and channel_split(op).rank(1) == 2
    T = 3.0 * float(st.times[-1])
    flow = gradient_flow(op, Y, W0=W0, t_span=(0, T), t_eval=np.linspace(0, T, 2001), method="DOP853", rtol=1e-10)
    final, earlier, level = float(flow.loss[-1]), float(flow.loss[-668]), float(st.levels[-1])
    assert 0.0 <= final - level < 0.01 * (earlier - final)  # measured 3e-7 against 1.7e-3
    unbounded = predict(op, Y, EPS, M0=W0 @ W0.T)
    assert unbounded.n_drops == 3 and float(unbounded.levels[-1]) < 0.9 * final
