"""from_module: checks of smoothness, symmetry and the zero-gradient condition."""

import math

import pytest
import torch
from torch import nn

from nqf.errors import NonFiniteError, NormalFormError
from nqf.modules import UnitLayout, UnitSlice, check_truncation_order, from_module, mlp_units
from nqf.networks import TwoLayerMLP
from nqf.structure import mlp

DT = torch.float64


class _Functional(nn.Module):
    """Two-layer net with an arbitrary elementwise function in forward and optional per-unit scales."""

    def __init__(self, fn, D=3, m=5, scales=None):
        super().__init__()
        self.l1 = nn.Linear(D, m, bias=False, dtype=DT)
        self.l2 = nn.Linear(m, 1, bias=False, dtype=DT)
        self.fn = fn
        self.register_buffer("c", torch.ones(m, dtype=DT) if scales is None else torch.as_tensor(scales, dtype=DT))

    def forward(self, x):
        return self.l2(self.c * self.fn(self.l1(x)))

    units = UnitLayout([UnitSlice("l2.weight", axis=1), UnitSlice("l1.weight", axis=0)])


def test_relu_module_refused_with_explanation():
    seq = nn.Sequential(nn.Linear(3, 4, dtype=DT), nn.ReLU(), nn.Linear(4, 1, dtype=DT))
    with pytest.raises(NormalFormError, match=r"ReLU, which is not three times differentiable.*C³"):
        from_module(seq, mlp_units(seq), torch.randn(5, 3, dtype=DT))


def test_functional_relu_caught_by_truncation_order():
    net = _Functional(torch.relu)
    with pytest.raises(NormalFormError, match=r"shrinks like s\^2\.0.*C³ module"):
        from_module(net, net.units, torch.randn(6, 3, dtype=DT))


def test_abs_kink_caught():
    net = _Functional(torch.abs)  # f = Σ a |u·x| = O(s²) with A = 0: error ~ s²
    with pytest.raises(NormalFormError, match="does not hold to second order"):
        from_module(net, net.units, torch.randn(6, 3, dtype=DT))


def test_non_interchangeable_units():
    net = _Functional(torch.tanh, scales=[1.0, 1.0, 3.0, 1.0, 1.0])  # middle unit differs
    with pytest.raises(NormalFormError, match="units are not interchangeable: unit 2"):
        from_module(net, net.units, torch.randn(6, 3, dtype=DT))
    net = _Functional(torch.tanh, scales=[1.0, 1.0, 1.0, 1.0, 2.0])  # last unit differs
    with pytest.raises(NormalFormError, match="Hessian/gradient of unit 4 differs"):
        from_module(net, net.units, torch.randn(6, 3, dtype=DT))


def test_zgz_carry_and_require():
    X = torch.randn(5, 2, dtype=DT)
    net = TwoLayerMLP(2, 3, 1, "sigmoid")
    op = from_module(net, net.units, X)
    assert not op.satisfies_zgz and op.linear is not None and op.cross is None
    with pytest.raises(NormalFormError, match="zero-gradient condition fails"):
        from_module(net, net.units, X, zgz="require")


def test_cross_unit_term_of_a_non_additive_module():
    """f = Σ_i a_i tanh(u_i·x) + (Σ_i a_i)² + Σ_i a_i: b = e_a, B = e_a e_aᵀ, A = MLP form + e_a e_aᵀ."""

    class Sq(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(2, 4, bias=False, dtype=DT)
            self.l2 = nn.Linear(4, 1, bias=False, dtype=DT)

        def forward(self, x):
            s = self.l2.weight.sum()
            return self.l2(torch.tanh(self.l1(x))) + s**2 + s

    net = Sq()
    units = UnitLayout([UnitSlice("l2.weight", axis=1), UnitSlice("l1.weight", axis=0)])
    X = torch.randn(4, 2, dtype=DT)
    op = from_module(net, units, X)
    assert op.linear is not None and op.cross is not None
    e_a = torch.zeros(3, dtype=DT)
    e_a[0] = 1.0
    torch.testing.assert_close(op.linear[:, 0], e_a.expand(4, 3))
    torch.testing.assert_close(op.cross.dense(), torch.outer(e_a, e_a).expand(4, 3, 3))
    torch.testing.assert_close(op.dense(), mlp(X, "tanh").dense() + torch.outer(e_a, e_a))
    slope = check_truncation_order(net, units, op, X)
    assert slope >= 2.7


def test_bad_arguments():
    X = torch.randn(4, 3, dtype=DT)
    net = TwoLayerMLP(3, 4)
    with pytest.raises(TypeError, match="`module` must be a torch.nn.Module"):
        from_module(lambda x: x, net.units, X)
    with pytest.raises(TypeError, match="`units` must be a UnitLayout"):
        from_module(net, ["readout.weight"], X)
    with pytest.raises(KeyError, match="does not have"):
        from_module(net, [UnitSlice("nope.weight", 0)], X)
    with pytest.raises(ValueError, match="at least 2 are needed"):
        from_module(TwoLayerMLP(3, 1), TwoLayerMLP(3, 1).units, X)
    with pytest.raises(NonFiniteError, match="`inputs` must be finite"):
        from_module(net, net.units, torch.full((2, 3), math.nan, dtype=DT))
    with pytest.raises(ValueError, match="`zgz` must be"):
        from_module(net, net.units, X, zgz="ignore")


def test_float32_module():
    X = torch.randn(6, 3)
    net = TwoLayerMLP(3, 4, 2, dtype=torch.float32)
    op = from_module(net, net.units, X)
    assert op.dtype == torch.float32
    torch.testing.assert_close(op.dense(), mlp(X, n_outputs=2).dense(), rtol=1e-6, atol=1e-6)


def test_one_odd_unit_in_a_wide_module_at_small_init_is_caught():
    """m = 300 units already at the small-initialisation scale (‖W‖ ~ 1e-4), one with a 1.5× output coefficient.

    The symmetry check must not inherit the module's tiny scale (it tests at unit weights of size ≥ 0.1). A
    buffer sized by the width cannot be narrowed: from_module says it falls back to the full module.
    """
    net = _Functional(torch.tanh, D=5, m=300, scales=[1.5 if i == 7 else 1.0 for i in range(300)])
    W = torch.randn(6, 300, dtype=DT)
    net.units.set_W(net, 1e-4 * W / W.norm())
    with (
        pytest.warns(RuntimeWarning, match="no faithful 1-unit copy"),
        pytest.raises(NormalFormError, match="units are not interchangeable: unit 7"),
    ):
        from_module(net, net.units, torch.randn(10, 5, dtype=DT))
