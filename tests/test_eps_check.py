"""One check of the initial scale ``eps`` (issue 36, item 4): every function that takes it refuses the same
values with the same line, naming the parameter, what was expected and what was found; ``ε ≥ 1`` (no plateau)
is refused everywhere, including the leading-order switch time that used to return a time ``≤ 0`` for it."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import nqf
from nqf._validation import eps_value
from nqf.curves import predicted_curve
from nqf.dynamics import initial_weights
from nqf.errors import InvalidParameterError
from nqf.reductions._timing import leading_switch_time
from nqf.structure import mlp

SRC = Path(nqf.__file__).resolve().parent
BAD = [0.0, 1.0, 2.0, -1e-6, math.nan, math.inf, True, "1e-6", None]
WORDING = r"^`eps` must lie in \(0, 1\) \(the initial scale ε\); found "


def _op():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(20, 3, generator=g, dtype=torch.float64)
    return mlp(X, "tanh", n_outputs=2), X[:, :2].clone()


CALLS = {
    "eps_value": lambda e: eps_value(e),
    "nqf.predict": lambda e: nqf.predict(*_op(), e),
    "leading_switch_time": lambda e: leading_switch_time(np.array([1.0, 0.5]), e),
    "predicted_curve": lambda e: predicted_curve(np.array([1.0]), np.array([1.0, 0.5]), np.array([1.0, 0.5]), e),
    "initial_weights": lambda e: initial_weights(4, 3, e),
}


@pytest.mark.parametrize("name", list(CALLS))
@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_every_entry_refuses_the_same_values_in_the_same_words(name, bad):
    with pytest.raises(InvalidParameterError, match=WORDING) as info:
        CALLS[name](bad)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", list(CALLS))
def test_a_small_scale_is_accepted(name):
    CALLS[name](1e-6)
    CALLS[name](np.float32(1e-3))


def test_no_other_eps_check_in_the_package():
    """The range check's wording lives in ``nqf/_validation.py`` only (checks of a list of scales, its length
    and order, stay where the list is; pydantic ``Field(gt=0, lt=1)`` of the experiments'
    parameter schemas is a declaration, not a check written by hand).  Planted: a second hand-written check is
    seen by the same scan."""
    pattern = re.compile(r"`eps` must (lie|be a positive|be < 1|be a number)")  # the value's range, not a list's
    found = [
        f"{p.relative_to(SRC)}:{i}"
        for p in SRC.rglob("*.py")
        if p.name != "_validation.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line) and "raise" in "".join(p.read_text().splitlines()[max(0, i - 3) : i])
    ]
    assert not found, found
    planted = 'if not 0 < eps < 1:\n    raise ValueError(f"`eps` must lie in (0, 1); found {eps}")'
    assert pattern.search(planted.splitlines()[1])


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, math.nan, "0.5", True])
def test_every_open_unit_interval_argument_has_the_one_wording(bad):
    """``learned_fraction`` (seeded NQF), ``ci`` (power-law fit) and ``switch_fraction`` (validity) are checked by
    the one checker of a fraction in (0, 1) (``nqf._validation.unit_fraction``, which ``eps`` uses too), before any
    work; and no other hand-written "must lie in (0, 1)" is left in the package (planted: one is seen)."""
    from nqf.curves import fit_power_law
    from nqf.dynamics import Seeding, seeded_nqf

    t = np.arange(1.0, 50.0)
    with pytest.raises(InvalidParameterError, match=r"^`ci` must lie in \(0, 1\) \(the interval's level\); found "):
        fit_power_law(t, t**-1.0, ci=bad)
    from nqf.networks import TwoLayerMLP

    X = torch.randn(20, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    net = TwoLayerMLP(3, 4, 1, "tanh", dtype=torch.float64)
    W0 = initial_weights(5, 4, 1e-6, seed=0)
    with pytest.raises(InvalidParameterError, match=r"^`learned_fraction` must lie in \(0, 1\) \(of M's largest"):
        seeded_nqf(mlp(X, "tanh"), net, net.units, X, X[:, 0], W0=W0, lr=0.1, steps=1, seeding=Seeding(bad))
    pattern = re.compile(r"must lie in \(0, 1\)")
    found = [
        f"{p.relative_to(SRC)}:{i}"
        for p in SRC.rglob("*.py")
        if p.name != "_validation.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line) and "raise" in line and "every" not in line  # a list's entries: checked with the list
    ]
    assert not found, found
    assert pattern.search('raise ValueError(f"`ci` must lie in (0, 1); found {ci}")')
