"""The two fast paths of ``nqf.reductions.lv.limit`` against the plain per-event solver.

* dense ``C``: the blocked epochs (Schur complement on candidate modes,
  ``nqf.reductions.lv._epoch``) against the exact per-event steps alone (``_walk.EPOCHS = False``);
* sparse banded ``C``: the structured path (``nqf.reductions.lv._banded``, never densified)
  against the dense path on the same matrix, and against NNLS of the final state.

Same events (mode and kind, in order), the same ``τ`` to 1e-10, the same plateau states,
active sets and paths ``s(τ)``.
"""

import pickle

import numpy as np
import pytest
import scipy.sparse as sp

import nqf.reductions.lv._epoch as epoch
import nqf.reductions.lv._walk as walk
from nqf.errors import InvalidParameterError
from nqf.reductions.lv._limit import limit
from test_lv_perf_limit import kkt_violation, nnls_reference, path_violation, plateau_violation, problem

TAU = 1e-10


def banded_problem(K: int, w: int, seed: int, strength: float = 0.6):
    """``(β, C)``: ``C`` symmetric positive definite with half-bandwidth ``w``; β with mixed signs of z*."""
    rng = np.random.default_rng(seed)
    C = np.diag(rng.uniform(1.0, 2.0, K))
    for d in range(1, w + 1):
        off = strength * rng.standard_normal(K - d) / w
        C += np.diag(off, d) + np.diag(off, -d)
    C += max(0.0, 0.01 - float(np.linalg.eigvalsh(C)[0])) * np.eye(K)
    return C @ rng.uniform(-0.8, 1.0, K), C


def initial(K: int, seed: int):
    """``s(0)`` with some modes at exactly zero (``−inf``) and some already at ``O(1)`` (``0``)."""
    rng = np.random.default_rng(seed)
    s0 = -rng.uniform(0.5, 1.5, K)
    s0[rng.random(K) < 0.1] = -np.inf
    s0[rng.random(K) < 0.05] = 0.0
    return s0


def same_limits(a, b, K: int) -> float:
    """Largest deviation between two limit results (inf if the event sequences differ).

    Times and log coordinates relative to ``max(1, τ_max)`` (a late event of a slow mode has a
    large ``τ``), losses and states absolute.
    """
    if [(e.mode, e.kind) for e in a.events] != [(e.mode, e.kind) for e in b.events]:
        return np.inf
    if any(tuple(x.active) != tuple(y.active) for x, y in zip(a.events, b.events, strict=True)):
        return np.inf
    unit = max(1.0, float(np.max(a.taus.numpy(), initial=0.0)))
    dev = float(np.max(np.abs(a.taus.numpy() - b.taus.numpy()), initial=0.0)) / unit
    dev = max(dev, float(np.max(np.abs(a.losses.numpy() - b.losses.numpy()), initial=0.0)))
    dev = max(dev, max((float(np.max(np.abs(x - y))) for x, y in zip(a.z_after, b.z_after, strict=True)), default=0))
    tq = np.linspace(0.0, 1.2 * float(a.path_tau[-1]), 37)
    sa, sb = a.s_at(tq).numpy(), b.s_at(tq).numpy()
    if not np.array_equal(np.isfinite(sa), np.isfinite(sb)):
        return np.inf
    fin = np.isfinite(sa)
    return max(dev, float(np.max(np.abs(sa[fin] - sb[fin]), initial=0.0)) / unit)


@pytest.mark.parametrize("kind,K,seed", [("dense", 300, 3), ("singular", 300, 4), ("dense", 420, 5)])
@pytest.mark.parametrize("start", [False, True])
def test_epochs_equal_exact_steps(monkeypatch, kind, K, seed, start):
    beta, C = problem(kind, K, seed)
    s0 = initial(K, seed) if start else None
    joins = []
    join = epoch.Epoch.join
    monkeypatch.setattr(epoch.Epoch, "join", lambda self, c, rtol: joins.append(join(self, c, rtol)) or joins[-1])
    fast = limit(beta, C, s0)
    monkeypatch.setattr(walk, "EPOCHS", False)
    slow = limit(beta, C, s0)
    assert same_limits(fast, slow, K) < TAU
    # most joins went through the epochs (96 candidates of K > 96, up to 64 joins each)
    assert sum(joins) > 0.5 * sum(e.kind == "on" for e in fast.events)


