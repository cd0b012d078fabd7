"""nqf.watch: the monitor inside a plain PyTorch loop, each phase's status, smoothing, and bad use."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
import torch

import nqf
from nqf.errors import NQFError
from test_forecast import _iris, _net


@pytest.fixture(scope="module")
def iris_run():
    """The user's loop with the monitor: one update per step, the status after each."""
    X, Y = _iris()
    net = _net(1e-3)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    monitor = nqf.watch(net, X, Y, optimizer=opt)
    loss_fn = torch.nn.MSELoss()
    statuses, losses = [], []
    for step in range(1, 200):
        opt.zero_grad()
        loss = loss_fn(net(X), Y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        statuses.append(monitor.update(step - 1, losses[-1]))  # the loss before step `step`
    return monitor, statuses, np.array(losses)


def test_monitor_reads_the_run_as_the_judge_does(iris_run):
    monitor, statuses, L = iris_run
    judged = monitor.forecast.judge(np.arange(L.size), L)
    np.testing.assert_allclose(monitor.measured_steps, judged.measured, rtol=1e-12)
    np.testing.assert_array_equal(monitor.predicted_steps, monitor.forecast.steps)
    phases = [s.phase for s in statuses]
    assert phases[0] == "plateau" and "done" in phases
    first_done = phases.index("done")
    assert statuses[first_done].plateau == 2 and statuses[first_done].next_drop is None


def test_status_text_of_each_phase(iris_run):
    monitor, statuses, _ = iris_run
    s0 = statuses[0]
    assert s0.text.startswith("step 0: plateau 0 of 2") and "drop 1 predicted at step" in s0.text
    after = next(s for s in statuses if s.plateau == 1)
    assert f"drop 1 came at step {after.last_step:.5g}" in after.text and "drop 2 predicted" in after.text
    assert abs(after.last_error) < 0.1 and ("late" in after.text or "early" in after.text)
    done = next(s for s in statuses if s.phase == "done")
    assert "all 2 drops passed" in done.text
    # a fresh monitor fed by hand: overdue, then out of the regime below the last level, and a diverged run
    fc = monitor.forecast
    m = nqf.app._study.Monitor(fc)
    late = m.update(2 * fc.steps[0], fc.levels[0])
    assert late.phase == "overdue" and "drop 1 overdue" in late.text
    gone = m.update(3 * fc.steps[-1], 0.5 * fc.levels[-1])
    assert (
        gone.phase == "left" and gone.left_at == 3 * fc.steps[-1] and "fell below the last predicted level" in gone.text
    )
    assert m.update(4 * fc.steps[-1], 1.0).phase == "left"  # nothing later is predicted
    bad = nqf.app._study.Monitor(fc).update(1, float("nan"))
    assert bad.phase == "left" and "not finite" in bad.text


def test_smoothing_moves_the_crossing_back_by_the_lag():
    """A linear descent through a midpoint: with smoothing w the measured crossing is the true one."""
    X, Y = _iris()
    fc = nqf.forecast(_net(1e-3), X, Y, lr=0.5)
    mid = 0.5 * (fc.levels[0] + fc.levels[1])
    steps = np.arange(0, 100.0)
    loss = fc.levels[0] - (fc.levels[0] - fc.levels[1]) * steps / 80.0  # crosses the midpoint at step 40
    for w in (1, 9):
        m = nqf.app._study.Monitor(fc, smoothing=w)
        for s, v in zip(steps, loss, strict=True):
            m.update(s, v)
        assert m.measured_steps[0] == pytest.approx(40.0, abs=0.5 if w == 1 else 1.0), (w, mid)
    unsmoothed_lag = nqf.app._study.Monitor(fc, smoothing=1)
    ema, alpha = loss[0], 2 / 10
    for s, v in zip(steps, loss, strict=True):
        ema = ema + alpha * (v - ema)
        unsmoothed_lag.update(s, ema)  # already averaged, read as raw: the lag is not removed
    assert unsmoothed_lag.measured_steps[0] > 43.0  # the planted lag is seen when not corrected


def test_bad_use_names_the_parameter(iris_run):
    monitor, _, _ = iris_run
    m = nqf.app._study.Monitor(monitor.forecast)
    m.update(5, 0.2)
    with pytest.raises(NQFError, match="`step`"):
        m.update(5, 0.2)
    with pytest.raises(NQFError, match="`smoothing`"):
        nqf.app._study.Monitor(monitor.forecast, smoothing=0)


def test_status_result_convention(iris_run):
    _, statuses, _ = iris_run
    s = statuses[5]
    assert len(repr(s)) < 200 and json.loads(json.dumps(s.to_dict()))["phase"] == s.phase
    assert pickle.loads(pickle.dumps(s)) == s or math.isnan(s.last_step)
