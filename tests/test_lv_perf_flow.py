"""The stiff log-coordinate LV flow with a banded Jacobian (sparse C) against the dense solver.

For a tridiagonal ``C`` the flow ``du/dt = 4(β − C e^u)`` is integrated by LSODA with its
Jacobian ``−4 C diag(e^u)`` in packed banded form (``O(K)`` per step); the reference is the
same integrator given the dense Jacobian of the dense ``C``.  The two differ only in how the
Newton matrix is stored and factored, so their difference is a global integration error: it
must scale with the tolerance (docs/theory.md §4.1).
"""

import numpy as np
import scipy.sparse as sp

from nqf.reductions.lv._system import LotkaVolterra


def tridiagonal(K=200, seed=0):
    rng = np.random.default_rng(seed)
    main = rng.uniform(1.0, 2.0, K)
    off = 0.25 * rng.standard_normal(K - 1)
    Cs = sp.diags([off, main, off], [-1, 0, 1]).tocsr()
    return Cs @ rng.uniform(-0.3, 1.0, K), Cs


def test_banded_flow_equals_dense_flow_to_tolerance():
    beta, Cs = tridiagonal()
    eps = 1e-12
    T = 3 * np.log(1 / eps) / (4 * 0.05)  # past the slowest switch-on, into the final plateau
    banded = {r: LotkaVolterra(beta, Cs, eps).flow(T, n_points=201, rtol=r, atol=r) for r in (1e-8, 1e-10)}
    assert all(s.success and s.method == "LSODA" for s in banded.values())
    dense = LotkaVolterra(beta, Cs.toarray(), eps).flow(T, n_points=201, rtol=1e-10, atol=1e-10, method="LSODA")
    assert dense.success
    u_d = dense.log_z.numpy()
    dev = {r: float(np.max(np.abs(s.log_z.numpy() - u_d))) for r, s in banded.items()}
    # global error of an rtol-controlled integration over ~10³ steps: ≲ 10³ rtol, and it falls
    # with the tolerance (both integrate the same ODE)
    assert dev[1e-10] < 1e3 * 1e-10
    assert dev[1e-10] < 0.1 * dev[1e-8]
    # planted error: one off-diagonal entry of C changed by 1e-3 is seen far above the tolerance
    Cbad = Cs.tolil()
    Cbad[10, 11] += 1e-3
    Cbad[11, 10] += 1e-3
    bad = LotkaVolterra(beta, Cbad.tocsr(), eps).flow(T, n_points=201, rtol=1e-10, atol=1e-10)
    assert np.max(np.abs(bad.log_z.numpy() - u_d)) > 1e3 * 1e-10


def test_banded_flow_with_wider_band_and_off_modes_equals_dense_flow():
    """A pentadiagonal ``C``, some modes started at exactly 0 (left out of the integration, so the
    integrated ``C`` is a non-contiguous restriction), and an explicit ``LSODA`` on a band wider than
    ``BAND_MAX``: each equals the dense-Jacobian integration to the tolerance's global error."""
    from nqf.reductions.lv._solvers import BAND_MAX

    rng = np.random.default_rng(3)
    K = 120
    main = rng.uniform(2.0, 3.0, K)
    o1, o2 = 0.3 * rng.standard_normal(K - 1), 0.2 * rng.standard_normal(K - 2)
    Cs = sp.diags([o2, o1, main, o1, o2], [-2, -1, 0, 1, 2]).tocsr()
    beta = Cs @ rng.uniform(-0.3, 1.0, K)
    z0 = np.full(K, 1e-10)
    z0[::7] = 0.0
    T = 3 * np.log(1e10) / (4 * 0.05)
    kw = dict(n_points=101, rtol=1e-10, atol=1e-10)
    dense = LotkaVolterra(beta, Cs.toarray(), z0).flow(T, method="LSODA", **kw)
    banded = LotkaVolterra(beta, Cs, z0).flow(T, **kw)
    assert banded.method == "LSODA" and dense.success and banded.success
    u_d, u_b = dense.log_z.numpy(), banded.log_z.numpy()
    assert np.array_equal(np.isinf(u_d), np.isinf(u_b)) and np.isinf(u_b[:, ::7]).all()
    fin = np.isfinite(u_d)
    assert np.max(np.abs(u_b[fin] - u_d[fin])) < 1e3 * 1e-10
    # a band wider than BAND_MAX: "auto" takes BDF with the sparse Jacobian, an explicit LSODA the packed band
    w = BAND_MAX + 10  # still wider than BAND_MAX once every 7th mode is left out
    Cw = (Cs + sp.diags([0.01 * np.ones(K - w)] * 2, [-w, w])).tocsr()
    for method in ("auto", "LSODA"):
        sw = LotkaVolterra(beta, Cw, z0).flow(T, method=method, **kw)
        assert sw.success and sw.method == ("BDF" if method == "auto" else "LSODA")
        dw = LotkaVolterra(beta, Cw.toarray(), z0).flow(T, method=sw.method, **kw).log_z.numpy()
        assert np.max(np.abs(sw.log_z.numpy()[fin] - dw[fin])) < 1e3 * 1e-10
