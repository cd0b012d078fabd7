"""crossing_time's refinement on a callable is Brent's method (scipy.optimize.brentq): the same crossings as the
fixed bisection it replaced, to that bisection's resolution ``(t_i − t_{i−1}) · 2^−iters``, in far fewer
evaluations of the callable; the edge cases of the bracket keep the bisection's answers."""

import math

import numpy as np
import pytest

from nqf.reductions import crossing_time
from nqf.reductions._timing import crossing_index


def _bisected(t, x, level, refine, *, direction="up", iters=60):
    """The previous implementation: ``iters`` halvings of the bracketing interval, its midpoint."""
    s = 1.0 if direction == "up" else -1.0
    i = int(crossing_index(t, x, [level], direction=direction)[0])
    a, b = float(t[i - 1]), float(t[i])
    for _ in range(iters):
        c = 0.5 * (a + b)
        if s * refine(c) >= s * level:
            b = c
        else:
            a = c
    return 0.5 * (a + b), float(t[i] - t[i - 1])


class _Counted:
    def __init__(self, f):
        self.f, self.calls = f, 0

    def __call__(self, s):
        self.calls += 1
        return self.f(s)


CURVES = {
    "sin up": (np.sin, 0.5, "up"),
    "cos down": (np.cos, 0.3, "down"),
    "logistic up": (lambda s: 1.0 / (1.0 + np.exp(-8.0 * (s - 0.9))), 0.7, "up"),
    "exp decay down": (lambda s: np.exp(-3.0 * s), 0.05, "down"),
    "flat then steep": (lambda s: np.tanh(40.0 * (s - 1.23)), 0.0, "up"),
}


@pytest.mark.parametrize("iters", [8, 20, 60])
@pytest.mark.parametrize("name", list(CURVES))
def test_brent_matches_the_bisection_to_its_resolution(name, iters):
    f, level, direction = CURVES[name]
    t = np.linspace(0.0, 1.5, 7)
    x = f(t)
    old, width = _bisected(t, x, level, f, direction=direction, iters=iters)
    counted = _Counted(f)
    new = crossing_time(t, x, level, direction=direction, refine=counted, iters=iters)
    assert abs(new - old) <= width * 2.0**-iters + 4 * np.finfo(float).eps * abs(old), (new, old)
    assert counted.calls < iters + 3  # brentq needs fewer evaluations than the halvings (60: about 10)
    if iters == 60:
        assert counted.calls <= 20


def test_brent_is_used_not_bisection():
    """On a smooth curve Brent converges superlinearly: round-off in about ten evaluations where bisection
    spends sixty (planted: the bisection above needs all 60 to get as close)."""
    counted = _Counted(math.sin)
    t = np.linspace(0.0, 1.5, 7)
    assert crossing_time(t, np.sin(t), 0.5, refine=counted) == pytest.approx(math.pi / 6, abs=1e-15)
    assert counted.calls <= 15
    assert abs(_bisected(t, np.sin(t), 0.5, math.sin, iters=20)[0] - math.pi / 6) > 1e-9


def test_a_coarse_iters_is_a_coarse_tolerance():
    t = np.linspace(0.0, 1.5, 7)
    got = crossing_time(t, np.sin(t), 0.5, refine=math.sin, iters=4)
    assert abs(got - math.pi / 6) <= 0.25 * 2.0**-4


def test_the_edges_of_the_bracket():
    """The callable already at the level on the left sample: the left sample; not yet at it on the right sample
    (disagreeing with the samples, or NaN): the right sample.  Both where the bisection converged."""
    t = np.array([0.0, 1.0, 2.0])
    x = np.array([0.0, 0.2, 1.0])
    assert crossing_time(t, x, 0.5, refine=lambda s: 0.9) == 1.0
    assert crossing_time(t, x, 0.5, refine=lambda s: 0.1) == 2.0
    assert crossing_time(t, x, 0.5, refine=lambda s: math.nan) == 2.0
    assert crossing_time(t, x, 0.5, refine=lambda s: 0.1, iters=60) == pytest.approx(
        _bisected(t, x, 0.5, lambda s: 0.1)[0], abs=1e-15
    )
    # NaN inside the bracket counts as not reached, as the bisection's comparison did
    nan_mid = crossing_time(t, x, 0.5, refine=lambda s: math.nan if s < 1.5 else s - 1.0)
    assert nan_mid == pytest.approx(1.5, abs=1e-12)
    # repeated sample times: an empty bracket is its own answer
    assert crossing_time(np.array([0.0, 1.0, 1.0]), np.array([0.0, 0.2, 1.0]), 0.5, refine=lambda s: 0.0) == 1.0
