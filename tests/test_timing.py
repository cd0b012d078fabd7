"""The switch-time and crossing functions of nqf.reductions against independent truth: the logistic ODE
integrated numerically, curves whose crossing is known in closed form, and planted errors that
the same checks must catch."""

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from nqf.errors import InvalidParameterError, ShapeError
from nqf.reductions import crossing_time, crossing_times, logistic_switch_time, midpoint_levels
from nqf.reductions._timing import (
    crossing_index,
    leading_switch_time,
    staircase,  # the kernel behind Staircase.loss_curve
)

CASES = [  # (ζ, z*, z(0), fraction)
    (1.0, 1.0, 1e-3, 0.5),
    (0.37, 2.5, 1e-8, 0.5),
    (4.0, 0.2, 1e-12, 0.9),
    (2.0, 3.0, 0.1, 0.6),
    (1.5, 1.0, 0.2, 0.3),
]


def _ode_time(zeta, zs, z0, f):
    """First time dz/dt = ζ z (1 − z/z*) from z0 reaches f z*, by DOP853 (ln z as the variable, rtol 1e-12)."""
    ev = lambda t, u: u[0] - math.log(f * zs)  # noqa: E731
    ev.terminal, ev.direction = True, 1
    sol = solve_ivp(
        lambda t, u: [zeta * (1 - math.exp(u[0]) / zs)],
        (0, 200 / zeta),
        [math.log(z0)],
        method="DOP853",
        rtol=1e-12,
        atol=1e-14,
        events=ev,
    )
    return float(sol.t_events[0][0])


@pytest.mark.parametrize("zeta,zs,z0,f", CASES)
def test_logistic_switch_time_matches_integrated_ode(zeta, zs, z0, f):
    t_ode = _ode_time(zeta, zs, z0, f)
    t = float(logistic_switch_time([zeta], [zs], [z0], f)[0])
    assert abs(t - t_ode) <= 1e-9 * t_ode
    # the same through ln(z*/z0)
    assert float(logistic_switch_time([zeta], log_ratio=[math.log(zs / z0)], fraction=f)[0]) == pytest.approx(
        t, rel=1e-13
    )
    # planted error: dropping the −1 in ln(z*/z0 − 1) is caught by this tolerance for z0 = O(z*) ...
    if z0 / zs > 1e-2:
        wrong = (math.log(zs / z0) - math.log(1 / f - 1)) / zeta
        assert abs(wrong - t_ode) > 1e-9 * t_ode


def test_leading_form_is_the_small_start_limit():
    """t(ε) − ln(1/ε)/ζ → ln(z*)/ζ − ln(1/f − 1)/ζ for z(0) = ε: the leading form misses exactly this O(1)."""
    zeta, zs = 0.8, 2.0
    for eps in (1e-6, 1e-12, 1e-300):
        t = float(logistic_switch_time([zeta], [zs], [eps])[0])
        lead = float(leading_switch_time([zeta], eps)[0])
        assert lead == pytest.approx(math.log(1 / eps) / zeta, rel=1e-15)
        assert t - lead == pytest.approx(math.log(zs) / zeta, rel=1e-5 if eps > 1e-10 else 1e-12)
    # no overflow at z0 = 1e-300 in the exact form either: ln(1e300·z* − 1) = 300 ln 10 + ln z* to round-off
    t = float(logistic_switch_time([zeta], [zs], [1e-300])[0])
    assert t == pytest.approx((300 * math.log(10) + math.log(zs)) / zeta, rel=1e-15)


def test_logistic_switch_time_edge_cases():
    out = logistic_switch_time(
        [1.0, -1.0, 0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, -1.0, 1.0, 1.0], [0.6, 1e-3, 1e-3, 1e-3, 0.0, 1e-3]
    )
    # started above half saturation; decaying mode; no growth; negative z*; z(0) = 0; normal
    assert out[0] == 0.0
    assert np.isinf(out[1:5]).all()
    assert out[5] == pytest.approx(math.log(999.0))
    assert np.isinf(logistic_switch_time([1.0], [1.0], [1e-3], fraction=1.0)[0])  # z* is never reached
    with pytest.raises(InvalidParameterError, match="fraction"):
        logistic_switch_time([1.0], [1.0], [0.1], fraction=1.5)
    with pytest.raises(InvalidParameterError, match="z_star"):
        logistic_switch_time([1.0])
    with pytest.raises(InvalidParameterError, match="eps"):
        leading_switch_time([1.0], 0.0)
    assert np.isinf(leading_switch_time([0.0, -2.0], 0.1)).all()


