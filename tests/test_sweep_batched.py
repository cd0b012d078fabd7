"""Batched order-parameter simulation: against `nqf.simulate` one run at a time and an exact scalar recursion."""

import math

import numpy as np
import pytest
import torch

from nqf.app._experiments._demo import teacher_task
from nqf.app._experiments._lv_staircase import diagonal_task
from nqf.dynamics import GD, Save, simulate, simulate_batched
from nqf.errors import InvalidParameterError, NotClosedError, ShapeError
from nqf.structure import matrix_sensing, mlp

TOL = 1e-12  # round-off: both compute the same exact map in float64


def _demo_problem():
    X, Y, _ = teacher_task(64, 4, [2.0, 1.0], seed=0)
    return mlp(X, "tanh", n_outputs=2), Y


def _initial_states(p, eps_list, seeds, width=16):
    out = []
    for eps, seed in zip(eps_list, seeds, strict=True):
        g = torch.Generator().manual_seed(seed)
        W = torch.randn(p, width, dtype=torch.float64, generator=g) / math.sqrt(width)
        out.append(eps * W @ W.T)
    return torch.stack(out)


def _agree(batch, refs):
    for q, r in zip(batch, refs, strict=True):
        assert q.status == r.status == 0
        assert torch.equal(q.step, r.step) and torch.equal(q.t, r.t)
        assert float((q.M - r.M).abs().max()) <= TOL * float(r.M.abs().max())
        assert float((q.loss - r.loss).abs().max()) <= TOL * float(r.loss[0])


def test_batched_matches_simulate_one_at_a_time_for_differing_eps_seed_lr_and_weight_decay():
    op, Y = _demo_problem()
    # ε down to 1e-10: the small directions must keep their relative accuracy (a T M Tᵀ update does not)
    eps, seeds = [1e-2, 1e-4, 1e-6, 1e-4, 1e-3, 1e-10], [0, 1, 2, 3, 4, 5]
    lr, wd = [2e-2, 2e-2, 1e-2, 3e-2, 2e-2, 2e-2], [0.0, 0.0, 0.0, 0.0, 1e-3, 0.0]
    M0 = _initial_states(op.p, eps, seeds)
    batch = simulate_batched(op, Y, M0=M0, lr=lr, weight_decay=wd, steps=600, save=Save(every=25))
    refs = [
        simulate(op, Y, M0=M0[b], optimizer=GD(lr[b], weight_decay=wd[b]), save=Save(every=25), steps=600)
        for b in range(6)
    ]
    _agree(batch, refs)
    assert float(refs[0].loss[-1]) < 1e-3 * float(refs[0].loss[0])  # the runs do learn (not a trivial match)


@pytest.mark.parametrize("loss", ["logistic", "cross_entropy"])
def test_batched_matches_simulate_for_other_losses(loss):
    X, Y, _ = teacher_task(32, 3, [2.0, 1.0], seed=1)
    if loss == "logistic":
        op, y = mlp(X, "tanh", n_outputs=1), (Y[:, 0] > 0).double()
    else:
        op, y = mlp(X, "tanh", n_outputs=2), Y.argmax(1).double()
    M0 = _initial_states(op.p, [1e-2, 1e-3], [0, 1])
    batch = simulate_batched(op, y, M0=M0, lr=[5e-2, 2e-2], steps=300, loss=loss, save=Save(every=30))
    refs = [
        simulate(op, y, M0=M0[b], optimizer=GD([5e-2, 2e-2][b]), save=Save(every=30), steps=300, loss=loss)
        for b in range(2)
    ]
    _agree(batch, refs)


def test_batched_on_commuting_data_follows_the_exact_scalar_recursion():
    # Diagonal measurements with C = I: M stays diagonal and each entry follows m ← (1 − 2η(m − z*))² m exactly.
    z = np.array([1.0, 0.5, 0.25])
    X, y = diagonal_task(16, z, torch.Generator().manual_seed(0))
    op = matrix_sensing(X)
    eps, lr, steps = np.array([1e-3, 1e-6]), np.array([0.05, 0.02]), 400
    M0 = torch.stack([e * torch.eye(3, dtype=torch.float64) for e in eps])
    batch = simulate_batched(op, y, M0=M0, lr=lr.tolist(), steps=steps, save=Save(every=1))
    for b in range(2):
        m = np.full(3, eps[b])
        ms, losses = [m.copy()], [0.5 * np.sum((m - z) ** 2)]
        for _ in range(steps):
            m = (1 - 2 * lr[b] * (m - z)) ** 2 * m
            ms.append(m.copy())
            losses.append(0.5 * np.sum((m - z) ** 2))
        M = batch[b].M.numpy()
        diag = np.einsum("kii->ki", M)
        assert np.max(np.abs(diag - np.array(ms)) / np.abs(np.array(ms))) < 1e-11
        assert np.max(np.abs(M - np.einsum("ki,ij->kij", diag, np.eye(3)))) < 1e-14
        assert np.max(np.abs(batch[b].loss.numpy() - losses)) < 1e-12 * losses[0]
        assert abs(diag[-1, 0] - z[0]) < 1e-3  # the first mode has switched on


def test_a_diverging_run_stops_alone():
    op, Y = _demo_problem()
    M0 = _initial_states(op.p, [1e-3, 1e-3], [0, 1])
    batch = simulate_batched(op, Y, M0=M0, lr=[2e-2, 5.0], steps=200, save=Save(every=10))
    assert batch[0].status == 0 and batch[1].status == -1 and "diverged" in batch[1].message
    _agree(batch[:1], [simulate(op, Y, M0=M0[0], optimizer=GD(2e-2), save=Save(every=10), steps=200)])
    ref = simulate(op, Y, M0=M0[1], optimizer=GD(5.0), save=Save(every=10), steps=200)
    assert ref.status == -1 and len(ref) == len(batch[1])


def test_batched_rejects_bad_input():
    op, Y = _demo_problem()
    M0 = 1e-3 * torch.eye(op.p, dtype=torch.float64)
    with pytest.raises(ShapeError, match="M0"):
        simulate_batched(op, Y, M0=torch.eye(op.p + 1, dtype=torch.float64), lr=0.1, steps=3)
    with pytest.raises(ShapeError, match="lr"):
        simulate_batched(op, Y, M0=torch.stack([M0, M0]), lr=[0.1, 0.1, 0.1], steps=3)
    with pytest.raises(InvalidParameterError, match="lr"):
        simulate_batched(op, Y, M0=M0, lr=-0.1, steps=3)
    with pytest.raises(InvalidParameterError, match="positive semidefinite"):
        simulate_batched(op, Y, M0=-M0, lr=0.1, steps=3)
    X, _, _ = teacher_task(16, 3, [1.0], seed=0)
    op_linear = mlp(X, "sigmoid", n_outputs=1)  # σ(0) ≠ 0: a linear term, no zero-gradient condition
    assert not op_linear.satisfies_zgz
    with pytest.raises(NotClosedError):
        simulate_batched(
            op_linear, torch.zeros(16), M0=1e-3 * torch.eye(op_linear.p, dtype=torch.float64), lr=0.1, steps=3
        )
    one = simulate_batched(op, Y, M0=M0, lr=0.01, steps=5, save=Save(every=1))  # a single (p, p) state is one run
    assert len(one) == 1 and one[0].M.shape == (6, op.p, op.p)
