"""The next orders of the normal form (cubic and quartic terms), analytic and by torch.func."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from nqf.modules import get_unit_weights, set_unit_weights
from nqf.networks import TwoLayerMLP
from nqf.structure import HigherOrderTerms, mlp, mlp_higher_order

DT = torch.float64
SCALES = (0.4, 0.2, 0.1, 0.05)
#: The residual f(sW) − (f(0) + s²Q + s³T₃ + s⁴T₄) must shrink at least like s^{4.5} when s halves
#: (it is O(s⁵); an error in the quartic leaves O(s⁴), ratio 16, log₂ = 4).
MIN_ORDER = 4.5


def _module_at(module, W):
    m = copy.deepcopy(module)
    set_unit_weights(m, m.units, W)
    return m


def _outputs(module, X, output=None):
    with torch.no_grad():
        out = module(X)
    out = out if output is None else output(out)
    return out.reshape(X.shape[0], -1)


def _observed_orders(module, X, W, quad, terms: HigherOrderTerms, flip_quartic=False):
    """log₂ of the residual's shrink factor when s halves, for consecutive scales."""
    f0 = _outputs(_module_at(module, torch.zeros_like(W)), X)
    c3, c4 = terms.cubic(W), terms.quartic(W)
    if flip_quartic:
        c4 = -c4
    res = []
    for s in SCALES:
        fs = _outputs(_module_at(module, s * W), X)
        r = fs - f0 - s**2 * quad - s**3 * c3 - s**4 * c4
        res.append(float(r.abs().max()))
    return [math.log2(a / b) for a, b in zip(res, res[1:], strict=False)], res


def _mlp_case(act, bias, C, seed=0, N=12, D=4, m=3):
    torch.manual_seed(seed)
    X = torch.randn(N, D, dtype=DT)
    net = TwoLayerMLP(D, m, C, activation=act, bias=bias, dtype=DT)
    W = torch.randn(get_unit_weights(net, net.units).shape, dtype=DT)
    return X, net, W


MLP_CASES = [
    (act, bias, C)
    for act in ("tanh", "sin", "gelu", "silu", "softplus-centred")
    for bias in (False, True)
    for C in (1, 3)
]


@pytest.mark.parametrize("act,bias,C", MLP_CASES)
def test_mlp_higher_order_against_the_real_module(act, bias, C):
    X, net, W = _mlp_case(act, bias, C)
    terms = mlp_higher_order(X, act, bias=bias, n_outputs=C)
    assert (terms.p, terms.N, terms.C) == (W.shape[0], X.shape[0], C)
    quad = mlp(X, act, bias=bias, n_outputs=C).forward_factor(W).reshape(X.shape[0], C)
    orders, res = _observed_orders(net, X, W, quad, terms)
    assert min(orders) > MIN_ORDER, (orders, res)


@pytest.mark.parametrize("act", ["tanh", "sin"])
def test_mlp_flipped_quartic_is_caught(act):
    """Planted error: the quartic's sign flipped leaves an O(s⁴) residual, which the order check sees."""
    X, net, W = _mlp_case(act, False, 2)
    terms = mlp_higher_order(X, act, n_outputs=2)
    quad = mlp(X, act, n_outputs=2).forward_factor(W)
    orders, _ = _observed_orders(net, X, W, quad, terms, flip_quartic=True)
    assert max(orders) < MIN_ORDER


def test_mlp_odd_activation_has_no_cubic():
    X, _, W = _mlp_case("tanh", True, 3)
    assert float(mlp_higher_order(X, "tanh", bias=True, n_outputs=3).cubic(W).abs().max()) == 0.0


@pytest.mark.parametrize("act,bias,C", [("gelu", True, 3), ("tanh", False, 1), ("silu", False, 2)])
def test_mlp_gradient_against_autograd(act, bias, C):
    X, _, W = _mlp_case(act, bias, C)
    terms = mlp_higher_order(X, act, bias=bias, n_outputs=C)
    R = torch.randn(X.shape[0], C, dtype=DT)
    for value, gradient in (
        (terms.cubic, terms.cubic_gradient),
        (terms.quartic, terms.quartic_gradient),
        (terms.value, terms.gradient),
    ):
        Wr = W.clone().requires_grad_(True)
        (g,) = torch.autograd.grad((value(Wr) * R).sum(), Wr)
        torch.testing.assert_close(gradient(W, R), g, rtol=1e-12, atol=1e-12)


def test_mlp_take_is_a_sample_subset():
    X, _, W = _mlp_case("gelu", True, 2)
    terms = mlp_higher_order(X, "gelu", bias=True, n_outputs=2)
    idx = torch.tensor([1, 5, 7])
    sub = terms.take(idx)
    assert sub.N == 3
    torch.testing.assert_close(sub.value(W), terms.value(W)[idx])
    with pytest.raises(AttributeError):
        terms.p = 3  # type: ignore[misc]
