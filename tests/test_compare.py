"""nqf.curves._compare: crossings, plateau levels, flatness against the adjacent drop; detect_steps from t = 0."""

import numpy as np
import pytest

from nqf.curves._compare import compare_staircase, downward_crossings, plateau_flatness, regime_exit
from nqf.curves._steps import detect_steps


def _staircase(t, levels, times, width):
    """Smooth staircase: logistic drops of the given width at the given times (closed form)."""
    L = np.full_like(t, levels[-1])
    for k, tk in enumerate(times):
        L += (levels[k] - levels[k + 1]) / (1 + np.exp((t - tk) / width))
    return L


def test_crossings_levels_and_flatness_on_a_closed_form_staircase():
    t = np.linspace(0, 30, 3001)
    levels, times = np.array([1.0, 0.6, 0.3]), np.array([8.0, 20.0])
    L = _staircase(t, levels, times, 0.2)
    c = compare_staircase(t, L, levels, times)
    # logistic drops cross their midpoint exactly at t_k (the other drop adds < e^-30)
    np.testing.assert_allclose(c.times_measured, times, rtol=1e-6)
    np.testing.assert_allclose(c.levels_measured, levels, rtol=1e-6)
    # plateau 0: the logistic tail across its middle third [8/3, 16/3] is e^{-(8 - 16/3)/0.2} of the drop
    assert c.flatness[0] == pytest.approx(np.exp(-(8 - 16 / 3) / 0.2), rel=1e-3)
    assert c.flat.all()
    assert "drops=2" in repr(c) and c.to_dict()["flat"] == [True, True, True]


def test_flatness_is_judged_against_the_adjacent_drop_not_the_loss():
    # a slow slope across the middle plateau: the loss changes 3 % of itself but 40 % of the adjacent drop
    t = np.linspace(0, 30, 3001)
    levels, times = np.array([1.0, 0.9, 0.8]), np.array([8.0, 20.0])
    L = _staircase(t, levels, times, 0.2) - 0.04 / 12 * np.clip(t - 8, 0, 12) * 3 / 1.0 * (t < 20)
    f = plateau_flatness(t, L, levels, times)
    assert f[1] == pytest.approx(0.04 * (16 - 12) / 12 * 3 / 0.1, rel=1e-3)  # change over middle third / 0.1
    assert f[1] > 0.25
    c = compare_staircase(t, L, levels, times)
    assert not c.flat[1] and c.flat[0]


def test_downward_crossing_never_reached_is_nan_and_first_point_counts():
    t = np.array([0.0, 1.0, 2.0])
    assert np.isnan(downward_crossings(t, [1.0, 0.9, 0.8], [0.5])[0])
    assert downward_crossings(t, [1.0, 0.5, 0.0], [0.75])[0] == pytest.approx(0.5)
    assert downward_crossings(t, [0.4, 0.3, 0.2], [0.5])[0] == 0.0


def test_regime_exit_gap_and_below_minimum():
    t = np.arange(5.0)
    r = regime_exit(t, [1.0, 0.8, 0.5, 0.3, 0.28], [1.0, 0.8, 0.5, 0.31, 0.31], np.arange(5) * 10, 0.3)
    assert r["left_step"] == 40 and "below the NQF global minimum" in r["reason"]
    r = regime_exit(t, [1.0, 0.9, 0.7, 0.5, 0.4], [1.0, 0.9, 0.5, 0.5, 0.4], np.arange(5), None)
    assert r["left_step"] == 2 and r["max_gap"] == pytest.approx(0.4)
    assert regime_exit(t, np.ones(5), np.ones(5), np.arange(5), 0.5)["left_step"] is None


def test_detect_steps_accepts_a_curve_starting_at_t0():
    t = np.linspace(0, 40, 4001)
    L = _staircase(t, np.array([1.0, 0.5, 0.2]), np.array([10.0, 25.0]), 0.3)
    s = detect_steps(t, L)
    assert len(s) == 2
    np.testing.assert_allclose(s.times, [10.0, 25.0], rtol=0.05)
