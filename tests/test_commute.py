"""The one commutation test (nqf.structure._commute) and its users: closed forms, scaling with a planted
perturbation, and the Lotka–Volterra reduction refusing non-commuting data before anything dense is built."""

import math
import time

import numpy as np
import pytest
import torch

from nqf.errors import NonCommutingError
from nqf.structure import DenseStructure, commutator_defect, commutes
from nqf.structure._commute import commutator_ratio


def _commuting(rng, N=12, p=5):
    Q, _ = np.linalg.qr(rng.standard_normal((p, p)))
    return np.einsum("ik,nk,jk->nij", Q, rng.standard_normal((N, p)), Q)


def _symmetric(rng, N=12, p=5):
    E = rng.standard_normal((N, p, p))
    return E + E.transpose(0, 2, 1)


def test_commutator_ratio_closed_form():
    """[σ_x, σ_z] = [[0, −2], [2, 0]]: ‖·‖_F = 2√2 and ‖σ_x‖_F = ‖σ_z‖_F = √2, so the ratio is √2."""
    X = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    Y = torch.tensor([[1.0, 0.0], [0.0, -1.0]], dtype=torch.float64)
    assert float(commutator_ratio(X, Y)) == pytest.approx(math.sqrt(2), rel=1e-15)
    assert float(commutator_ratio(X, X)) == 0.0
    assert float(commutator_ratio(X, torch.zeros(2, 2, dtype=torch.float64))) == 0.0


def test_commuting_and_non_commuting_data():
    rng = np.random.default_rng(0)
    op = DenseStructure(torch.tensor(_commuting(rng)))
    assert commutator_defect(op) < 1e-14 and commutes(op)
    op = DenseStructure(torch.tensor(_symmetric(rng)))
    assert commutator_defect(op) > 0.1 and not commutes(op)


def test_defect_tracks_a_planted_perturbation():
    """Commuting matrices plus s·E: the measured defect is proportional to s (planted error of known size)."""
    rng = np.random.default_rng(1)
    D, E = _commuting(rng), _symmetric(rng)
    vals = [commutator_defect(DenseStructure(torch.tensor(D + s * E))) for s in (1e-3, 1e-6)]
    assert 1e-5 < vals[0] < 1e-1 and 1e-8 < vals[1] < 1e-4
    assert vals[0] / vals[1] == pytest.approx(1e3, rel=0.01)  # linear in s to O(s)


class _NoDense(DenseStructure):
    def dense(self):
        raise AssertionError("dense() called")


def test_lv_reduce_refuses_non_commuting_data_before_building_anything_dense():
    from nqf.reductions.lv import reduce

    rng = np.random.default_rng(2)
    N, p = 12, 5
    op = _NoDense(torch.tensor(_symmetric(rng, N, p)))
    t0 = time.perf_counter()
    with pytest.raises(NonCommutingError, match=r"nqf\.reductions\.saddles") as info:
        reduce(op, torch.zeros(N), 1e-3 * torch.eye(p, dtype=torch.float64))
    assert time.perf_counter() - t0 < 1.0
    assert info.value.value == pytest.approx(commutator_defect(op), rel=1e-12)


def test_analyze_check_reports_the_same_number():
    from nqf.app._study._checks import check_commutation

    rng = np.random.default_rng(3)
    for A, expected in ((_commuting(rng), True), (_symmetric(rng), False)):
        op = DenseStructure(torch.tensor(A))
        row, yes = check_commutation(op)
        assert yes is expected
        assert row.value == f"{commutator_defect(op):.2e}"


def test_probed_ratio_is_zero_for_commuting_and_near_the_exact_one_otherwise():
    """Above EXACT_BELOW the commutator's norm is estimated from probe vectors (O(p²)): exactly zero (to
    round-off) for commuting matrices, within the estimator's spread √(2/PROBES) of the exact ratio otherwise."""
    from nqf.structure._commute import PROBES, _probed_ratio

    rng = np.random.default_rng(3)
    gen = torch.Generator().manual_seed(0)
    Q, _ = np.linalg.qr(rng.standard_normal((300, 300)))
    X = torch.tensor(Q @ np.diag(rng.standard_normal(300)) @ Q.T)
    Y = torch.tensor(Q @ np.diag(rng.standard_normal(300)) @ Q.T)
    assert float(_probed_ratio(X, Y, gen)) < 1e-13
    for trial in range(5):
        E = torch.tensor(rng.standard_normal((300, 300)))
        Yp = Y + 1e-3 * (E + E.T)
        exact, probed = float(commutator_ratio(X, Yp)), float(_probed_ratio(X, Yp, gen))
        assert abs(probed / exact - 1) < 3 * math.sqrt(2 / PROBES), (trial, exact, probed)


def test_the_probed_test_decides_like_the_exact_one(monkeypatch):
    import nqf.structure._commute as commute

    rng = np.random.default_rng(0)
    ops = {True: DenseStructure(_commuting(rng)), False: DenseStructure(_symmetric(rng))}
    monkeypatch.setattr(commute, "EXACT_BELOW", 2)  # every p is "large": the probes decide
    for expected, op in ops.items():
        assert commutes(op) is expected