def test_crossing_exact_on_linear_and_power_law_curves():
    t = np.linspace(0.0, 2.0, 9)
    # linear interpolation is exact on a straight line: 1 − t falls to 0.3 at t = 0.7
    assert crossing_time(t, 1.0 - t, 0.3, direction="down") == pytest.approx(0.7, abs=1e-15)
    assert crossing_time(t, t, 0.7) == pytest.approx(0.7, abs=1e-15)
    # linear in ln t on ln x exact for power laws: x = t³ crosses 5 at t = 5^(1/3)
    tg = np.geomspace(0.1, 10.0, 13)
    assert crossing_time(tg, 3 * np.log(tg), math.log(5.0), log_t=True) == pytest.approx(5 ** (1 / 3), rel=1e-14)
    # planted error: linear in t on the same samples is off by more than that tolerance
    assert abs(crossing_time(tg, 3 * np.log(tg), math.log(5.0)) - 5 ** (1 / 3)) > 1e-3
    # several levels on one curve, never reached and reached at the first sample
    out = crossing_times(t, 1.0 - t, [0.5, -5.0, 2.0], direction="down")
    assert out[0] == pytest.approx(0.5) and math.isnan(out[1]) and out[2] == 0.0
    assert np.isinf(crossing_times(t, t, [9.0], never=np.inf)[0])
    # one column per level
    X = np.stack([t, 2 * t], 1)
    np.testing.assert_allclose(crossing_times(t, X, [1.0, 1.0]), [1.0, 0.5], atol=1e-15)
    np.testing.assert_array_equal(crossing_index(t, X, [1.0, 1.0]), [4, 2])


def test_crossing_refined_on_a_callable():
    """sin(t) sampled coarsely reaches 1/2 at π/6: bisection on the function gets it to round-off, interpolation
    on the coarse grid does not (planted error: the same tolerance fails without refine)."""
    t = np.linspace(0.0, 1.5, 7)
    x = np.sin(t)
    assert crossing_time(t, x, 0.5, refine=math.sin) == pytest.approx(math.pi / 6, abs=1e-14)
    assert abs(crossing_time(t, x, 0.5) - math.pi / 6) > 1e-4
    # downward on cos: 1/2 at π/3
    assert crossing_time(t, np.cos(t), 0.5, direction="down", refine=math.cos) == pytest.approx(math.pi / 3, abs=1e-14)
    assert math.isnan(crossing_time(t, x, 2.0, refine=math.sin))


def test_crossing_interpolates_from_minus_infinity():
    """A mode that starts at exactly 0 (ln z = −inf) crosses at the first sample above the level."""
    t = np.array([0.0, 1.0, 2.0])
    lz = np.array([-np.inf, -1.0, 0.0])
    assert crossing_time(t, lz, -1.5) == 1.0


def test_staircase_and_midpoints():
    levels = [3.0, 2.0, 0.5]
    np.testing.assert_array_equal(midpoint_levels(levels), [2.5, 1.25])
    np.testing.assert_array_equal(staircase([0.0, 1.0, 1.5, 2.0, 9.0], [1.0, 2.0], levels), [3.0, 2.0, 2.0, 0.5, 0.5])
    with pytest.raises(ShapeError):
        staircase([0.0], [1.0, 2.0], [1.0, 0.0])


def test_crossing_bad_inputs():
    t = np.linspace(0, 1, 5)
    with pytest.raises(InvalidParameterError, match="direction"):
        crossing_time(t, t, 0.5, direction="sideways")
    with pytest.raises(ShapeError):
        crossing_times(t, t[:3], [0.5])
    with pytest.raises(InvalidParameterError, match="non-decreasing"):
        crossing_times(t[::-1], t, [0.5])
