"""The saddle sequence on commuting data is the Lotka–Volterra ε → 0 limit: checked against the closed form of
orthogonal features (diagonal C) and against nqf.reductions.lv.limit (levels and switch order); and the result
convention of Saddle / SaddleSequence (immutable, compact repr, JSON-ready to_dict, picklable)."""

import json
import math
import pickle

import numpy as np
import pytest
import torch

from helpers import interacting_commuting_modes
from nqf.reductions.lv import limit
from nqf.reductions.saddles import Saddle, SaddleSequence, saddle_sequence
from nqf.structure import DenseStructure


def _orthogonal_features(seed=0, N=30, p=5):
    """A_n = U diag(a_n) Uᵀ with orthogonal columns a_k (C = aᵀa/N = diag(c)) and known β = aᵀy/N."""
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((p, p)))
    H, _ = np.linalg.qr(rng.standard_normal((N, p + 1)))
    c = np.array([1.0, 0.5, 2.0, 0.8, 1.3])
    a = H[:, :p] * np.sqrt(N * c)
    b = np.array([2.0, -1.0, 0.7, 1.4, 0.3])  # mode 1 has β < 0: never learned
    y = H[:, :p] @ b + 0.5 * H[:, p]  # plus a part no mode can fit
    A = np.einsum("ik,nk,jk->nij", U, a, U)
    return DenseStructure(torch.tensor(A)), y, U, a, c


def test_orthogonal_features_closed_form():
    op, y, U, a, c = _orthogonal_features()
    N = y.size
    seq = saddle_sequence(op, torch.tensor(y))
    assert seq.rule == "commuting" and seq.global_minimum
    beta = a.T @ y / N
    order = [k for k in np.argsort(-beta) if beta[k] > 0]  # each mode alone: τ_k = 1/(4 β_k)
    levels = 0.5 * (y @ y) / N - np.concatenate([[0.0], np.cumsum(beta[order] ** 2 / (2 * c[order]))])
    np.testing.assert_allclose(seq.plateau_levels, levels, rtol=1e-12)
    np.testing.assert_allclose(seq.taus, np.concatenate([[0.0], 1 / (4 * beta[order])]), rtol=1e-12)
    np.testing.assert_array_equal(seq.ranks, np.arange(len(order) + 1))
    for s, k in zip(seq.saddles[:-1], order, strict=True):
        d = s.escape_direction.numpy()
        assert d.shape == (5, 1) and abs(float(U[:, k] @ d[:, 0])) == pytest.approx(1.0, abs=1e-12)
        assert s.escape_mode_rate == pytest.approx(4 * beta[k], rel=1e-12)
    # the final state is z*_k = β_k/c_k on the learned modes
    M = (U[:, order] * (beta[order] / c[order])) @ U[:, order].T
    np.testing.assert_allclose(seq.saddles[-1].M.numpy(), M, atol=1e-12)
    # the first drop with its offset: the exact logistic time of a mode from z(0) = ε to half the drop; the excess
    # loss of a mode is ℓ (1 − z/z*)², so half the drop is z/z* = f = 1 − 1/√2 (not half saturation)
    k, eps, f = order[0], 1e-10, 1 - 1 / math.sqrt(2)
    t_log = (math.log((beta[k] / c[k]) / eps - 1) - math.log(1 / f - 1)) / (4 * beta[k])
    assert seq.first_escape_time(eps) == pytest.approx(t_log, abs=1e-6)


def test_switch_order_and_levels_equal_lv_limit_with_interactions():
    """Interacting commuting modes (mode joins, a mode leaves): levels, times and the switching modes are those
    of nqf.reductions.lv.limit run on (β, C) in the known basis."""
    U, a, y = interacting_commuting_modes()
    N = a.shape[0]
    op = DenseStructure(torch.tensor(np.einsum("ik,nk,jk->nij", U, a, U)))
    seq = saddle_sequence(op, torch.tensor(y))
    res = limit(a.T @ y / N, a.T @ a / N, y2=float(y @ y) / N)
    groups: dict = {}
    for e in res.events:
        g = groups.setdefault(e.tau, {"on": [], "loss": None})
        g["loss"] = e.loss
        if e.kind == "on":
            g["on"].append(e.mode)
    taus = sorted(groups)
    np.testing.assert_allclose(seq.taus[1:], taus, rtol=1e-12)
    np.testing.assert_allclose(seq.plateau_levels[1:], [groups[t]["loss"] for t in taus], rtol=1e-12)
    for s, t in zip(seq.saddles[:-1], taus, strict=True):
        d = s.escape_direction.numpy()
        overlap = np.abs(U[:, groups[t]["on"]].T @ d)
        np.testing.assert_allclose(overlap, np.eye(len(groups[t]["on"])), atol=1e-10)


def test_result_convention():
    op, y, *_ = _orthogonal_features()
    seq = saddle_sequence(op, torch.tensor(y))
    with pytest.raises(AttributeError):
        seq.rule = "generic"
    with pytest.raises(AttributeError):
        seq.saddles[0].loss = 0.0
    d = seq.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["plateau_levels"] == pytest.approx(seq.plateau_levels.tolist()) and len(d["saddles"]) == len(seq)
    back = pickle.loads(pickle.dumps(seq))
    assert back.first_escape_time(1e-10) == seq.first_escape_time(1e-10)
    np.testing.assert_array_equal(back.plateau_levels, seq.plateau_levels)
    # compact repr also for p = 1000
    p = 1000
    z = torch.zeros(p, p, dtype=torch.float64)
    s = Saddle(
        index=0,
        M=z,
        V=z[:, :0],
        rank=0,
        loss=1.0,
        G=z,
        stationarity=0.0,
        rates=torch.ones(p, dtype=torch.float64),
        escape_rate=4.0,
        escape_direction=z[:, :1],
        tau=0.0,
    )
    big = SaddleSequence(saddles=[s], global_minimum=False, certificate=1.0, rule="generic")
    for r in (repr(s), repr(big)):
        assert len(r) < 400 and "tensor" not in r and "array" not in r
    json.dumps(big.to_dict(), allow_nan=False)
