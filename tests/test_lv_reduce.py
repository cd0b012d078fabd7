"""Lotka–Volterra reduction of commuting data against the full order-parameter GD."""

import numpy as np
import pytest
import torch

from nqf.errors import InvalidParameterError, NonCommutingError, NotClosedError, ShapeError
from nqf.reductions.lv._reduce import commutation_defect, reduce
from nqf.structure._commute import relative_commutator
from nqf.structure._operator import DenseStructure


def full_gd(op, y, M0, eta, steps, record=None):
    """Independent order-parameter GD: M ← (I − 2ηG) M (I − 2ηG), G = (1/N) 𝒜*(f − y)."""
    M = torch.as_tensor(M0, dtype=torch.float64).clone()
    Id = torch.eye(M.shape[0], dtype=torch.float64)
    out = [M.clone()] if record else None
    for s in range(steps):
        G = op.adjoint(op.predict(M) - y) / op.n_samples
        B = Id - 2 * eta * G
        M = B @ M @ B.T
        if record and (s + 1) % record == 0:
            out.append(M.clone())
    return (M, out) if record else M


def orthogonal_features(N, scales, seed):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((N, len(scales))))
    return np.sqrt(N) * Q * np.asarray(scales)  # columns orthogonal: C = diag(scales²)


def test_gd_map_equals_full_order_parameter_gd_vector_outputs_offset_rotation():
    rng = np.random.default_rng(1)
    N, Cout, p = 12, 2, 5
    Qp, _ = np.linalg.qr(rng.standard_normal((p, p)))
    a = rng.standard_normal((N, Cout, p))
    a[..., 4] = 0.0  # direction 4 is never measured: dropped, K = 4
    A = np.einsum("ij,ncj,kj->ncik", Qp, a, Qp)
    offset = rng.standard_normal((N, Cout))
    op = DenseStructure(torch.tensor(A), offset=torch.tensor(offset))
    y = torch.tensor(rng.standard_normal((N, Cout)))
    m0 = np.array([1e-3, 2e-3, 5e-4, 1e-3, 3e-3])
    M0 = torch.tensor(Qp @ np.diag(m0) @ Qp.T)
    lv = reduce(op, y, M0)
    assert lv.K == 4 and tuple(lv.basis.shape) == (5, 4)
    assert torch.all(lv.beta[:-1] >= lv.beta[1:])  # ordered by decreasing β
    assert torch.allclose(lv.zeta, 4 * lv.beta)
    ytil = (y - torch.tensor(offset)).numpy()
    assert lv.y2 == pytest.approx(float((ytil**2).sum()) / N, rel=1e-13)
    eta, steps = 0.05, 200
    M_full = full_gd(op, y, M0, eta, steps)
    sol = lv.gd(eta, steps)
    M_lv = lv.to_matrix(sol.z[-1])
    assert torch.allclose(M_lv, M_full, atol=1e-12 * float(M_full.abs().max()), rtol=0)
    # loss of the LV system = loss of the full model
    f = op.predict(M_full)
    L_full = 0.5 * float(((f - y) ** 2).sum()) / N
    assert float(lv.loss(sol.z[-1])) == pytest.approx(L_full, rel=1e-12)


def test_logistic_matches_full_gd_and_switch_times_within_2_percent():
    N, p, eps = 40, 4, 1e-8
    scales = np.array([1.5, 1.2, 1.0, 0.9])
    a = orthogonal_features(N, scales, seed=2)
    A = np.stack([np.diag(r) for r in a])  # X_n = diag(a_n): commuting measurements
    zt = np.array([1.0, 0.8, 0.7, 0.6])
    y = torch.tensor(a @ zt)
    op = DenseStructure(torch.tensor(A))
    lv = reduce(op, y, eps * torch.eye(p))
    assert lv.is_diagonal and lv.K == 4
    eta, steps, rec = 1e-3, 14000, 10
    _, Ms = full_gd(op, y, eps * torch.eye(p), eta, steps, record=rec)
    t = np.arange(len(Ms)) * eta * rec
    z_full = np.stack([(lv.basis.T @ M @ lv.basis).diagonal().numpy() for M in Ms])
    z_log = lv.logistic(torch.tensor(t)).numpy()
    # gradient-flow closed form vs η = 1e-3 GD: O(η β) relative error in the rates
    zs = lv.final_state().numpy()
    assert np.max(np.abs(z_full - z_log) / zs) < 0.02
    # measured switch-on times: first crossing of z*/2, linear interpolation between records
    t_meas = []
    for k in range(lv.K):
        i = int(np.argmax(z_full[:, k] >= zs[k] / 2))
        assert i > 0
        w = (zs[k] / 2 - z_full[i - 1, k]) / (z_full[i, k] - z_full[i - 1, k])
        t_meas.append(t[i - 1] + w * (t[i] - t[i - 1]))
    t_pred = lv.logistic_switch_times().numpy()
    assert np.all(np.abs(t_pred / np.array(t_meas) - 1) < 0.02)
    # and the closed-form half-saturation time ≈ ln(1/ε)/ζ
    assert np.allclose(t_pred, np.log(zs / eps - 1) / lv.zeta.numpy(), rtol=1e-12)


