"""The fast paths agree with their references: ``simulate``'s two-block hot path (nqf.dynamics._fast) with the
general loop on the same operator stored densely; the default save policy's spacing of large or costly states;
``lv.limit`` (incremental factor) with the reference algorithm of benchmarks/lv_limit_reference.py."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nqf.dynamics import GD, Save, simulate
from nqf.dynamics._factored import orthogonalize_columns
from nqf.dynamics._fast import all_finite
from nqf.dynamics._save import Recorder, gram
from nqf.errors import NQFError
from nqf.reductions.lv import limit
from nqf.structure import mlp
from nqf.structure._operator import DenseStructure

F64 = torch.float64


def rel_err(A, B):
    num = (A - B).flatten(1).norm(dim=1)
    return float((num / B.flatten(1).norm(dim=1)).max())


def _mlp_problem(N=30, D=5, C=1, bias=False, act="tanh", seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, generator=g, dtype=F64) / D**0.5
    y = torch.tanh(X @ torch.randn(D, C, generator=g, dtype=F64))
    op = mlp(X, act, bias=bias, n_outputs=C)
    dense = DenseStructure(op.dense(), offset=op.offset)  # the same operator, without the two-block hot path
    return op, dense, y


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(C=2, bias=True),  # the generic kernel passes (appended one)
        dict(C=3, weight_decay=0.01),
        dict(C=2, loss="cross_entropy"),
    ],
)
def test_block_path_equals_general_loop(kw, monkeypatch):
    kw = dict(kw)
    wd, loss = kw.pop("weight_decay", 0.0), kw.pop("loss", "mse")
    op, dense, y = _mlp_problem(**kw)
    if loss == "cross_entropy":
        y = y.argmax(1).to(F64)
    M0 = 1e-3 * torch.eye(op.p, dtype=F64) + 1e-4 * torch.ones(op.p, op.p, dtype=F64)
    args = dict(M0=M0, optimizer=GD(0.2, weight_decay=wd), steps=300, save=Save(every=7), loss=loss)
    ref = simulate(dense, y, **args)
    # the hot path never applies the operator to a full factor (no p x p products): plant a failure there
    monkeypatch.setattr(op, "forward_factor", lambda L: (_ for _ in ()).throw(AssertionError("general path")))
    fast = simulate(op, y, **args)
    assert fast.success and ref.success
    assert torch.equal(fast.step, ref.step)
    assert rel_err(fast.M, ref.M) < 1e-11
    torch.testing.assert_close(fast.loss, ref.loss, rtol=1e-11, atol=0.0)
    assert float(fast.loss[-1]) < 0.9 * float(fast.loss[0])  # it trained


def test_block_path_keeps_small_directions():
    """ε = 1e-40: the columns are re-orthogonalised on the hot path as in the general loop (relative accuracy
    of the small directions of M)."""
    op, _, y = _mlp_problem(N=40, D=4, seed=3)
    X = op.kernel.F[:, 0, :].clone()
    X[:, -1] = 0.0  # the last input weight sees no data: its entry of M stays at 1e-40 (times the decay 1)
    op = mlp(X, "tanh")
    dense = DenseStructure(op.dense(), offset=op.offset)
    M0 = 1e-40 * torch.eye(op.p, dtype=F64)
    args = dict(M0=M0, optimizer=GD(0.5), steps=600, save=Save(every=600))
    fast, ref = simulate(op, y, **args), simulate(dense, y, **args)
    d = torch.diagonal(ref.M[-1])
    assert float(d.max()) > 1e-3 and float(d.min()) < 1e-30  # a direction grew from 1e-40, one stayed small
    torch.testing.assert_close(torch.diagonal(fast.M[-1]), d, rtol=1e-9, atol=0.0)  # relative, also the tiny ones
    assert rel_err(fast.M, ref.M) < 1e-11


def test_block_path_divergence_message_equals_general_loop():
    op, dense, y = _mlp_problem(N=20, D=3, seed=1)
    M0 = 0.1 * torch.eye(op.p, dtype=F64)
    fast = simulate(op, y, M0=M0, optimizer=GD(80.0), save=Save(every=1), steps=400)
    ref = simulate(dense, y, M0=M0, optimizer=GD(80.0), save=Save(every=1), steps=400)
    assert fast.status == ref.status == -1
    assert torch.equal(fast.step, ref.step)
    assert fast.message.split("curvature")[0] == ref.message.split("curvature")[0]
    assert "diverged at step" in fast.message


def test_in_place_path_divergence_message_equals_general_loop():
    """p > 256 (no re-orthogonalisation): the large block is updated in place and the factor before the last
    step is recovered by undoing that update; the curvature estimate of the message is the general loop's."""
    op, dense, y = _mlp_problem(N=12, D=300, seed=1)
    M0 = 0.1 * torch.eye(op.p, dtype=F64)
    for wd in (0.0, 0.003):
        fast = simulate(op, y, M0=M0, optimizer=GD(30.0, weight_decay=wd), save=Save(every=3), steps=400)
        ref = simulate(dense, y, M0=M0, optimizer=GD(30.0, weight_decay=wd), save=Save(every=3), steps=400)
        assert fast.status == ref.status == -1
        assert "curvature estimate" in fast.message
        assert fast.message == ref.message


