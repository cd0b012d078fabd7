"""The incremental ε → 0 limit (``nqf.reductions.lv.limit``) against independent dense references.

The active-set construction keeps a partial Cholesky factor of ``C`` (the active modes as
pivots), updated by one column per addition and by Givens rotations per deletion, and the
velocities of the inactive modes from it; here every output is recomputed from scratch with
dense linear algebra (docs/theory.md §4.3):

* the final state against scipy's NNLS on a square-root factor of ``C`` (KKT conditions of
  ``min_{z ≥ 0} −βᵀz + ½zᵀCz``: ``z ≥ 0``, ``β − Cz ≤ 0``, ``= 0`` on the support);
* every plateau against the restricted optimum ``C_SS z_S = β_S``, ``z_S > 0``;
* the piecewise-linear paths ``s(τ)`` against the velocities ``4(β − Cz)`` of each plateau
  (dense ``C @ z``), which also fixes every event time;
* the end state of the stiff LV flow from small ε.

Each check is shown to fail on a planted error.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import nnls

from nqf.reductions.lv._limit import limit
from nqf.reductions.lv._qp import ActiveSetQP
from nqf.reductions.lv._system import LotkaVolterra

# round-off of the restricted solves: the solver refreshes its factor when the optimality
# residual exceeds 1e-10 relative (checked every 16 warm-started solves), so plateaus are
# accurate to well below 1e-9 relative; the tolerances of the dense checks below
RESID = 1e-9
PATH = 1e-9


def problem(kind: str, K: int, seed: int):
    """``(beta, C)`` of a random dense, singular or tridiagonal problem (``β`` in the range of ``C``)."""
    rng = np.random.default_rng(seed)
    if kind == "dense":  # correlated features: modes switch on and later off
        N = 2 * K
        a = rng.standard_normal((N, K)) + 0.5 * rng.standard_normal((N, 1))
        y = a @ np.where(rng.random(K) < 0.5, rng.random(K), 0.0) + 0.5 * rng.standard_normal(N)
        return a.T @ y / N, a.T @ a / N
    if kind == "singular":  # rank N < K: ray steps along null directions
        N = max(K // 2, 2)
        a = rng.standard_normal((N, K))
        y = rng.standard_normal(N)
        return a.T @ y / N, a.T @ a / N
    main = rng.uniform(1.0, 2.0, K)
    off = 0.45 * rng.standard_normal(K - 1)
    C = np.diag(main) + np.diag(off, 1) + np.diag(off, -1)
    C += max(0.0, 0.01 - float(np.linalg.eigvalsh(C)[0])) * np.eye(K)
    return C @ rng.uniform(-0.5, 1.0, K), C


def nnls_reference(beta, C):
    """Minimiser of ``−βᵀz + ½zᵀCz`` over ``z ≥ 0`` by NNLS on ``F = Λ^{1/2}Uᵀ`` (``C = FᵀF``)."""
    lam, U = np.linalg.eigh(C)
    keep = lam > 1e-12 * lam[-1]
    F = np.sqrt(lam[keep])[:, None] * U[:, keep].T
    t = (U[:, keep].T @ beta) / np.sqrt(lam[keep])
    x, _ = nnls(F, t, maxiter=50 * len(beta))
    return x


def scale(beta, C):
    return max(float(np.max(np.abs(beta))), float(np.max(np.diag(C))))


def kkt_violation(beta, C, z):
    """Largest violation of the KKT conditions, relative to the scale of ``β`` and ``C``."""
    g = beta - C @ z
    on = z > 0
    v = [
        max(0.0, -float(z.min())),
        max(0.0, float(g.max())),
        float(np.max(np.abs(g[on]), initial=0.0)),
        abs(float(g @ z)) / max(float(np.sum(z)), 1.0),
    ]
    return max(v) / scale(beta, C)


def plateau_violation(beta, C, events, z_after):
    """Largest ``|C_SS z_S − β_S|`` over the plateaus (relative), ``inf`` if a ``z_S ≤ 0`` or ``z`` ≠ 0 off ``S``."""
    worst = 0.0
    for e, z in zip(events, z_after, strict=True):
        S = np.array(e.active, dtype=int)
        off = np.ones(len(beta), bool)
        off[S] = False
        if len(S) and (np.any(z[S] <= 0) or np.any(z[off] != 0)):
            return np.inf
        if len(S):
            worst = max(worst, float(np.max(np.abs(C[np.ix_(S, S)] @ z[S] - beta[S]))))
    return worst / scale(beta, C)


def path_violation(beta, C, events, z_after, path_tau, path_s):
    """Largest deviation of the paths from straight lines with the dense velocities ``4(β − Cz)``.

    On each segment between breakpoints the state is the plateau after the last event at or
    before its start; inactive modes must move with ``4(β − Cz)`` without reaching 0 inside the
    segment, active modes sit at ``s = 0``, and at every breakpoint but the last a mode with
    positive velocity reaches ``s = 0``.
    """
    bt, bs = np.asarray(path_tau), np.asarray(path_s)
    taus = np.array([e.tau for e in events])
    worst = 0.0
    z = np.zeros(len(beta))
    for i in range(len(bt) - 1):
        done = np.flatnonzero(taus <= bt[i])
        if len(done):
            z = z_after[done[-1]]
        v = 4.0 * (beta - C @ z)
        act = z > 0
        fin = np.isfinite(bs[i]) & ~act
        pred = bs[i, fin] + v[fin] * (bt[i + 1] - bt[i])
        worst = max(worst, float(np.max(np.abs(np.minimum(pred, 0.0) - bs[i + 1, fin]), initial=0.0)))
        if i < len(bt) - 2:  # inside the segment no inactive mode crosses 0
            worst = max(worst, float(np.max(pred, initial=-np.inf)))
            worst = max(worst, abs(float(np.max(bs[i + 1, fin], initial=0.0))))  # ... one reaches it
        worst = max(worst, float(np.max(np.abs(bs[i + 1, act]), initial=0.0)))
    return worst


def outputs(res):
    """``(events, plateau states, path_tau, path_s)`` of a :class:`LimitResult` as numpy."""
    return res.events, res.z_after, res.path_tau.numpy(), res.path_s.numpy()


CASES = [
    (kind, K, seed)
    for kind in ("dense", "singular", "tridiagonal")
    for K, seed in ((5, 0), (40, 1), (120, 2), (300, 3))
]


@pytest.mark.parametrize("kind,K,seed", CASES)
def test_limit_matches_dense_references(kind, K, seed):
    beta, C = problem(kind, K, seed)
    res = limit(beta, C)
    z = res.z_final.numpy()
    x = nnls_reference(beta, C)
    s = scale(beta, C)
    # final state: KKT, and the unique fit C z (z itself is not unique for singular C)
    assert kkt_violation(beta, C, z) < RESID
    assert np.max(np.abs(C @ z - C @ x)) < 1e-8 * s
    loss = lambda w: -beta @ w + 0.5 * w @ C @ w  # noqa: E731
    assert loss(z) <= loss(x) + 1e-10 * s * max(1.0, float(np.sum(x)))
    if kind != "singular":
        assert np.allclose(z, x, atol=1e-8 * s)
    ev, za, pt, ps = outputs(res)
    assert plateau_violation(beta, C, ev, za) < RESID
    assert path_violation(beta, C, ev, za, pt, ps) < PATH
    assert np.all(np.diff(res.taus.numpy()) >= 0)
    # the finite active-set solver (final state of a dense LotkaVolterra) agrees
    zq = ActiveSetQP(C, beta).solve()
    assert kkt_violation(beta, C, zq) < RESID
    if K >= 120 and kind != "tridiagonal":
        assert "off" in res.kinds  # deletions (Givens updates of the factor) are exercised


def test_planted_errors_are_detected():
    beta, C = problem("dense", 40, 1)
    res = limit(beta, C)
    z = res.z_final.numpy()
    ev, za, pt, ps = outputs(res)
    assert kkt_violation(beta, C, z) < RESID and path_violation(beta, C, ev, za, pt, ps) < PATH
    # one entry of the final state moved by 1e-6: KKT fails
    k = int(np.flatnonzero(z > 0)[0])
    zbad = z.copy()
    zbad[k] += 1e-6
    assert kkt_violation(beta, C, zbad) > RESID
    # one entry of C perturbed (symmetrically): the limit of the wrong problem fails the checks
    Cbad = C.copy()
    i, j = np.flatnonzero(z > 0)[:2]
    Cbad[i, j] += 1e-5
    Cbad[j, i] += 1e-5
    bad = limit(beta, Cbad)
    assert kkt_violation(beta, C, bad.z_final.numpy()) > RESID
    assert plateau_violation(beta, C, *outputs(bad)[:2]) > RESID
    assert np.max(np.abs(bad.z_final.numpy() - nnls_reference(beta, C))) > 1e-8 * scale(beta, C)
    # one breakpoint of one path moved: the path check fails
    ps = ps.copy()
    ps[3, int(np.argmin(ps[3]))] += 1e-6
    assert path_violation(beta, C, ev, za, pt, ps) > PATH


def test_limit_is_the_end_state_of_the_flow_from_small_eps():
    """Tridiagonal K = 60: the stiff log-coordinate flow (banded Jacobian) from z(0) = ε ends at z_final."""
    beta, C = problem("tridiagonal", 60, 7)
    res = limit(beta, C)
    eps = 1e-30
    T = 2.0 * float(res.path_tau[-1]) * np.log(1 / eps)
    sol = LotkaVolterra(beta, sp.csr_matrix(C), eps).flow(T, n_points=3, rtol=1e-10, atol=1e-12)
    assert sol.success
    zT = sol.z.numpy()[-1]
    z = res.z_final.numpy()
    # active modes relax exponentially in O(1) time t; inactive ones stay exponentially small in ln(1/ε)
    assert np.max(np.abs(zT - z)) < 1e-6 * scale(beta, C)
    assert set(np.flatnonzero(zT > 1e-3 * z.max()).tolist()) == set(res.final_active)


@pytest.mark.parametrize("kind,K,seed", [("dense", 120, 2), ("singular", 120, 5), ("dense", 300, 3)])
def test_active_set_steps_are_restricted_optima_without_refresh(kind, K, seed):
    """Each ``add`` ends at the dense solution of ``C_PP z_P = β_P`` on its support, and the
    incrementally updated factor never drifts far enough to need a recomputation (a wrong
    insertion or deletion update would be repaired by a refresh, counted in ``refreshes``)."""
    beta, C = problem(kind, K, seed)
    qp = ActiveSetQP(C, beta)
    removed = 0
    for _ in range(10 * K):
        g = beta - C @ qp.z  # dense gradient, independent of the solver's blocks
        cand = ~qp.in_p & (g > 1e-12 * scale(beta, C))
        if not cand.any():
            break
        removed += len(qp.add(int(np.argmax(np.where(cand, g, -np.inf)))))
        P = qp.support()
        assert set(P.tolist()) == set(np.flatnonzero(qp.z > 0).tolist())
        xP = np.linalg.solve(C[np.ix_(P, P)], beta[P])
        assert np.max(np.abs(qp.z[P] - xP)) < RESID * max(1.0, float(np.max(np.abs(xP))))
        out = ~qp.in_p
        assert np.max(np.abs(qp.free_gradient()[out] - (beta - C @ qp.z)[out]), initial=0.0) < RESID * scale(beta, C)
    assert removed > 0 and qp.refreshes == 0
    assert kkt_violation(beta, C, qp.z) < RESID
