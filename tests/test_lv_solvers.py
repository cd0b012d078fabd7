"""Solvers of a LotkaVolterra system checked against each other and against closed forms."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import nnls

from nqf.errors import NonFiniteError, ShapeError
from nqf.reductions.lv._qp import ActiveSetQP
from nqf.reductions.lv._system import LotkaVolterra, switch_times


def diag_system(eps):
    beta = np.array([2.0, 1.0, 0.5, 0.0, -0.7])
    c = np.array([2.0, 1.25, 1.0, 0.5, 1.5])
    return LotkaVolterra(beta, np.diag(c), eps, y2=3.0), beta, c


@pytest.mark.parametrize("method", ["Radau", "BDF"])
@pytest.mark.parametrize("eps", [1e-8, 1e-100, 1e-300, 5e-324])
def test_logistic_equals_stiff_log_flow(eps, method):
    lv, beta, c = diag_system(eps)  # 5e-324: the smallest subnormal float64
    T = 2.5 * -np.log(eps) / (4 * 0.5)
    sol = lv.flow(T, n_points=401, method=method)
    assert sol.success
    lz_flow = sol.log_z.numpy()
    lz_exact = lv.logistic(sol.t, log=True).numpy()
    assert np.all(np.isfinite(lz_flow))
    assert np.max(np.abs(lz_flow - lz_exact)) < 1e-6
    # half-saturation times: analytic vs root-refined on the dense output
    t_exact = lv.logistic_switch_times().numpy()
    t_flow = sol.switch_times().numpy()
    on = beta > 0
    assert np.allclose(t_flow[on], t_exact[on], rtol=1e-6)
    assert np.all(np.isinf(t_flow[~on])) and np.all(np.isinf(t_exact[~on]))


def test_logistic_closed_form_values():
    eps = 1e-6
    lv, beta, c = diag_system(eps)
    t = np.array([0.0, 0.3, 2.0, 10.0, 1e4])
    z = lv.logistic(t).numpy()
    zs, zeta = beta[0] / c[0], 4 * beta[0]
    ref = zs / (1 + (zs / eps - 1) * np.exp(-zeta * t))
    assert np.allclose(z[:, 0], ref, rtol=1e-13)
    # β = 0: dz/dt = −4cz² ⇒ 1/z = 1/ε + 4ct ; β < 0 : decays
    assert np.allclose(z[:, 3], 1 / (1 / eps + 4 * c[3] * t), rtol=1e-13)
    b, cc = beta[4], c[4]
    with np.errstate(over="ignore"):
        ref4 = 1 / ((1 / eps - cc / b) * np.exp(-4 * b * t) + cc / b)
    assert np.allclose(z[:, 4], ref4, rtol=1e-12)
    assert z[-1, 4] == 0.0 or z[-1, 4] < 1e-300  # underflows gracefully, no NaN


def test_gd_map_converges_to_flow_first_order_in_eta():
    lv, beta, c = diag_system(1e-4)
    T = 6.0
    errs = []
    for eta in (4e-3, 2e-3, 1e-3):
        sol = lv.gd(eta, int(round(T / eta)))
        errs.append(np.max(np.abs(sol.z.numpy()[-1] - lv.logistic([T]).numpy()[0])))
    assert 1.7 < errs[0] / errs[1] < 2.3 and 1.7 < errs[1] / errs[2] < 2.3


def test_interacting_flow_equals_gd_small_step_and_sparse_equals_dense():
    rng = np.random.default_rng(0)
    K = 30
    main = 1.0 + rng.random(K)
    off = 0.3 * rng.standard_normal(K - 1)
    Cs = sp.diags([off, main, off], [-1, 0, 1]).tocsr()
    Cd = Cs.toarray()
    beta = Cd @ rng.random(K) + 0.1 * rng.standard_normal(K)
    dense = LotkaVolterra(beta, Cd, 1e-12)
    sparse = LotkaVolterra(beta, Cs, 1e-12)
    assert not sparse.is_diagonal
    T = 4000.0
    a = dense.flow(T, n_points=101)
    b = sparse.flow(T, n_points=101)
    assert a.success and b.success
    assert np.max(np.abs(a.log_z.numpy() - b.log_z.numpy())) < 1e-6
    # final states: dense NNLS (sqrt factor), sparse L-BFGS-B, active-set QP agree
    zd, zs = dense.final_state().numpy(), sparse.final_state().numpy()
    zq = ActiveSetQP(Cd, beta).solve()
    assert np.allclose(zd, zq, atol=1e-10) and np.allclose(zd, zs, atol=1e-6)
    assert np.allclose(a.z.numpy()[-1], zd, atol=1e-6)
    # GD with a small step tracks the flow
    eta = 2e-4
    g = dense.gd(eta, 50000, record_every=50)
    ref = dense.flow(g.t.numpy(), rtol=1e-11, atol=1e-11)
    assert np.max(np.abs(g.z.numpy() - ref.z.numpy())) < 5e-3


def test_final_state_kkt_and_loss_stability_singular_c():
    rng = np.random.default_rng(1)
    N, K = 8, 12  # more modes than measurements: C singular
    a = rng.standard_normal((N, K))
    y = a @ np.maximum(rng.standard_normal(K), 0) + 0.1 * rng.standard_normal(N)
    beta, C = a.T @ y / N, a.T @ a / N
    y2 = float(y @ y) / N
    plain = LotkaVolterra(beta, C, 1e-6, y2=y2)
    fact = LotkaVolterra(beta, C, 1e-6, y2=y2, factor=(a / np.sqrt(N), y / np.sqrt(N)))
    zp, zf = plain.final_state().numpy(), fact.final_state().numpy()
    for z in (zp, zf):
        g = C @ z - beta
        assert np.all(z >= 0) and np.all(g > -1e-10) and abs(g @ z) < 1e-10
    x_ref, r = nnls(a, y)
    assert plain.final_loss() == pytest.approx(0.5 * r**2 / N, rel=1e-9, abs=1e-14)
    assert fact.final_loss() == pytest.approx(0.5 * r**2 / N, rel=1e-12, abs=1e-16)
    # near the minimum the stable form keeps precision: compare with the exact residual form
    z = zf + 1e-7 * np.abs(rng.standard_normal(K))
    exact = 0.5 * np.sum((a @ z - y) ** 2) / N
    assert float(fact.loss(z)) == pytest.approx(exact, rel=1e-12)
    assert float(plain.loss(z)) == pytest.approx(exact, rel=1e-7)
    assert float(plain.excess_loss(z)) == pytest.approx(exact - 0.5 * r**2 / N, rel=1e-6)
    # trajectory loss
    traj = np.stack([zf, z])
    assert np.allclose(fact.loss(traj).numpy(), [0.5 * r**2 / N, exact], rtol=1e-12)


def test_plateaus_diagonal_match_logistic_loss():
    eps = 1e-30
    lv, beta, c = diag_system(eps)
    pl = lv.plateaus()
    assert list(pl.modes.numpy()) == [0, 1, 2]
    ts = pl.times.numpy()
    mids = np.concatenate([[ts[0] / 2], 0.5 * (ts[:-1] + ts[1:]), [2 * ts[-1]]])
    L = lv.loss(lv.logistic(mids)).numpy()
    assert np.allclose(L, pl.losses.numpy(), rtol=1e-6)


def test_switch_times_interpolation_exact_on_power_law():
    t = np.array([0.0, 1.0, 2.0, 4.0, 8.0])
    z = np.stack([1e-3 * np.maximum(t, 1e-9) ** 2, 1e-3 * np.maximum(t, 1e-9) ** 3], axis=1)
    out = switch_times(t, z, final=[0.02, 1.0], fraction=0.5).numpy()
    # ln z linear in ln t between grid points: interpolation is exact
    assert out[0] == pytest.approx(np.sqrt(10.0), rel=1e-12)
    assert out[1] == pytest.approx(500.0 ** (1 / 3), rel=1e-12)
    out = switch_times(t, z, final=[1e3, 0.0]).numpy()
    assert np.all(np.isinf(out))
    with pytest.raises(ValueError, match="`z` must not contain NaN"):
        switch_times(t, np.full((5, 2), np.nan), final=[1.0, 1.0])


def test_bad_inputs():
    beta = np.array([1.0, 0.5])
    with pytest.raises(ValueError, match="positive semi-definite"):
        LotkaVolterra(beta, np.array([[1.0, 2.0], [2.0, 1.0]]), 1e-3)
    with pytest.raises(ValueError, match="positive semi-definite"):
        LotkaVolterra(beta, np.array([1.0, -1.0]), 1e-3)
    with pytest.raises(ValueError, match="symmetric"):
        LotkaVolterra(beta, np.array([[1.0, 0.1], [0.0, 1.0]]), 1e-3)
    for eps in (0.0, -1e-8):
        with pytest.raises(ValueError, match=r"`z0` \(the initial scale ε\) must be > 0"):
            LotkaVolterra(beta, np.eye(2), eps)
    with pytest.raises(ValueError, match="`z0` must be ≥ 0"):
        LotkaVolterra(beta, np.eye(2), [1e-3, -1e-3])
    with pytest.raises(NonFiniteError, match="`beta` must be finite"):
        LotkaVolterra([np.nan, 1.0], np.eye(2), 1e-3)
    with pytest.raises(NonFiniteError, match="`C` must be finite"):
        LotkaVolterra(beta, np.array([[np.nan, 0], [0, 1.0]]), 1e-3)
    with pytest.raises(ShapeError, match="`C` must have shape"):
        LotkaVolterra(beta, np.eye(3), 1e-3)
    with pytest.raises(ValueError, match="unbounded below"):
        LotkaVolterra(beta, np.diag([1.0, 0.0]), 1e-3)
    lv = LotkaVolterra(beta, np.array([[1.0, 0.5], [0.5, 1.0]]), 1e-3)
    with pytest.raises(ValueError, match="needs a diagonal `C`"):
        lv.logistic([1.0])
    with pytest.raises(ValueError, match="`eta`"):
        lv.gd(-0.1, 10)
    with pytest.raises(ValueError, match="`method`"):
        lv.flow(1.0, method="RK45")
    from nqf.errors import DivergenceError

    with pytest.raises(DivergenceError, match="diverged"):
        LotkaVolterra(beta, np.eye(2), 1.0).gd(50.0, 200)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_final_state_singular_commuting_is_the_end_of_the_flow(seed):
    """Underdetermined commuting sensing (K = 6 modes, N = 4 measurements: C = AᵀA of rank 4).

    Reference: an independent stiff integration of du/dt = 4(β − C e^u) (scipy LSODA, rtol 1e-12, in log
    coordinates) from z(0) = ε to t = 400.  final_state must equal its end to 1e-8 and switch_times must
    be finite for every mode the flow learns.  The NNLS minimiser (the previous answer) is a different
    point of the same optimal face."""
    from scipy.integrate import solve_ivp
    from scipy.optimize import nnls

    rng = np.random.default_rng(seed)
    N, K, eps = 4, 6, 1e-12
    A = rng.standard_normal((N, K)) / np.sqrt(N)
    b = A @ rng.uniform(0.5, 1.5, K) + 0.05 * rng.standard_normal(N)
    C, beta = A.T @ A, A.T @ b
    lv = LotkaVolterra(beta, C, eps, factor=(A, b))
    sol = solve_ivp(
        lambda t, u: 4 * (beta - C @ np.exp(u)),
        (0, 400.0),
        np.full(K, np.log(eps)),
        method="LSODA",
        rtol=1e-12,
        atol=1e-12,
        jac=lambda t, u: -4 * C * np.exp(u)[None, :],
    )
    z_end = np.exp(sol.y[:, -1])
    zf = lv.final_state().numpy()
    assert np.max(np.abs(zf - z_end)) < 1e-8 * max(1.0, z_end.max())
    # same loss as any minimiser, but a different point than NNLS picks
    x_nnls, _ = nnls(A, b)
    assert abs(0.5 * np.sum((A @ zf - b) ** 2) - 0.5 * np.sum((A @ x_nnls - b) ** 2)) < 1e-12
    if seed == 1:  # the check can fail: here NNLS picks another minimiser (mode 4 at 0 instead of 5.5e-4)
        assert np.max(np.abs(x_nnls - z_end)) > 1e-4
    learned = z_end > 1e-6
    st = lv.flow(400.0, n_points=801).switch_times().numpy()
    assert np.isfinite(st[learned]).all()