def test_in_place_path_leaves_the_callers_tensors_alone():
    op, _, y = _mlp_problem(N=12, D=300, seed=4)
    # width 260 > 256 (no re-orthogonalisation, whose rotation copies): the propagated factor starts as W0 itself
    W0 = 0.1 * torch.randn(op.p, 260, generator=torch.Generator().manual_seed(0), dtype=F64)
    M0 = 1e-3 * torch.eye(op.p, dtype=F64)
    W0c, M0c = W0.clone(), M0.clone()
    simulate(op, y, W0=W0, optimizer=GD(0.2), steps=20)
    simulate(op, y, M0=M0, optimizer=GD(0.2), steps=20)
    assert torch.equal(W0, W0c) and torch.equal(M0, M0c)


def test_all_finite_and_gram():
    big = torch.full((4, 3), 1e308, dtype=F64)  # the sum overflows: tested entry by entry
    assert all_finite(big) and all_finite(torch.zeros(0, 3, dtype=F64))
    for bad in (float("inf"), float("nan"), -float("inf")):
        x = torch.ones(5, 4, dtype=F64)
        x[2, 1] = bad
        assert not all_finite(x)
    g = torch.Generator().manual_seed(0)
    for p, r in ((300, 280), (40, 40), (513, 7)):  # several row blocks, one block, a thin factor
        Ls = torch.randn(3, p, r, generator=g, dtype=F64)
        M = gram(Ls)
        assert torch.equal(M, M.transpose(1, 2))
        assert rel_err(M, Ls @ Ls.transpose(1, 2)) < 1e-14
    # a factor with at most one non-zero per row and column (εI's, a scaled permutation) beside a dense one: the
    # same numbers as the product, without it
    P = torch.eye(300, dtype=F64)[torch.randperm(300, generator=g)] * torch.randn(300, 1, generator=g, dtype=F64)
    Ls = torch.stack([P, torch.randn(300, 300, generator=g, dtype=F64), 1e-3 * torch.eye(300, dtype=F64)])
    M, ref = gram(Ls), Ls @ Ls.transpose(1, 2)
    assert torch.equal(M[0], 0.5 * (ref[0] + ref[0].T)) and torch.equal(M[2], ref[2])
    assert rel_err(M[1:2], ref[1:2]) < 1e-14 and torch.equal(M, M.transpose(1, 2))
    # the Recorder multiplies saved factors out in their own p × p slots (r ≤ p) or apart (r = p + 1)
    for r in (3, 9, 10):
        Ls = torch.randn(70, 9, r, generator=g, dtype=F64)  # more than one chunk of 64
        rec = Recorder(70)
        for k in range(70):
            rec.add(k, 0.0, M_factor=Ls[k])
        M = rec.trajectory(lr=1.0, dtype=F64, device="cpu", status=0, message="", info={}).M
        assert M is not None and M.shape == (70, 9, 9) and torch.equal(M, M.transpose(1, 2))
        assert rel_err(M, Ls @ Ls.transpose(1, 2)) < 1e-14


def test_orthogonalize_columns_numpy_path_equals_torch_rotations():
    """One CPU factor is rotated in NumPy (fewer microseconds per call), a batch in PyTorch: same rotations, so the
    same columns up to round-off — relative to each column, also for columns 1e-150 smaller than others."""
    g = torch.Generator().manual_seed(3)
    L = torch.randn(30, 20, generator=g, dtype=F64) * torch.logspace(-150, 0, 20, dtype=F64)  # graded: B · diag
    a, b = orthogonalize_columns(L), orthogonalize_columns(L[None])[0]  # NumPy, PyTorch
    na, nb = a.norm(dim=0), b.norm(dim=0)
    torch.testing.assert_close(na, nb, rtol=1e-13, atol=0.0)
    assert float(((a - b).norm(dim=0) / nb).max()) < 1e-10
    cos = (a.T @ a) / (na[:, None] * na[None])
    assert float(cos.fill_diagonal_(0).abs().max()) < 1e-14
    torch.testing.assert_close(a @ a.T, L @ L.T, rtol=1e-14, atol=0.0)