def test_epochs_pass_the_dense_checks():
    """Blocked epochs on K = 400 (several epochs, joins outside the candidates, a leave): KKT, plateaus, paths."""
    beta, C = problem("dense", 400, 11)
    res = limit(beta, C)
    ev, za, pt, ps = res.events, res.z_after, res.path_tau.numpy(), res.path_s.numpy()
    assert "off" in res.kinds
    assert kkt_violation(beta, C, res.z_final.numpy()) < 1e-9
    assert plateau_violation(beta, C, ev, za) < 1e-9
    assert path_violation(beta, C, ev, za, pt, ps) < 1e-9


@pytest.mark.parametrize("K,w,seed", [(200, 1, 1), (200, 2, 2), (300, 3, 3), (150, 5, 4), (240, 1, 8)])
@pytest.mark.parametrize("start", [False, True])
def test_banded_equals_dense(K, w, seed, start):
    beta, C = banded_problem(K, w, seed, strength=0.9 if seed == 8 else 0.6)
    s0 = initial(K, seed) if start else None
    dense = limit(beta, C, s0)
    band = limit(beta, sp.csr_matrix(C), s0)
    assert band.path_s is None  # the paths are kept as knots
    assert same_limits(band, dense, K) < TAU
    x = nnls_reference(beta, C)
    if not start:
        assert np.max(np.abs(band.z_final.numpy() - x)) < 1e-8 * float(np.max(np.diag(C)))


def test_banded_has_leaves_and_round_trips():
    """A strongly coupled tridiagonal C: modes leave; the compact result pickles and serialises."""
    beta, C = banded_problem(240, 1, 8, strength=0.9)
    band = limit(beta, sp.csr_matrix(C), y2=3.0)
    assert "off" in band.kinds
    back = pickle.loads(pickle.dumps(band))
    assert same_limits(back, band, 240) == 0.0
    d = band.to_dict()
    assert d["events"][-1]["active"] == list(band.final_active)
    assert len(band.z_after) == len(band.events)


def test_planted_differences_are_detected():
    """``same_limits`` fails on a shifted event time and on another matrix."""
    beta, C = banded_problem(120, 2, 8)
    a = limit(beta, sp.csr_matrix(C))
    on = set(a.final_active)
    i = min(k for k in on if k + 1 in on)  # two coupled active neighbours
    C2 = C.copy()
    C2[i, i + 1] = C2[i + 1, i] = C[i, i + 1] + 1e-3
    assert same_limits(limit(beta, sp.csr_matrix(C2)), a, 120) > TAU


def test_banded_rejects_wide_or_asymmetric_or_indefinite():
    K = 200
    rng = np.random.default_rng(0)
    wide = sp.random(K, K, density=0.05, random_state=1) + sp.eye(K) * 5
    with pytest.raises(InvalidParameterError, match="half-bandwidth"):
        limit(np.ones(K), (wide + wide.T).tocsr())
    asym = sp.diags([np.full(K - 1, 0.1), np.ones(K), np.full(K - 1, 0.2)], [-1, 0, 1])
    with pytest.raises(InvalidParameterError, match="symmetric"):
        limit(np.ones(K), asym)
    indef = sp.diags([np.full(K - 1, 0.9), np.ones(K), np.full(K - 1, 0.9)], [-1, 0, 1])
    with pytest.raises(InvalidParameterError, match="positive semi-definite"):
        limit(rng.uniform(0.1, 1, K), indef)


def test_lotka_volterra_limit_on_sparse_c_uses_the_banded_path():
    """``LotkaVolterra(β, sparse C).limit`` and ``.plateaus`` equal those of the dense system."""
    from nqf.reductions.lv import LotkaVolterra

    beta, C = banded_problem(150, 2, 9)
    dense = LotkaVolterra(beta, C, 1e-8)
    band = LotkaVolterra(beta, sp.csr_matrix(C), 1e-8)
    a, b = band.limit(), dense.limit()
    assert a.path_s is None and a.eps == b.eps
    assert same_limits(a, b, 150) < TAU
    pa, pb = band.plateaus(), dense.plateaus()
    assert pa.modes.tolist() == pb.modes.tolist()
    assert np.allclose(pa.losses.numpy(), pb.losses.numpy(), rtol=0, atol=1e-12)
