"""Crowded drops (issue 22): the curves functions and the scaling-real experiment's planted errors."""

import math

import numpy as np
import pytest

from nqf import Staircase
from nqf.app._experiments import REGISTRY, run_experiment
from nqf.curves import compare_crowded, crowded_prediction, drop_widths, predicted_curve


def _power_staircase(eps=1e-6, K=60, gamma=1.0):
    """Logistic modes ζ_k = 4k^−γ, ℓ_k = ½k^−2γ, relative start: crowded once k is large."""
    k = np.arange(1, K + 1, dtype=float)
    zeta, ell = 4 * k**-gamma, 0.5 * k ** (-2 * gamma)
    times = math.log(1 / eps - 1) / zeta
    levels = np.concatenate([[ell.sum()], ell.sum() - np.cumsum(ell)])
    return (
        Staircase(
            "lotka-volterra",
            eps,
            levels,
            times,
            ("logistic",) * K,
            times,
            np.append(zeta, 0.0),
            np.arange(K + 1),
            np.eye(K),
            np.arange(K),
        ),
        ell,
        zeta,
    )


def test_crowded_window_and_exact_curve_inside_the_band():
    st, ell, zeta = _power_staircase()
    cp = crowded_prediction(st)
    assert cp.crowded and cp.window[1] > cp.window[0] and cp.t.size == 20
    assert np.all(np.diff(st.times)[cp.drops[0] - 1 : cp.drops[1] - 1] < drop_widths(st)[cp.drops[0] : cp.drops[1]])
    t = np.geomspace(cp.window[0] / 2, cp.window[1] * 2, 4000)
    L = predicted_curve(t, ell, zeta, st.eps)  # the exact sum, independent of the staircase route
    c = compare_crowded(cp, t, L, n_boot=50)
    assert c.all_inside and c.worst == 0.0, c
    assert c.fit.ci[0] - 0.02 <= cp.window_exponent <= c.fit.ci[1] + 0.02
    assert cp.exponent is not None and abs(cp.exponent - 1.0) < 0.05  # (a − 1)/b = (2 − 1)/1
    assert "CrowdedPrediction(" in repr(cp) and cp.to_dict()["crowded"] is True


def test_planted_eps_off_by_1e4_leaves_the_band():
    st, ell, zeta = _power_staircase(eps=1e-6)
    wrong, _, _ = _power_staircase(eps=1e-2)  # ε off by 10⁴
    cp = crowded_prediction(wrong)
    t = np.geomspace(cp.window[0] / 2, cp.window[1] * 2, 4000)
    c = compare_crowded(cp, t, predicted_curve(t, ell, zeta, st.eps), n_boot=20)
    assert not c.all_inside


def test_separated_drops_are_not_crowded():
    K = 5
    zeta = np.full(K, 4.0)
    times = np.arange(1, K + 1) * 10.0
    st = Staircase(
        "lotka-volterra",
        1e-6,
        np.arange(K + 1)[::-1] + 1.0,
        times,
        ("logistic",) * K,
        times,
        np.append(zeta, 0),
        np.arange(K + 1),
        np.eye(K),
        np.arange(K),
    )
    assert not crowded_prediction(st).crowded


@pytest.mark.slow
def test_scaling_real_planted_shuffle_fails_a_check(tmp_path):
    exp = REGISTRY["scaling-real"]
    params = exp.Params(**{**exp.tiny, "planted_shuffle": True})
    res = run_experiment(exp, params, tmp_path / "run")
    assert any(c["passed"] is False for c in res["checks"])
