"""One record per architecture family (issue 36, item 6): ``nqf.networks.FAMILIES``.

Each record's analytic operator is checked against the independent truth, the reference network's own operator
by autodiff (``nqf.modules.from_module``); its unit kind against what unit discovery reports for the network;
its truncation order against the measured log–log slope of the normal form's error
(``nqf.modules.check_truncation_order``).  A family added in this file alone (``OuterProduct``: a network, its
operator from an existing builder, its record) passes the same checks, with no library file touched.  Planted
errors (a wrong activation in the operator, a wrong order) are seen.
"""

from __future__ import annotations

import dataclasses
import math
import pickle

import pytest
import torch
from torch import nn

from nqf.modules import UnitLayout, UnitSlice, check_truncation_order, find_units
from nqf.networks import FAMILIES, Family, TwoLayerMLP
from nqf.structure import factorization, mlp

DT = torch.float64
#: Operator agreement, relative to the largest entry: float64 round-off of sums over ≤ 10² terms (1e-16 measured).
ROUNDOFF = 1e-12
#: |measured slope − q|: the next order's correction at the scales 1e-2 and 1e-3 shifts the slope by O(1e-2).
SLOPE_TOL = 0.1


class OuterProduct(nn.Module):
    """A family defined here: ``f(x) = Σ_i (u_iᵀx)(v_iᵀx)``, unit ``w_i = (u_i, v_i)``; exactly quadratic."""

    unit_kind = "outer-product"

    def __init__(self, dim: int, width: int):
        super().__init__()
        self.U = nn.Parameter(torch.randn(dim, width, dtype=DT) / math.sqrt(width))
        self.V = nn.Parameter(torch.randn(dim, width, dtype=DT) / math.sqrt(width))

    def forward(self, x):
        return ((x @ self.U) * (x @ self.V)).sum(-1, keepdim=True)

    @property
    def units(self):
        return UnitLayout([UnitSlice("U", axis=1), UnitSlice("V", axis=1)])


def _outer_operator(net, X):
    return factorization(X[:, :, None] * X[:, None, :])  # X_n = x_n x_nᵀ: Σ_i u_iᵀ X_n v_i


def _outer_example(n, m, D, T, gen):
    return torch.randn(n, D, dtype=DT, generator=gen), OuterProduct(D, m)


def _exact(net):
    return None


NEW = Family("outer-product", OuterProduct, _outer_operator, _outer_example, _exact)
ALL = (*FAMILIES, NEW)


def _example(fam: Family):
    return fam.example(16, 4, 3, 3, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("fam", ALL, ids=lambda f: f.name)
def test_the_records_operator_is_the_networks_own(fam):
    X, net = _example(fam)
    assert fam.check(net, X) < ROUNDOFF


@pytest.mark.parametrize("fam", ALL, ids=lambda f: f.name)
def test_unit_discovery_reports_the_records_kind_and_layout(fam):
    X, net = _example(fam)
    (found,) = find_units(net)
    assert found.kind == fam.unit_kind and found.p == fam.operator(net, X).p and found.n_units == 4


@pytest.mark.parametrize("fam", ALL, ids=lambda f: f.name)
def test_the_records_truncation_order_is_the_measured_one(fam):
    X, net = _example(fam)
    slope, q = check_truncation_order(net, net.units, fam.operator(net, X), X), fam.truncation_order(net)
    if q is None:
        assert slope == math.inf  # the normal form is the network: the error is round-off at both scales
    else:
        assert abs(slope - q) < SLOPE_TOL, (slope, q)


def test_every_reference_network_has_one_record():
    import nqf.networks as nw

    networks = {getattr(nw, n) for n in nw.__all__ if isinstance(getattr(nw, n), type) and n != "Family"}
    assert sorted(f.network.__name__ for f in FAMILIES) == sorted(c.__name__ for c in networks)
    assert len({f.name for f in FAMILIES}) == len(FAMILIES)
    loaded = pickle.loads(pickle.dumps(FAMILIES))  # records of module-level functions
    assert [(f.name, f.network) for f in loaded] == [(f.name, f.network) for f in FAMILIES]


def test_the_module_zoo_runs_the_records():
    from nqf.app._experiments._modules import FAMILIES as ZOO, build_family, truncation_order

    records = {f.name: f for f in FAMILIES}
    assert set(ZOO) <= set(records)
    for name in ZOO:
        X, op, net = build_family(name, 8, 3, 2, 2, torch.Generator().manual_seed(1))
        assert type(net) is records[name].network and op.p == records[name].operator(net, X).p
        assert truncation_order(name) == records[name].truncation_order(net)


def test_planted_errors_are_seen():
    mlp_rec = next(f for f in FAMILIES if f.name == "mlp")
    X, net = _example(mlp_rec)
    # erf has σ'(0) = 2/√π, not tanh's 1 (sin, with σ'(0) = 1 and σ''(0) = 0, has the same quadratic form)
    wrong_activation = dataclasses.replace(mlp_rec, operator=lambda net, X: mlp(X, "erf"))
    assert wrong_activation.check(net, X) > 0.1
    slope = check_truncation_order(net, net.units, mlp_rec.operator(net, X), X)
    assert abs(slope - 3) > SLOPE_TOL  # a record declaring order 3 for tanh would fail the order test
    gelu = TwoLayerMLP(3, 4, 1, "gelu")
    assert mlp_rec.truncation_order(gelu) == 3  # σ''(0) ≠ 0: the cubic term
