"""The order of the NQF's error in the units (``check_error_order``, issue 32: the mixture of experts and the
GELU MLP part from their predictions far more than the tanh rows; both have a cubic term in the units).

Independent truth: a two-layer network with the activation ``σ(z) = z + c z²`` has, at units ``sW``, exactly
``f = s² Σ_j a_j (u_j·x) + s³ c Σ_j a_j (u_j·x)²`` — no other term — so ``κ = |f₃| / |f₂|`` is computed here
from the parameters themselves, and the check must print it.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from torch import nn

import nqf
from nqf.app._data import load_dataset
from nqf.app._study import choose_units
from nqf.app._study._checks import check_error_order
from nqf.modules import UnitScatter

DT = torch.float64


class Quadratic(nn.Module):
    """``z + c z²``: smooth, ``σ(0) = 0``, ``σ''(0) = 2c``."""

    def __init__(self, c: float):
        super().__init__()
        self.c = c

    def forward(self, z):
        return z + self.c * z * z


def _net(act: nn.Module, D=5, m=6, C=2):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D, m, bias=False), act, nn.Linear(m, C, bias=False)).to(DT)


def _X(D=5, N=40):
    return torch.randn(N, D, generator=torch.Generator().manual_seed(1), dtype=DT)


@pytest.mark.parametrize("c", [0.3, 1.0, 2.5])
def test_the_cubic_coefficient_is_the_one_computed_from_the_weights(c):
    net, X = _net(Quadratic(c)), _X()
    found = choose_units(net)
    row = check_error_order(net, found, X)
    # the check's W: seed 0, columns ~ 1/√p; its parameters through the layout, the terms by hand
    W = torch.randn(found.p, found.n_units, generator=torch.Generator().manual_seed(0), dtype=DT) / math.sqrt(found.p)
    params = UnitScatter(net, found.layout)(W)
    U, A = params["0.weight"], params["2.weight"]  # (m, D), (C, m)
    Z = X[:64] @ U.T
    kappa = float((c * (Z * Z) @ A.T).abs().max()) / float((Z @ A.T).abs().max())
    assert row.status == "warn" and f"≈ {kappa:.2g}·r" in row.value, (row.value, kappa)
    assert re.search(r"÷ 8\.0 when s halves", row.value)


def test_odd_activations_have_no_cubic_term_and_a_kink_is_not_called_one():
    """tanh (odd): O(‖W‖⁴), ``ok``.  Planted: c = 0 in the quadratic activation is the identity — no cubic term
    either; a kink, ``z + relu(z)``, gives an odd part ``s²|u·x|/2`` (order 2, not a Taylor term): reported with
    its order, not as cubic."""
    X = _X()
    for act in (nn.Tanh(), Quadratic(0.0)):
        net = _net(act)
        assert check_error_order(net, choose_units(net), X).status == "ok"

    class Kinked(nn.Module):
        def forward(self, z):
            return z + torch.relu(z)

    net = _net(Kinked())
    row = check_error_order(net, choose_units(net), X)
    assert row.status == "warn" and "odd part of order s^2.0" in row.value and "not a Taylor term" in row.note


@pytest.mark.parametrize("act, status", [("gelu", "warn"), ("tanh", "ok")])
def test_analyze_prints_the_row(act, status):
    a = nqf.analyze(f"mlp:width=16,act={act}", load_dataset("iris"), eps=1e-3, steps=200)
    row = {r.name: r for r in a.checks}["NQF error order"]
    assert row.status == status
    assert np.isfinite(a.prediction.levels).all()
