"""nqf.curves.training_clock: the user's optimiser on the NQF's clock, against torch.optim itself.

Independent truth: a single parameter ``w`` on the saddle loss ``c · L``, ``L = −(ζ/4) w²`` (so that gradient
flow of ``L`` grows ``w`` like ``e^{(ζ/2) t}``), stepped by ``torch.optim.SGD`` with the same settings; the
step at which ``w`` has grown by ``e^{(ζ/2) t}`` must be the clock's ``step_of(t, ζ)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nqf.curves import training_clock
from nqf.curves._training_clock import UNPREDICTED, loss_scale
from nqf.errors import NQFError


def _torch_steps(t: float, zeta: float, c: float, lr, momentum=0.0, dampening=0.0, nesterov=False, n_max=100000):
    """Fractional step at which torch's SGD has grown ``w`` by ``e^{ζ t/2}`` (log-linear between steps)."""
    w = torch.nn.Parameter(torch.tensor(1e-8, dtype=torch.float64))
    opt = torch.optim.SGD(
        [w], lr=lr if not callable(lr) else lr(0), momentum=momentum, dampening=dampening, nesterov=nesterov
    )
    need = zeta * t / 2.0
    prev = 0.0
    for k in range(n_max):
        if callable(lr):
            opt.param_groups[0]["lr"] = lr(k)
        opt.zero_grad()
        (-c * zeta / 4.0 * w * w).backward()
        opt.step()
        now = math.log(float(w.detach()) / 1e-8)
        if now >= need:
            return k + (need - prev) / (now - prev)
        prev = now
    raise AssertionError("no growth")


@pytest.mark.parametrize(
    "kw",
    [
        dict(lr=0.5),
        dict(lr=0.05, momentum=0.9),
        dict(lr=0.02, momentum=0.5, dampening=0.3),
        dict(lr=0.05, momentum=0.9, nesterov=True),
    ],
)
def test_step_of_matches_torch_sgd(kw):
    clock = training_clock(**kw, n_outputs=10)  # loss "mse": c = 2/10
    c = loss_scale("mse", 10)
    for zeta, t in ((1.5, 8.0), (0.5, 30.0)):
        expected = _torch_steps(t, zeta, c, **kw)
        got = clock.step_of(t, zeta)
        # exact for the linear map up to the within-step interpolation (log-linear in both)
        assert abs(got - expected) <= 0.51, (kw, zeta, got, expected)


def test_momentum_step_is_not_the_naive_effective_step():
    """The heavy ball at ``c η ζ/2 ≈ (1 − β)²`` grows far slower than the small-step rule ``η/(1 − β)`` says: the
    clock must follow torch, not the naive rule (digits: 116 steps measured, naive 81)."""
    clock = training_clock(lr=0.05, momentum=0.9, n_outputs=10)
    naive = 7.8 / clock.effective_lr()
    exact = _torch_steps(7.8, 1.5, 0.2, 0.05, momentum=0.9)
    assert abs(clock.step_of(7.8, 1.5) - exact) < 0.51
    assert exact > 1.3 * naive


def test_schedule_list_and_function_agree_with_torch():
    lrs = [0.5 if k < 40 else 0.25 for k in range(400)]
    a = training_clock(schedule=lrs, n_outputs=1, loss="half_mse")
    b = training_clock(schedule=lambda k: 0.5 if k < 40 else 0.25, n_outputs=1, loss="half_mse")
    expected = _torch_steps(12.0, 1.0, 1.0, lambda k: lrs[k])
    assert abs(a.step_of(12.0, 1.0) - expected) <= 0.51
    assert abs(b.step_of(12.0, 1.0) - expected) <= 0.51
    assert math.isnan(training_clock(schedule=lrs[:10], loss="half_mse").step_of(12.0, 1.0))  # past the list's end


def test_planted_wrong_loss_scale_is_caught():
    """The check can fail: a clock built for nqf's loss (c = 1) is off by the factor 5 on MSELoss with C = 10."""
    wrong = training_clock(lr=0.5, loss="half_mse")
    expected = _torch_steps(8.0, 1.5, loss_scale("mse", 10), 0.5)
    assert abs(wrong.step_of(8.0, 1.5) - expected) > 10


def test_time_of_and_effective_lr():
    clock = training_clock(lr=0.1, momentum=0.5, n_outputs=4)
    assert clock.effective_lr() == pytest.approx(0.5 * 0.1 / 0.5)
    np.testing.assert_allclose(clock.time_of([0, 10]), [0.0, 1.0])
    sched = training_clock(schedule=[0.1] * 5 + [0.2] * 5, n_outputs=2, loss="mse")
    np.testing.assert_allclose(sched.time_of([5, 10]), [0.5, 1.5])


def test_torch_optimizer_objects():
    p = [torch.nn.Parameter(torch.zeros(2))]
    clock = training_clock(torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True), n_outputs=3)
    assert (clock.optimizer, clock.lr, clock.momentum, clock.nesterov) == ("gd", 0.1, 0.9, True)
    adam = training_clock(torch.optim.Adam(p, lr=1e-3), n_outputs=3)
    assert not adam.predicts_times and math.isnan(adam.step_of(5.0, 1.0)) and "adam" in UNPREDICTED
    with pytest.raises(NQFError, match="weight_decay"):
        training_clock(torch.optim.SGD(p, lr=0.1, weight_decay=1e-4))
    with pytest.raises(NQFError, match="RMSprop"):
        training_clock(torch.optim.RMSprop(p, lr=0.1))


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(), "`lr`"),
        (dict(lr=0.1, schedule=[0.1]), "`lr`"),
        (dict(lr=-1.0), "`lr`"),
        (dict(lr=0.1, momentum=1.0), "`momentum`"),
        (dict(lr=0.1, nesterov=True), "`nesterov`"),
        (dict(lr=0.1, loss="cross_entropy"), "`loss`"),
        (dict(schedule=[0.1, float("nan")]), "`schedule`"),
        (dict(schedule="fast"), "`schedule`"),
        (dict(lr=0.1, optimizer="lbfgs"), "`optimizer`"),
        (dict(lr=0.1, batch_size=0), "`batch_size`"),
    ],
)
def test_bad_settings_name_the_parameter(kw, match):
    with pytest.raises(NQFError, match=match):
        training_clock(**kw)


def test_result_convention():
    import json
    import pickle

    clock = training_clock(lr=0.1, momentum=0.9, batch_size=64, n_outputs=10)
    assert clock.optimizer == "sgd" and len(repr(clock)) < 360
    assert json.loads(json.dumps(clock.to_dict()))["batch_size"] == 64
    assert pickle.loads(pickle.dumps(clock)) == clock
