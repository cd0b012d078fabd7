"""The exact-GD reductions check ``eta``, ``steps`` and ``record_every`` with the project's one checker per argument
(issue 36 item 4): one wording, and a step count given as a float refused as everywhere else."""

import numpy as np
import pytest

from nqf.errors import InvalidParameterError
from nqf.reductions.lv import LotkaVolterra
from nqf.reductions.svd_modes import two_layer_modes

BAD = [
    ({"eta": 0.0}, "`eta` must be a positive finite number"),
    ({"eta": float("nan")}, "`eta` must be a number"),
    ({"eta": "0.1"}, "`eta` must be a real number"),
    ({"steps": -1}, r"`steps` must be an integer in \[0, inf\]"),
    ({"steps": 10.0}, "`steps` must be an integer"),
]


def _lv():
    k = np.arange(1, 6, dtype=float)
    return LotkaVolterra(1 / k, np.ones(5), 1e-6 * np.ones(5), y2=float(np.sum(k**-2.0)) + 1.0)


def _modes():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3))
    X = (X - X.mean(0)) @ np.linalg.inv(np.linalg.cholesky(np.cov(X.T, bias=True))).T
    return two_layer_modes(X, X @ np.diag([2.0, 1.0, 0.5]), "tanh", eps=1e-6)


@pytest.mark.parametrize("bad,message", BAD)
def test_lotka_volterra_gd(bad, message):
    args = {"eta": 0.1, "steps": 10} | bad
    with pytest.raises(InvalidParameterError, match=message):
        _lv().gd(args["eta"], args["steps"])


@pytest.mark.parametrize("bad,message", BAD)
def test_svd_modes_gd(bad, message):
    args = {"eta": 0.1, "steps": 10} | bad
    with pytest.raises(InvalidParameterError, match=message):
        _modes().gd(args["eta"], args["steps"])


def test_record_every_at_least_one():
    with pytest.raises(InvalidParameterError, match=r"`record_every` must be an integer in \[1, inf\]"):
        _lv().gd(0.1, 10, record_every=0)
