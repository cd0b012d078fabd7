"""``simulate``'s hot path with the large block kept as ``base + Q Z`` (nqf.dynamics._lowrank) against the general
loop on the same operator stored densely (no block structure, no low-rank terms: an independent update).

The block is large enough (``p2 · r ≥ LOWRANK_MIN``) for the low-rank terms; a diagonal start ``M(0)`` keeps its
base implicit until the first fold (after ``p2 / 2p1`` steps; a save writes the factor and the collecting goes
on), then the dense base folds every ``FOLD_COLUMNS`` columns.  Every saved ``M`` and loss must equal the
reference to round-off.
"""

from __future__ import annotations

import pytest
import torch

import nqf.dynamics._lowrank as lowrank
from nqf.dynamics import GD, Save, simulate
from nqf.structure import mlp
from nqf.structure._operator import DenseStructure

F64 = torch.float64


def rel_err(A, B):
    return float(((A - B).flatten(1).norm(dim=1) / B.flatten(1).norm(dim=1)).max())


def problem(N=48, D=300, C=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, generator=g, dtype=F64) / D**0.5
    y = torch.tanh(X @ torch.randn(D, C, generator=g, dtype=F64))
    op = mlp(X, "tanh", n_outputs=C)
    return op, DenseStructure(op.dense(), offset=op.offset), y


def counted_folds(monkeypatch) -> list:
    """Record the base kind (diagonal or dense) and ``m`` at every fold."""
    seen: list = []
    fold = lowrank.RightBlock._fold

    def spy(self):
        seen.append(("diagonal" if self.delta is not None else "dense", self.m))
        fold(self)

    monkeypatch.setattr(lowrank.RightBlock, "_fold", spy)
    return seen


def starts(p: int):
    g = torch.Generator().manual_seed(5)
    A = torch.randn(p, p, generator=g, dtype=F64) / p
    d = torch.linspace(0.5, 2.0, p, dtype=F64)
    return {
        "eps_identity": 1e-6 * torch.eye(p, dtype=F64),
        "unequal_diagonal": 1e-4 * torch.diag(d),  # δ not constant; the left block's entries too
        "dense": 1e-4 * (torch.eye(p, dtype=F64) + A @ A.T),  # no diagonal start: the base is dense from step 0
    }