def test_default_save_policy_spaces_large_and_costly_states():
    # small states: about a thousand, as before
    assert Save().resolve(4000, state_bytes=8 * 65 * 65, save_flops=65.0**3, step_flops=3e5).every == 4
    assert Save().resolve(400).every == 1
    # large states: at most 256 MiB of them
    big = 8 * 1025 * 1025
    every = Save().resolve(10_000, state_bytes=big).every
    assert every is not None and (10_000 // every + 2) * big <= 256 * 2**20
    assert (10_000 // every + 2) * big > 0.8 * 256 * 2**20  # … and not far fewer
    # costly states (p^2 r > 2^24): at most one save's cost per step
    assert Save().resolve(1000, save_flops=1.0e9, step_flops=1.0e7).every == 100
    assert Save().resolve(50, save_flops=1.0e9, step_flops=1.0e7).every == 50  # step 0 and the last only
    # … evenly spaced, the last one at the end: 10 intervals of 105 steps, not 10 of 100 and one of 50
    assert Save().resolve(1050, save_flops=1.0e9, step_flops=1.0e7).every == 105
    assert Save().resolve(199, save_flops=1.0e9, step_flops=1.0e7).every == 199  # not 100: saves at 0, 100, 199
    # an explicit cadence is kept (and checked against the memory limit before the run)
    assert Save(every=1).resolve(1000, state_bytes=big, save_flops=1e9, step_flops=1.0).every == 1


def test_default_save_spaces_costly_states_in_simulate():
    op, _, y = _mlp_problem(N=64, D=300, seed=2)  # p = 301: M = L Lᵀ costs p³ = 2.7e7 flops, a step ~2.2e5
    M0 = 1e-6 * torch.eye(op.p, dtype=F64)
    b = simulate(op, y, M0=M0, optimizer=GD(0.05), steps=600)
    ratio = op.p**3 / (2 * 64 * op.p + 2 * op.p**2)
    assert b.info["save_every"] >= ratio and len(b) <= 600 / ratio + 2
    assert b.M is not None and b.M.shape[0] == len(b) and int(b.step[-1]) == 600
    small = simulate(op, y, M0=M0, optimizer=GD(0.05), save=Save(M=False), steps=600)  # no M saved: the loss as before
    assert small.info["save_every"] == 1 and len(small) == 601


def test_explicit_cadence_over_the_memory_limit_is_refused(monkeypatch):
    op, _, y = _mlp_problem(N=20, D=40, seed=2)
    monkeypatch.setenv("NQF_MEMORY_LIMIT", str(50 * 8 * op.p * op.p))
    M0 = 1e-6 * torch.eye(op.p, dtype=F64)
    with pytest.raises(NQFError, match="save_every"):
        simulate(op, y, M0=M0, optimizer=GD(0.05), save=Save(every=1), steps=1000)
    assert simulate(op, y, M0=M0, optimizer=GD(0.05), save=Save(every=50), steps=1000).success


# --------------------------------------------------------------------------- lv.limit against the reference
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from lv_limit_reference import reference_limit  # noqa: E402


def _lv_case(K, seed, kind):
    rng = np.random.default_rng(seed)
    if kind == "dense":
        V = rng.standard_normal((K, 4)) * 2.0 / np.sqrt(K)
        C = np.diag(rng.uniform(0.5, 1.5, K)) + V @ V.T
    else:  # strongly interacting: many switch-offs
        A = rng.standard_normal((K, K)) / np.sqrt(K)
        C = A @ A.T + 0.05 * np.eye(K)
    zt = np.where(rng.random(K) < 0.6, rng.random(K), 0.0)
    beta = C @ zt + 0.3 * rng.standard_normal(K)
    s0 = -rng.uniform(0.5, 1.5, K)
    return beta, C, s0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["dense", "coupled"])
def test_limit_equals_reference(seed, kind):
    beta, C, s0 = _lv_case(40, seed, kind)
    new, old = limit(beta, C, s0), reference_limit(beta, C, s0)
    assert [(e.mode, e.kind) for e in new.events] == [(e.mode, e.kind) for e in old.events]
    np.testing.assert_allclose(new.taus.numpy(), old.taus.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(new.z_final.numpy(), old.z_final.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(new.losses.numpy(), old.losses.numpy(), rtol=1e-9, atol=1e-12)


def test_limit_reference_cases_include_switch_offs():
    offs = sum(sum(e.kind == "off" for e in limit(*_lv_case(40, seed, "coupled")).events) for seed in range(6))
    assert offs > 0
