"""Issue 35's acceptance on the digits MLP (width 256, PyTorch's default initialisation × 1e-3), in the suite:
the user's own loop (benchmarks/bench_forecast.py, which also runs × 1e-5, plain SGD, and the monitor's overhead)
with full-batch GD and with SGD of 64 and momentum 0.9; every drop within 10 % of the loop's step."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

TOLERANCE = 0.10  # issue 35's acceptance


def _bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_forecast.py"
    spec = importlib.util.spec_from_file_location("bench_forecast", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["GD", "SGD 64 + momentum 0.9"])
def test_drops_within_ten_percent_of_the_users_loop(name):
    import torch

    torch.set_num_threads(1)
    bench = _bench()
    X, Y = bench.digits()
    r = bench.case(1e-3, name, X, Y)
    fc, j = r["forecast"], r["judgement"]
    # every drop is timed by the saddle-subspace flow; at × 1e-3 all nine land within 10 % of the loop (measured
    # 3.9 % and 5.1 %), trusted or not: drop 1 crowds drop 2 and the later ones are the NQF's times (not trusted)
    assert fc.n_drops == 9 and set(fc.staircase.time_rules) == {"subspace flow"}
    reached = np.isfinite(j.measured)
    assert reached.sum() >= 8 and np.all(np.abs(j.errors[reached]) <= TOLERANCE), j.lines()
    assert np.all(np.abs(j.errors[fc.trusted & reached]) <= TOLERANCE)
    # the check can fail: the same loop judged against a forecast for half the step misses it by far more
    from nqf.curves import training_clock

    c = fc.clock
    wrong = fc.with_clock(training_clock(lr=c.lr / 2, momentum=c.momentum, batch_size=c.batch_size, n_outputs=10))
    L = r["loss"]
    assert not wrong.judge(np.arange(L.size), L).passed
