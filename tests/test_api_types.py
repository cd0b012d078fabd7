"""The Python API's types (issue 37, class 6): an argument of the wrong type or value is an ``NQFError`` naming
it, never a result computed as if it were not there, and never a raw ``TypeError``/``ZeroDivisionError``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nqf
from nqf.app._experiments import teacher_task
from nqf.dynamics import GD, Trajectory, initial_weights, train_network
from nqf.errors import NQFError
from nqf.networks import TwoLayerMLP
from nqf.structure import mlp


@pytest.fixture(scope="module")
def problem():
    X, Y, _ = teacher_task(60, 4, [2.0, 1.0], 0)
    return X, Y, mlp(X, "tanh", n_outputs=2)


PREDICT_CASES = [
    ("init-unknown", {"init": "gaussian"}, "`init`"),
    ("init-number", {"init": 3}, "`init`"),
    ("max_rank-float", {"max_rank": 2.5}, "`max_rank`"),
    ("max_rank-zero", {"max_rank": 0}, "`max_rank`"),
    ("max_rank-bool", {"max_rank": True}, "`max_rank`"),
    ("max_rank-string", {"max_rank": "2"}, "`max_rank`"),
    ("M0-strings", {"M0": [["a"]]}, "`M0`"),
    ("M0-shape", {"M0": np.eye(3)}, "`M0`"),
    ("M0-nan", {"M0": np.full((6, 6), np.nan)}, "`M0`"),
    ("M0-asymmetric", {"M0": np.triu(np.ones((6, 6)))}, "`M0`"),
]


@pytest.mark.parametrize(("kw", "needle"), [c[1:] for c in PREDICT_CASES], ids=[c[0] for c in PREDICT_CASES])
def test_predict_refuses_bad_keywords(problem, kw, needle):
    X, Y, op = problem
    with pytest.raises(NQFError, match=needle):
        nqf.predict(op, Y, 1e-6, **kw)


def test_predict_good_keywords_still_work(problem):
    X, Y, op = problem
    a = nqf.predict(op, Y, 1e-6, max_rank=1)
    b = nqf.predict(op, Y, 1e-6, M0=1e-6 * np.eye(op.p))
    assert a.n_drops == 1 and b.n_drops >= 1


ANALYZE_CASES = [
    ("steps-string", {"steps": "50"}, "`steps`"),
    ("steps-zero", {"steps": 0}, "`steps`"),
    ("steps-float", {"steps": 50.5}, "`steps`"),
    ("save_points-zero", {"save_points": 0}, "`save_points`"),
    ("save_points-string", {"save_points": "600"}, "`save_points`"),
    ("lr_fraction-zero", {"lr_fraction": 0}, "`lr_fraction`"),
    ("lr_fraction-nan", {"lr_fraction": float("nan")}, "`lr_fraction`"),
    ("max_steps-string", {"max_steps": "10"}, "`max_steps`"),
    ("seed-float", {"seed": 1.5}, "`seed`"),
]


@pytest.mark.parametrize(("kw", "needle"), [c[1:] for c in ANALYZE_CASES], ids=[c[0] for c in ANALYZE_CASES])
def test_analyze_refuses_bad_keywords_before_computing(kw, needle):
    with pytest.raises(NQFError, match=needle):
        nqf.analyze("mlp:width=8,act=tanh", "iris", **kw)


def test_train_network_without_a_unit_layout_names_units(problem):
    X, Y, op = problem
    net = TwoLayerMLP(4, 8, 2, "tanh", dtype=torch.float64)
    for bad in (None, "units", 3):
        with pytest.raises(NQFError, match="`units`"):
            train_network(net, bad, X, Y, W0=initial_weights(op.p, 8, 1e-6), optimizer=GD(0.01), steps=2)


TRAJECTORY_CASES = [
    ("loss-shorter", dict(t=torch.arange(5.0), loss=torch.arange(3.0)), "`loss`"),
    ("step-shorter", dict(t=torch.arange(3.0), loss=torch.zeros(3), step=torch.arange(2)), "`step`"),
    ("t-2d", dict(t=torch.zeros(2, 2), loss=torch.zeros(2)), "`t`"),
    ("M-length", dict(t=torch.arange(3.0), loss=torch.zeros(3), M=torch.zeros(2, 4, 4)), "`M`"),
    ("W-length", dict(t=torch.arange(3.0), loss=torch.zeros(3), W=torch.zeros(4, 4, 2)), "`W`"),
]


@pytest.mark.parametrize(("kw", "needle"), [c[1:] for c in TRAJECTORY_CASES], ids=[c[0] for c in TRAJECTORY_CASES])
def test_trajectory_refuses_arrays_of_other_lengths(kw, needle):
    with pytest.raises(NQFError, match=needle):
        Trajectory(**kw)


def test_trajectory_of_equal_lengths_constructs():
    tr = Trajectory(t=torch.arange(3.0), loss=torch.zeros(3), step=torch.arange(3), M=torch.zeros(3, 2, 2))
    assert len(tr) == 3
