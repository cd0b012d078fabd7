"""Step detection on loss curves: staircases of known times, noise, no spurious steps, bad input."""

import numpy as np
import pytest
from scipy.special import expit

from nqf.curves._steps import detect_steps
from nqf.errors import NonFiniteError, ShapeError

TIMES = np.array([1.0, 3.0, 9.0, 20.0])
HEIGHTS = np.array([1.0, 0.5, 0.3, 0.1])
FLOOR = 0.01
EPS = 1e-10


def staircase(t):
    """Sum of logistic modes (relative start z(0) = ε z*): excess ℓ_k (1 − u_k)², u_k = 1/(1 + (1/ε − 1)e^{−ζ_k t}),
    with ζ_k = ln(1/ε − 1)/t_k so that mode k half-saturates at t_k exactly (ζ_k t_k = 23)."""
    zeta = np.log(1 / EPS - 1) / TIMES
    x = np.log(1 / EPS - 1) - zeta[None, :] * t[:, None]
    one_minus_u = expit(x)
    return FLOOR + (HEIGHTS[None, :] * one_minus_u**2).sum(1)


# the steepest point of ln L vs ln t lies within O(1/(ζ_k t_k)) = 1/23 ≈ 4 % (in ln t) of the half-saturation time
TOL = 0.045


def _check(steps):
    assert len(steps) == 4, steps.times
    assert np.all(np.abs(steps.times / TIMES - 1) < TOL), steps.times
    assert np.all((steps.t_start < steps.times) & (steps.times < steps.t_end))
    levels = FLOOR + np.concatenate([np.cumsum(HEIGHTS[::-1])[::-1], [0.0]])
    assert np.allclose(steps.plateau_levels, levels, rtol=0.05)
    assert np.allclose(steps.drops, levels[:-1] / levels[1:], rtol=0.1)


def test_noiseless_staircase_log_sampling():
    t = np.geomspace(0.05, 200, 3000)
    s = detect_steps(t, staircase(t))
    _check(s)
    # the excess drop of each step is ln(L_before/L_after) (no background decay here)
    levels = FLOOR + np.concatenate([np.cumsum(HEIGHTS[::-1])[::-1], [0.0]])
    assert np.allclose(s.log_drops, np.log(levels[:-1] / levels[1:]), rtol=0.03)


@pytest.mark.parametrize("sigma", [0.02, 0.05, 0.1])
def test_noisy_staircase(sigma):
    rng = np.random.default_rng(int(sigma * 1000))
    t = np.geomspace(0.05, 200, 3000)
    for _ in range(3):
        _check(detect_steps(t, staircase(t) * np.exp(sigma * rng.standard_normal(t.size))))


def test_linear_sampling_like_gd():
    """GD curves are sampled uniformly in t (sparse at early log times): cells average and noise is propagated."""
    rng = np.random.default_rng(7)
    t = 0.01 * np.arange(1, 20001)
    _check(detect_steps(t, staircase(t) * np.exp(0.05 * rng.standard_normal(t.size))))


def test_power_law_has_no_steps():
    rng = np.random.default_rng(1)
    t = np.geomspace(0.05, 200, 3000)
    for alpha in (0.3, 0.7, 1.5):
        for _ in range(3):
            assert len(detect_steps(t, t**-alpha * np.exp(0.03 * rng.standard_normal(t.size)))) == 0
    # a smooth constant curve has no steps and one plateau
    s = detect_steps(t, np.full(t.size, 0.5))
    assert len(s) == 0 and np.allclose(s.plateau_levels, [0.5])


def test_min_drop_filters_small_steps():
    t = np.geomspace(0.05, 200, 3000)
    L = staircase(t)
    # the last step (ln(0.11/0.01) = 2.4) survives min_drop = 1.0, the first three (0.74, 0.80, 1.32 > 1) partly
    s = detect_steps(t, L, min_drop=1.0)
    assert np.allclose(s.times, TIMES[2:], rtol=TOL)


def test_loss_floor():
    t = np.geomspace(0.05, 200, 3000)
    s = detect_steps(t, staircase(t) + 5.0, loss_floor=5.0)
    _check(
        s.__class__(
            **{
                **s.__dict__,
                "plateau_levels": s.plateau_levels - 5.0,
                "drops": (s.plateau_levels[:-1] - 5.0) / (s.plateau_levels[1:] - 5.0),
            }
        )
    )


def test_bad_input():
    t = np.geomspace(0.1, 10, 50)
    L = np.exp(-t)
    with pytest.raises(ShapeError, match="same length"):
        detect_steps(t, L[:-1])
    with pytest.raises(ShapeError, match="at least"):
        detect_steps([], [])
    Ln = L.copy()
    Ln[10] = np.nan
    with pytest.raises(NonFiniteError, match="`loss` must be finite"):
        detect_steps(t, Ln)
    with pytest.raises(ValueError, match="`t` must be positive"):  # t = 0 alone is accepted (issue 11)
        detect_steps(np.linspace(-1, 1, 50), L)
    with pytest.raises(ValueError, match="strictly increasing"):
        detect_steps(t[::-1], L)
    with pytest.raises(ValueError, match="loss_floor"):
        detect_steps(t, L, loss_floor=1.0)
    with pytest.raises(ShapeError, match="1-D"):
        detect_steps(t[None], L[None])
    with pytest.raises(ValueError, match="`min_drop`"):
        detect_steps(t, L, min_drop=0)
