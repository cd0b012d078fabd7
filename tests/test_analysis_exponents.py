"""Exponent prediction (a − 1)/b from mode spectra and the exact sum-of-logistics loss (docs/theory.md §5)."""

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from nqf.curves._exponents import predict_exponent, predicted_curve, predicted_switch_times
from nqf.curves._powerlaw import fit_power_law
from nqf.errors import NonFiniteError, ShapeError

K = 20_000
PAIRS = [(2.0, 1.0), (3.0, 1.5), (2.5, 2.0)]


@pytest.mark.parametrize("a,b", PAIRS)
@pytest.mark.parametrize("eps", [1e-2, 1e-6])
def test_fitted_exponent_matches_prediction(a, b, eps):
    """K = 20 000 modes, ℓ_k = k^{−a}, ζ_k = k^{−b}, z_k(0) = ε z*_k (relative convention).

    Stated window: from the switch-on of mode 10 to that of mode K/10, t ∈ [t*_10, t*_{K/10}], with
    t*_k = ln(1/ε − 1)/ζ_k — well inside the resolved modes (docs/theory.md §5).  The exponent fitted
    on the exact loss must be within ±0.05 of (a − 1)/b; so must the automatic window's.
    """
    k = np.arange(1, K + 1, dtype=float)
    ell, zeta = k**-a, k**-b
    pred = predict_exponent(ell, zeta)
    assert abs(pred.a - a) < 1e-10 and abs(pred.b - b) < 1e-10
    assert abs(pred.exponent - (a - 1) / b) < 1e-10
    ts = predicted_switch_times(zeta, eps)
    t = np.geomspace(ts[0] / 10, ts[-1] * 10, 500)
    L = predicted_curve(t, ell, zeta, eps)
    f = fit_power_law(t, L, window=(ts[9], ts[K // 10 - 1]), n_boot=50)
    assert abs(f.exponent - (a - 1) / b) < 0.05
    fa = fit_power_law(t, L, n_boot=0)
    assert abs(fa.exponent - (a - 1) / b) < 0.05
    # the ln(1/ε) scaling: L(t) − L_∞ ~ (t/ln(1/ε))^{−(a−1)/b}, so the prefactor scales as ln(1/ε)^{(a−1)/b}
    # (checked in test_prefactor_scales_with_log_eps)


def test_prefactor_scales_with_log_eps():
    a, b = 2.0, 1.0
    k = np.arange(1, K + 1, dtype=float)
    ell, zeta = k**-a, k**-b
    tau = np.geomspace(30, 3000, 200)  # rescaled time t/ln(1/ε), inside the resolved modes
    curves = []
    for eps in (1e-4, 1e-12):
        t = tau * math.log(1 / eps)
        curves.append(predicted_curve(t, ell, zeta, eps))
    # in rescaled time the two curves coincide up to O(1/ln(1/ε)) corrections of the switch times
    assert np.allclose(curves[0], curves[1], rtol=0.15)


def test_predicted_curve_against_ode_and_closed_form():
    """A few modes: the exact formula vs direct integration of dz/dt = ζ z (1 − z/z*) (both conventions)."""
    zeta = np.array([3.0, 1.0, 0.4])
    zstar = np.array([2.0, 0.5, 1.5])
    Ckk = np.array([1.0, 4.0, 0.5])
    ell = 0.5 * Ckk * zstar**2
    t = np.linspace(0, 60, 301)
    for conv, z0 in (("relative", 1e-6 * zstar), ("absolute", np.full(3, 1e-6))):
        sol = solve_ivp(
            lambda _, u: zeta * (1 - np.exp(u) / zstar),
            (0, 60),
            np.log(z0),
            t_eval=t,
            method="Radau",
            rtol=1e-11,
            atol=1e-12,
        )
        z = np.exp(sol.y)
        L_ode = 0.25 + (0.5 * Ckk[:, None] * (zstar[:, None] - z) ** 2).sum(0)
        L = predicted_curve(t, ell, zeta, 1e-6, z0_convention=conv, z_star=zstar, L_inf=0.25)
        assert np.allclose(L, L_ode, rtol=1e-7, atol=1e-10)
        # half-saturation times
        th = predicted_switch_times(zeta, 1e-6, conv, z_star=zstar)
        expected = np.log(zstar / z0 - 1) / zeta
        assert np.allclose(th, expected, rtol=1e-12)
    # a mode that starts above its target (absolute convention, z* < ε) relaxes down to it
    L = predicted_curve([0.0, 100.0], [1.0], [1.0], 0.5, "absolute", z_star=[0.25])
    assert math.isclose(L[0], (1 - 0.5 / 0.25) ** 2, rel_tol=1e-12) and L[1] < 1e-40
    assert predicted_switch_times([1.0], 0.5, "absolute", z_star=[0.25])[0] == 0.0


def test_extreme_eps_and_order():
    ell, zeta = np.array([1.0, 0.5]), np.array([1.0, 2.0])
    t = np.array([0.0, 400.0, 800.0, 1e4])
    L = predicted_curve(t, ell, zeta, 1e-300)
    assert np.all(np.isfinite(L)) and math.isclose(L[0], 1.5, rel_tol=1e-12) and L[-1] == 0.0
    # mode 2 (ζ = 2) switches at ln(1e300)/2 ≈ 345 before mode 1 (≈ 691)
    assert math.isclose(L[1], 1.0, rel_tol=1e-3) and math.isclose(L[2], 0.0, abs_tol=1e-3)
    # predict_exponent sorts by rate: a shuffled spectrum gives the same answer
    k = np.arange(1, 501, dtype=float)
    perm = np.random.default_rng(0).permutation(500)
    p1, p2 = predict_exponent(k**-3.0, k**-1.5), predict_exponent((k**-3.0)[perm], (k**-1.5)[perm])
    assert math.isclose(p1.exponent, p2.exponent, rel_tol=1e-12)
    assert np.array_equal(perm[p2.order], np.arange(500))
    # noisy spectra over a restricted range
    rng = np.random.default_rng(1)
    p3 = predict_exponent(k**-2.0 * np.exp(0.05 * rng.standard_normal(500)), k**-1.0, k_range=(10, 500))
    assert abs(p3.exponent - 1.0) < 5 * p3.a_stderr + 1e-3 and p3.k_range == (10, 500)


def test_bad_input():
    with pytest.raises(ShapeError, match="same length"):
        predict_exponent([1.0, 0.5], [1.0])
    with pytest.raises(ValueError, match="`zeta`.*positive"):
        predict_exponent([1.0, 0.5, 0.2], [1.0, 0.0, 0.1])
    with pytest.raises(NonFiniteError, match="`ell` must be finite"):
        predict_exponent([1.0, np.nan, 0.2], [1.0, 0.5, 0.1])
    with pytest.raises(ValueError, match="do not decay"):
        predict_exponent([1.0, 0.5, 0.2], [0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="`k_range`"):
        predict_exponent([1.0, 0.5, 0.2], [1.0, 0.5, 0.1], k_range=(2, 3))
    with pytest.warns(RuntimeWarning, match="a = "):
        predict_exponent(np.arange(1, 10.0) ** -0.5, np.arange(1, 10.0) ** -1.0)
    for eps in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="`eps`"):
            predicted_curve([1.0], [1.0], [1.0], eps)
    with pytest.raises(ValueError, match="`z_star`"):
        predicted_curve([1.0], [1.0], [1.0], 1e-3, z0_convention="absolute")
    with pytest.raises(ValueError, match="`z0_convention`"):
        predicted_curve([1.0], [1.0], [1.0], 1e-3, z0_convention="sigma")
    with pytest.raises(ValueError, match="`t`"):
        predicted_curve([-1.0], [1.0], [1.0], 1e-3)


def test_predicted_curve_tail_matches_high_precision_expit():
    """48 modes, β_k = 0.5/k, C = 1 (ζ = 2/k, z* = β, ℓ = ½β²), absolute start ε = 1e-6: the exact sum
    Σ ℓ_k (q e^{−ζt}/(1 + q e^{−ζt}))² in 50-digit arithmetic (mpmath) is matched to relative 1e-10
    wherever it exceeds 1e-300 — also deep in the exponential tail (1e-20 … 1e-300)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    k = np.arange(1, 49, dtype=float)
    beta = 0.5 / k
    zeta, ell, eps = 4 * beta, 0.5 * beta**2, 1e-6
    t = np.concatenate([np.geomspace(0.1, 100.0, 20), np.linspace(200.0, 9000.0, 60)])
    got = predicted_curve(t, ell, zeta, eps, "absolute", z_star=beta)
    ref = []
    for tt in t:
        s = mp.mpf(0)
        for b in beta:
            q = mp.mpf(b) / mp.mpf(eps) - 1
            e = q * mp.exp(-4 * mp.mpf(b) * mp.mpf(tt))
            s += mp.mpf(0.5) * mp.mpf(b) ** 2 * (e / (1 + e)) ** 2
        ref.append(s)
    live = np.array([r > mp.mpf("1e-300") for r in ref])
    assert live.sum() > 60 and not live.all()  # the check reaches the far tail and stops at 1e-300
    ref_live = np.array(ref, dtype=object)[live]
    rel = np.array([float(abs(mp.mpf(g) - r) / r) for g, r in zip(got[live], ref_live, strict=True)])
    assert rel.max() < 1e-10
    assert got[live].min() < 1e-250
    # the check can fail: the former 0.5 (1 + tanh(x/2)) form has no correct digits in the tail
    lq = np.log(beta / eps - 1.0)
    arg = lq[None, :] - zeta[None, :] * t[live][:, None]
    old = (ell[None, :] * (0.5 * (1.0 + np.tanh(0.5 * arg))) ** 2).sum(1)
    rel_old = np.array([float(abs(mp.mpf(g) - r) / r) for g, r in zip(old, ref_live, strict=True)])
    assert rel_old.max() > 1e-2
