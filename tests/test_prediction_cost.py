"""What a prediction took, in its result (issue 36, item 2): ``Staircase.cost`` instead of a ``timings=`` dict that
``predict`` filled in place."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

import nqf
from nqf.reductions import PredictionCost
from nqf.structure import mlp


@pytest.fixture(scope="module")
def iris(iris_tanh):
    _, Y, op = iris_tanh
    return op, Y


def test_the_saddle_sequence_reports_its_search_and_clock_in_the_staircase(iris):
    op, Y = iris
    lines: list[str] = []
    st = nqf.predict(op, Y, 1e-8, method="saddle-sequence", log=lines.append)
    cost = st.cost
    assert isinstance(cost, PredictionCost) and cost.search > 0 and cost.subspace is None
    assert cost.clock is not None and cost.clock >= 0 and cost.clock_estimate is not None
    low, high = cost.clock_estimate
    assert 0 <= low <= high
    assert len(lines) == 1 and lines[0].startswith("saddle search:")  # the progress line, before the clock ran
    assert st.to_dict()["cost"]["search"] == cost.search
    assert pickle.loads(pickle.dumps(st)).cost == cost
    assert repr(cost).startswith("PredictionCost(search=")
    timed = nqf.predict(op, Y, 1e-8, method="saddle-sequence", subspace=True)
    assert timed.cost is not None and timed.cost.subspace is not None and timed.cost.clock is None
    np.testing.assert_array_equal(timed.levels, st.levels)


def test_the_other_reductions_carry_no_cost_and_predict_takes_no_timings_dict(iris):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 1, generator=g, dtype=torch.float64)  # one input, one output: commuting
    st = nqf.predict(mlp(x, "tanh"), 0.8 * x[:, 0], 1e-8, method="lotka-volterra")
    assert st.cost is None and st.to_dict()["cost"] is None
    op, Y = iris
    with pytest.raises(TypeError, match="timings"):
        nqf.predict(op, Y, 1e-8, timings={})  # type: ignore[call-arg]