@pytest.mark.parametrize("start", ["eps_identity", "unequal_diagonal", "dense"])
# 151: a save on the step right after the diagonal start's fold (the update of step 150 folds, then appends)
@pytest.mark.parametrize("save_every,wd", [(400, 0.0), (7, 0.0), (151, 0.0), (400, 0.01)])
def test_lowrank_block_equals_general_loop(start, save_every, wd, monkeypatch):
    op, dense, y = problem()
    M0 = starts(op.p)[start]
    args = dict(M0=M0, optimizer=GD(0.3, weight_decay=wd), steps=400, save=Save(every=save_every))
    ref = simulate(dense, y, **args)
    folds = counted_folds(monkeypatch)
    fast = simulate(op, y, **args)
    assert fast.success and ref.success and torch.equal(fast.step, ref.step)
    assert rel_err(fast.M, ref.M) < 1e-11
    torch.testing.assert_close(fast.loss, ref.loss, rtol=1e-11, atol=0.0)
    assert float(fast.loss[-1]) < 0.5 * float(fast.loss[0])  # it trained
    kinds = [k for k, _ in folds]
    if start == "dense":
        assert "diagonal" not in kinds
    else:  # the diagonal start lasts until its capacity, p2 / 2 columns (one per step), also across saves
        assert folds[0] == ("diagonal", (op.p - 1) // 2)
    assert kinds.count("dense") >= 3  # the dense base folded, every FOLD_COLUMNS steps or at saves


def test_lowrank_block_several_outputs(monkeypatch):
    """Three outputs (``p1 = 3``: three columns of ``Q`` a step), εI start, weight decay."""
    op, dense, y = problem(N=40, D=280, C=3, seed=2)
    args = dict(
        M0=1e-6 * torch.eye(op.p, dtype=F64), optimizer=GD(0.3, weight_decay=0.003), steps=200, save=Save(every=50)
    )
    folds = counted_folds(monkeypatch)
    fast, ref = simulate(op, y, **args), simulate(dense, y, **args)
    assert folds[0] == ("diagonal", (280 // 2) // 3 * 3) and rel_err(fast.M, ref.M) < 1e-11


def test_planted_error_in_the_lowrank_terms_is_seen(monkeypatch):
    """The comparison can fail: collected terms that miss the weight decay's factor differ far above round-off."""
    op, dense, y = problem(seed=3)
    args = dict(
        M0=1e-6 * torch.eye(op.p, dtype=F64), optimizer=GD(0.3, weight_decay=0.05), steps=120, save=Save(every=120)
    )
    ref = simulate(dense, y, **args)
    update = lowrank.RightBlock.update

    def no_decay_of_terms(self, Kbt, Ll, decay, alpha):
        m = self.m
        update(self, Kbt, Ll, decay, alpha)
        if m and self.m > m:  # undo the terms' decay of this step (the base keeps its own)
            self.Z[:m].div_(decay)

    monkeypatch.setattr(lowrank.RightBlock, "update", no_decay_of_terms)
    assert rel_err(simulate(op, y, **args).M, ref.M) > 1e-6


def test_small_blocks_stay_dense(monkeypatch):
    """Below LOWRANK_MIN elements (the block lives in the cache) nothing is collected: no fold."""
    op, dense, y = problem(N=30, D=64)
    assert (op.p - 1) * op.p < lowrank.LOWRANK_MIN
    folds = counted_folds(monkeypatch)
    fast = simulate(op, y, M0=1e-6 * torch.eye(op.p, dtype=F64), optimizer=GD(0.3), save=Save(every=10), steps=50)
    ref = simulate(dense, y, M0=1e-6 * torch.eye(op.p, dtype=F64), optimizer=GD(0.3), save=Save(every=10), steps=50)
    assert folds == [] and rel_err(fast.M, ref.M) < 1e-11


@pytest.mark.parametrize("p1,p2,start", [(1, 300, "diagonal"), (3, 280, "dense"), (150, 200, "diagonal")])
def test_right_block_equals_dense_updates(p1, p2, start):
    """The block's three products against the dense update ``L_r ← d L_r + α K̄ᵀ L_l`` on random inputs, through
    folds and syncs; with ``p1 > p2 / 2`` (no room for a step) a diagonal start is not kept implicit."""
    g = torch.Generator().manual_seed(p1)
    r = p1 + p2
    if start == "diagonal":
        Lr = torch.cat([torch.zeros(p2, p1, dtype=F64), torch.diag(torch.rand(p2, generator=g, dtype=F64))], 1)
    else:
        Lr = torch.randn(p2, r, generator=g, dtype=F64)
    ref = Lr.clone()
    rb = lowrank.RightBlock(Lr, p1)
    assert (rb.delta is not None) == (start == "diagonal" and p1 <= p2 // 2)
    Ll = torch.randn(p1, r, generator=g, dtype=F64)
    decay, alpha = 0.99, -0.3
    for k in range(60):
        Kbt = torch.randn(p2, p1, generator=g, dtype=F64) / p2
        torch.testing.assert_close(rb.times_T(Ll, torch.empty(p2, p1, dtype=F64)), ref @ Ll.T, rtol=1e-12, atol=1e-12)
        nxt = rb.stepped_left(Kbt.T, Ll, decay, alpha, torch.empty(p1, r, dtype=F64))
        torch.testing.assert_close(nxt, decay * Ll + alpha * Kbt.T @ ref, rtol=1e-12, atol=1e-12)
        rb.update(Kbt, Ll, decay, alpha)
        ref = decay * ref + alpha * Kbt @ Ll
        Ll = nxt
        if k % 17 == 5:
            torch.testing.assert_close(rb.sync(), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rb.sync(), ref, rtol=1e-12, atol=1e-12)
