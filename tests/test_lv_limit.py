"""ε → 0 limit of interacting modes against the stiff log-coordinate integration."""

import numpy as np
import pytest
import torch
from scipy.optimize import nnls

from nqf.errors import NonFiniteError, ShapeError
from nqf.reductions.lv._limit import limit
from nqf.reductions.lv._system import LotkaVolterra


def correlated_example(seed=1, N=200, K=6):
    """Correlated features, a sparse teacher plus noise (6 modes)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((N, K)) @ (np.eye(K) + 0.5 * rng.standard_normal((K, K)))
    y = a @ np.array([1.0, 0.7, 0.5, 0.3, 0.0, 0.0]) + 0.3 * rng.standard_normal(N)
    return a, y, a.T @ y / N, a.T @ a / N


def test_limit_structure_of_example():
    a, y, beta, C = correlated_example()
    res = limit(beta, C)
    on = res.switch_on_times().numpy()
    never = np.flatnonzero(np.isinf(on))
    assert len(never) >= 1  # at least one mode never switches on
    assert "off" in res.kinds  # and one switches on, then off
    # the final plateau is the NNLS solution of the regression (independent solver)
    x, r = nnls(a, y)
    assert np.allclose(res.z_final.numpy(), x, atol=1e-10)
    # plateau losses decrease, end at the excess 0 (y2 omitted), match the NNLS loss with y2
    L = res.losses.numpy()
    assert np.all(np.diff(L) <= 1e-14) and abs(L[-1]) < 1e-14
    y2 = float(y @ y) / len(y)
    res2 = limit(beta, C, y2=y2)
    assert res2.losses.numpy()[-1] == pytest.approx(0.5 * r**2 / len(y), rel=1e-10)
    # each plateau is the restricted optimum of its active set
    for e, z in zip(res.events, res._z_after, strict=True):
        S = list(e.active)
        assert np.all(z[S] > 0) and np.allclose(C[np.ix_(S, S)] @ z[S], beta[S], atol=1e-12)


def test_limit_agrees_with_log_flow_and_converges_like_inverse_log_eps():
    a, y, beta, C = correlated_example()
    K = len(beta)
    res = limit(beta, C)
    ons = [e for e in res.events if e.kind == "on"]
    never = np.flatnonzero(np.isinf(res.switch_on_times().numpy()))
    tau_end = float(res.path_tau[-1])
    diffs, Ls = [], []
    for eps in (1e-40, 1e-120, 1e-300):
        Lg = np.log(1 / eps)
        sol = LotkaVolterra(beta, C, eps).flow(tau_end * Lg, n_points=1001)
        assert sol.success and np.all(np.isfinite(sol.log_z.numpy()))
        # switch-on: z_k reaches half its value on the plateau right after the event
        levels = np.full(K, np.inf)
        for e in ons:
            levels[e.mode] = e.value / 2
        t_on = sol.crossing_times(levels).numpy() / Lg
        diffs.append(np.array([t_on[e.mode] - e.tau for e in ons]))
        Ls.append(Lg)
        # modes that never switch on stay exponentially small: s = ln z / ln(1/ε) well below 0
        s_end = sol.log_z.numpy()[-1] / Lg
        assert np.all(s_end[never] < -0.1)
        # the piecewise-linear limit paths of inactive modes match the flow within O(1/ln(1/ε))
        s_lim = res.s_at([tau_end]).numpy()[0]
        assert np.all(np.abs(s_end[never] - s_lim[never]) < 5.0 / Lg)
    diffs = np.array(diffs)
    # all differences O(1/ln(1/ε)) and shrinking in proportion
    assert np.all(np.abs(diffs) * np.array(Ls)[:, None] < 5.0)
    worst = int(np.argmax(np.abs(diffs[0])))
    ratio = diffs[0, worst] / diffs[2, worst]
    assert 0.8 * Ls[2] / Ls[0] < ratio < 1.25 * Ls[2] / Ls[0]
    # a least-squares fit d = c/L over the three ε explains every event to within 20 %
    invL = 1 / np.array(Ls)
    for j in range(diffs.shape[1]):
        c = np.dot(invL, diffs[:, j]) / np.dot(invL, invL)
        assert np.max(np.abs(diffs[:, j] - c * invL)) <= 0.2 * np.max(np.abs(diffs[:, j])) + 1e-6


def test_plateaus_of_interacting_system_follow_the_limit():
    a, y, beta, C = correlated_example()
    y2 = float(y @ y) / len(y)
    eps = 1e-60
    lv = LotkaVolterra(beta, C, eps, y2=y2)
    pl = lv.plateaus()
    res = limit(beta, C, y2=y2)
    assert np.allclose(pl.times.numpy(), res.taus.numpy() * np.log(1 / eps), rtol=1e-14)
    assert np.allclose(pl.losses.numpy()[1:], res.losses.numpy(), rtol=1e-10)
    assert pl.losses.numpy()[0] == pytest.approx(0.5 * y2, rel=1e-12)
    # the measured loss on each long plateau (midway between events) matches the prediction
    L = np.log(1 / eps)
    taus = np.unique(res.taus.numpy())
    long = np.diff(taus) > 0.1  # plateaus long enough to be flat at this ε
    mids = 0.5 * (taus[:-1] + taus[1:])[long]
    sol = lv.flow(np.concatenate([[0.0], mids * L]))
    measured = lv.loss(sol.z).numpy()[1:]
    pred = [res.losses.numpy()[np.flatnonzero(res.taus.numpy() == t)[-1]] for t in taus[:-1][long]]
    assert len(pred) >= 3 and np.allclose(measured, pred, rtol=1e-3)


def test_limit_diagonal_is_exact_logistic_limit():
    rng = np.random.default_rng(2)
    K = 8
    beta = rng.uniform(-0.5, 2.0, K)
    c = rng.uniform(0.5, 2.0, K)
    s0 = -rng.uniform(0.5, 1.5, K)
    res = limit(beta, np.diag(c), s0)
    tau = res.switch_on_times().numpy()
    on = beta > 0
    # straight lines from s0 with slope 4β, no interaction
    assert np.allclose(tau[on], -s0[on] / (4 * beta[on]), rtol=1e-14)
    assert np.all(np.isinf(tau[~on]))
    # against the exact logistic at ε = 1e-200 (z0 = ε^{−s0}): relative error O(1/ln(1/ε))
    eps = 1e-200
    lv = LotkaVolterra(beta, np.diag(c), np.exp(s0 * np.log(1 / eps)))
    t_log = lv.logistic_switch_times().numpy()[on] / np.log(1 / eps)
    assert np.allclose(t_log, tau[on], rtol=5 / np.log(1 / eps))


def test_limit_singular_c_and_initial_active_set():
    rng = np.random.default_rng(3)
    N, K = 5, 9  # rank-5 C with 9 modes
    a = rng.standard_normal((N, K))
    y = rng.standard_normal(N)
    beta, C = a.T @ y / N, a.T @ a / N
    s0 = -np.ones(K)
    s0[0] = 0.0  # starts at O(1)
    s0[1] = -np.inf  # starts at exactly 0: never moves
    res = limit(beta, C, s0, y2=float(y @ y) / N)
    assert np.isinf(res.switch_on_times().numpy()[1]) and 0 in res.events[0].active
    mask = np.ones(K, bool)
    mask[1] = False
    x, r = nnls(a[:, mask], y)
    assert res.losses.numpy()[-1] == pytest.approx(0.5 * r**2 / N, abs=1e-12)
    z = res.z_final.numpy()
    g = C @ z - beta
    assert np.all(g[mask] > -1e-10) and abs(g @ z) < 1e-10


def test_limit_medium_random_matches_nnls():
    rng = np.random.default_rng(4)
    N, K = 300, 150
    a = rng.standard_normal((N, K)) + 0.3 * rng.standard_normal((N, 1))
    y = a @ np.where(rng.random(K) < 0.5, rng.random(K), 0) + 0.5 * rng.standard_normal(N)
    beta, C = a.T @ y / N, a.T @ a / N
    res = limit(beta, C)
    x, _ = nnls(a, y)
    assert np.allclose(res.z_final.numpy(), x, atol=1e-9)
    assert np.all(np.diff(res.taus.numpy()) >= 0)


def test_limit_bad_inputs():
    beta = np.array([1.0, 0.5])
    with pytest.raises(ValueError, match="positive semi-definite"):
        limit(beta, np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match=r"`s0` must be ≤ 0"):
        limit(beta, np.eye(2), [0.5, -1.0])
    with pytest.raises(ValueError, match="`s0` must not contain NaN"):
        limit(beta, np.eye(2), [np.nan, -1.0])
    with pytest.raises(NonFiniteError, match="`beta` must be finite"):
        limit([np.nan, 1.0], np.eye(2))
    with pytest.raises(ShapeError, match="`C` must have shape"):
        limit(beta, np.eye(3))
    with pytest.raises(ValueError, match="unbounded below"):
        limit(beta, np.diag([1.0, 0.0]))
    # a null direction d = (1, 1) ≥ 0 of C with βᵀd > 0: the loss is unbounded below
    Cnull = np.array([[1.0, -1.0], [-1.0, 1.0]])
    with pytest.raises(ValueError, match="unbounded below along a null direction"):
        limit(np.array([1.0, 1.0]), Cnull)
    with pytest.raises(ValueError, match="unbounded below along a null direction"):
        LotkaVolterra(np.array([1.0, 1.0]), Cnull, 1e-3).final_state()
    lv = LotkaVolterra(beta, np.array([[1.0, 0.5], [0.5, 1.0]]), 1e-10)
    with pytest.raises(ValueError, match="`eps` must lie in"):
        lv.limit(eps=2.0)
    res = lv.limit()
    assert res.eps == pytest.approx(1e-10)
    sub = LotkaVolterra(beta, np.eye(2), 5e-324).limit()  # ln(1/ε) must not overflow
    assert np.allclose(sub.switch_on_times().numpy(), 1 / (4 * beta))
    assert torch.allclose(res.path_s[0], torch.full((2,), -1.0, dtype=torch.float64))
