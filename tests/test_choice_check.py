"""One checker of a value chosen from a fixed set (issue 36, item 4): ``nqf._validation.one_of``.

Every argument that takes one of a few names (a method, a rule, a readout, an initial state, a bootstrap scheme,
a loss or an optimizer by name, an activation) is refused in one wording, "`name` must be one of 'a', 'b'[ or
alternative]; found value", by :func:`nqf._validation.one_of` / :func:`nqf._validation.not_one_of`; no module
writes that refusal by hand (a planted one is found).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from nqf._validation import ParameterError, not_one_of, one_of
from nqf.errors import InvalidParameterError

SRC = Path(__file__).parents[1] / "src" / "nqf"
#: Hand-written "must be one of" allowed, with the reason.
EXEMPT = {
    "app/_study/_models.py": "a key of the model spec string (`model`: act=…), a ModelSpecError naming the names as "
    "they are typed on the command line",
}
PATTERN = re.compile(r"must be one of|must be '[^']+'(, '[^']+')* or '")  # either hand-written wording


def hand_written(files, root: Path = SRC) -> list[str]:
    """``path:line`` of each refusal written by hand (a ``must be one of`` in a string of a ``raise``)."""
    out = []
    for p in files:
        lines = p.read_text().splitlines()
        for i, line in enumerate(lines, 1):
            if PATTERN.search(line) and "raise" in "".join(lines[max(0, i - 3) : i]):
                out.append(f"{p.relative_to(root)}:{i}")
    return out


def test_no_module_writes_the_refusal_by_hand():
    files = [p for p in SRC.rglob("*.py") if p.name != "_validation.py" and str(p.relative_to(SRC)) not in EXEMPT]
    assert hand_written(files) == []


def test_the_scan_sees_a_planted_refusal(tmp_path):
    bad = tmp_path / "_planted.py"
    body = '    if form not in FORMS:\n        raise ValueError(f"`form` must be one of {FORMS}")\n'
    other = "    if x not in ('a', 'b'):\n        raise ValueError(f\"`x` must be 'a' or 'b'; found {x!r}\")\n"
    bad.write_text("def f(form, x):\n" + body + other)
    assert hand_written([bad], tmp_path) == ["_planted.py:3", "_planted.py:5"]


def test_one_wording():
    assert one_of("rule", "auto", ("auto", "generic")) == "auto"
    with pytest.raises(ParameterError, match=r"^`rule` must be one of 'auto', 'generic'; found 'Auto'$"):
        one_of("rule", "Auto", ("auto", "generic"))
    err = not_one_of("loss", "hinge", ("mse", "logistic"), alternative="a nqf.dynamics.Loss")
    assert str(err) == "`loss` must be one of 'mse', 'logistic' or a nqf.dynamics.Loss; found 'hinge'"
    assert isinstance(err, InvalidParameterError) and isinstance(err, TypeError)
    for array in (np.array([1, 2]), torch.tensor([1, 2])):  # elementwise ==: never a choice
        with pytest.raises(ParameterError, match="`order` must be one of 2, 3"):
            one_of("order", array, (2, 3))


def _calls():
    from nqf.curves import fit_power_law
    from nqf.dynamics import GD, initial_weights, simulate
    from nqf.networks import ConvNet1d, MultiHeadAttention
    from nqf.reductions import predict
    from nqf.structure import conv1d, mlp, multi_head_attention

    X = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    op, y, t = mlp(X, "tanh"), X[:, 0], np.arange(1.0, 40.0)
    W0 = initial_weights(op.p, 4, 1e-3, seed=0)
    return {
        "simulate form": lambda: simulate(op, y, W0=W0, optimizer=GD(0.1), steps=1, form="both"),
        "simulate on_divergence": lambda: simulate(op, y, W0=W0, optimizer=GD(0.1), steps=1, on_divergence="warn"),
        "simulate loss": lambda: simulate(op, y, W0=W0, optimizer=GD(0.1), steps=1, loss="hinge"),
        "predict method": lambda: predict(op, y, 1e-3, method="lv"),
        "predict init": lambda: predict(op, y, 1e-3, init="orthogonal"),
        "data_subspace method": lambda: op.data_subspace(method="svd"),
        "initial_weights init": lambda: initial_weights(3, 4, 1e-3, init="gauss"),
        "fit_power_law bootstrap": lambda: fit_power_law(t, t**-1.0, bootstrap="none"),
        "conv1d readout": lambda: conv1d(torch.randn(2, 1, 5, dtype=torch.float64), 2, readout="max"),
        "ConvNet1d readout": lambda: ConvNet1d(1, 2, 2, readout="max"),
        "multi_head_attention readout": lambda: multi_head_attention(
            torch.randn(2, 3, 4, dtype=torch.float64), 2, readout="max"
        ),
        "MultiHeadAttention readout": lambda: MultiHeadAttention(4, 2, 1, readout="max"),
        "mlp activation": lambda: mlp(X, "swishy"),
    }


@pytest.mark.parametrize("arg", list(_calls()))
def test_each_argument_is_refused_in_the_one_wording(arg):
    """``arg`` is "function parameter": the parameter is named, then every choice as its repr."""
    listed = r"('[^']+'|\d+)(, ('[^']+'|\d+))*"
    with pytest.raises(InvalidParameterError, match=rf"^`{arg.split()[-1]}` must be one of {listed}"):
        _calls()[arg]()