def test_degenerate_eigenvalues_and_m0_inside_degenerate_block():
    rng = np.random.default_rng(3)
    N, p = 15, 4
    a = rng.standard_normal((N, 3))
    a = np.column_stack([a[:, 0], a[:, 0], a[:, 1], a[:, 2]])  # coordinates 0 and 1 always equal
    Qp, _ = np.linalg.qr(rng.standard_normal((p, p)))
    A = np.einsum("ij,nj,kj->nik", Qp, a, Qp)
    op = DenseStructure(torch.tensor(A))
    y = torch.tensor(rng.standard_normal(N))
    # M0 not diagonal in the coordinate basis, but commuting (mixes only the degenerate block)
    B = np.eye(p) * 1e-3
    B[0, 1] = B[1, 0] = 4e-4
    M0 = torch.tensor(Qp @ B @ Qp.T)
    lv = reduce(op, y, M0, seed=7)
    assert lv.commutation_defect < 1e-12
    eta, steps = 0.02, 150
    M_full = full_gd(op, y, M0, eta, steps)
    M_lv = lv.to_matrix(lv.gd(eta, steps).z[-1])
    assert torch.allclose(M_lv, M_full, atol=1e-12 * float(M_full.abs().max()), rtol=0)


def test_non_commuting_data_raises_with_measured_value():
    rng = np.random.default_rng(4)
    N, p = 10, 4
    A = rng.standard_normal((N, p, p))
    A = A + A.transpose(0, 2, 1)
    op = DenseStructure(torch.tensor(A))
    with pytest.raises(NonCommutingError, match=r"do not commute.*saddles") as info:
        reduce(op, torch.zeros(N), 1e-3 * torch.eye(p))
    assert info.value.value > 1e-2
    assert f"{info.value.value:.3e}" in str(info.value)
    d_gen, _ = commutation_defect(A)  # the basis test measures the same non-commutation
    assert d_gen > 1e-2
    # slightly non-commuting: the measured defect tracks the perturbation size
    Qp, _ = np.linalg.qr(rng.standard_normal((p, p)))
    D = np.einsum("ij,nj,kj->nik", Qp, rng.standard_normal((N, p)), Qp)
    E = rng.standard_normal((N, p, p))
    E = E + E.transpose(0, 2, 1)
    for size in (1e-4, 1e-6):
        Ap = D + size * E
        with pytest.raises(NonCommutingError) as info:
            reduce(DenseStructure(torch.tensor(Ap)), torch.zeros(N), 1e-3 * torch.eye(p))
        assert 0.1 * size < info.value.value < 100 * size  # the randomized test, before anything dense
        delta, _ = commutation_defect(Ap)
        exact = relative_commutator(Ap)
        assert 0.1 * size < delta < 100 * size
        assert exact <= 4 * delta * 1.01
    # exactly commuting data with round-off passes
    d, U = commutation_defect(D)
    assert d < 1e-12


def test_m0_not_commuting_raises():
    rng = np.random.default_rng(5)
    N, p = 8, 3
    A = np.stack([np.diag(r) for r in rng.standard_normal((N, p))])
    M0 = np.eye(p) * 1e-3
    M0[0, 2] = M0[2, 0] = 5e-4
    with pytest.raises(NonCommutingError, match=r"`M0` is not diagonal") as info:
        reduce(DenseStructure(torch.tensor(A)), torch.zeros(N), torch.tensor(M0))
    assert info.value.value > 1e-2


def test_reduce_bad_inputs():
    rng = np.random.default_rng(6)
    N, p = 6, 3
    A = torch.tensor(np.stack([np.diag(r) for r in rng.standard_normal((N, p))]))
    op = DenseStructure(A)
    with pytest.raises(ShapeError, match="`y`"):
        reduce(op, torch.zeros(N + 1), torch.eye(p))
    with pytest.raises(ShapeError, match="`M0`"):
        reduce(op, torch.zeros(N), torch.eye(p + 1))
    with pytest.raises(ValueError, match="`y` must be finite"):
        reduce(op, torch.tensor([float("nan")] + [0.0] * (N - 1)), torch.eye(p))
    with pytest.raises(ValueError, match="positive semi-definite"):
        reduce(op, torch.zeros(N), -torch.eye(p))
    op_lin = DenseStructure(A, linear=torch.ones(N, p))
    with pytest.raises(NotClosedError, match="zero-gradient"):
        reduce(op_lin, torch.zeros(N), torch.eye(p))
    with pytest.raises(TypeError, match="`op`"):
        reduce(A, torch.zeros(N), torch.eye(p))
    # no random combination tried: there is no basis to return (it used to come back as (inf, None))
    with pytest.raises(InvalidParameterError, match="`tries`"):
        commutation_defect(A, tries=0)
